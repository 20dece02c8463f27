"""The DL2 model shipped with Arbiter, so the `dl2` profile works before any retraining.

The file is package data next to this module (`default/dl2.safetensors`, written
by `scripts/train_dl2.py`). Reading it is the one file access in `policies`: a
package's own data, read once per process and shared by every policy instance
(inference never changes a model, so sharing is safe).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from policies.learned.dl2.network import Dl2Model
from policies.learned.models import ModelLoadError

SHIPPED_FILE = "dl2.safetensors"


@dataclass(frozen=True)
class ShippedModel:
    model: Dl2Model
    version: str
    """`shipped-` and the first 12 hex digits of the file's SHA-256: names the exact weights."""


def shipped_bytes() -> bytes:
    """The shipped weights file; ModelLoadError when it is missing."""
    path = resources.files("policies.learned.dl2").joinpath("default", SHIPPED_FILE)
    try:
        return path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"the shipped DL2 model is missing: {error}") from error


@cache
def shipped_model() -> ShippedModel:
    """The shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    data = shipped_bytes()
    version = "shipped-" + hashlib.sha256(data).hexdigest()[:12]
    return ShippedModel(model=Dl2Model.from_bytes(data), version=version)
