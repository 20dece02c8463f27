"""The RELMAS model shipped with Arbiter, so the `relmas` profile works before any retraining.

Package data next to this module (`default/relmas.safetensors`, written by
`make relmas-model`), read once per process, as DL2's shipped model is.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from policies.learned.models import ModelLoadError
from policies.learned.relmas.network import RelmasModel

SHIPPED_FILE = "relmas.safetensors"


@dataclass(frozen=True)
class ShippedModel:
    model: RelmasModel
    version: str
    """`shipped-` and the first 12 hex digits of the file's SHA-256."""


def shipped_bytes() -> bytes:
    path = resources.files("policies.learned.relmas").joinpath("default", SHIPPED_FILE)
    try:
        return path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"the shipped RELMAS model is missing: {error}") from error


@cache
def shipped_model() -> ShippedModel:
    data = shipped_bytes()
    version = "shipped-" + hashlib.sha256(data).hexdigest()[:12]
    return ShippedModel(model=RelmasModel.from_bytes(data), version=version)
