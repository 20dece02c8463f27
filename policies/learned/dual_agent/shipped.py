"""The dual-agent model shipped with Arbiter, so the `dual-agent` profile works before any
retraining: package data next to this module (`default/dual_agent.safetensors`, written by
`scripts/train_dual_agent.py`), read once per process and shared (inference never changes
a model)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.models import ModelLoadError

SHIPPED_FILE = "dual_agent.safetensors"


@dataclass(frozen=True)
class ShippedModel:
    model: DualAgentModel
    version: str
    """`shipped-` and the first 12 hex digits of the file's SHA-256."""


def shipped_bytes() -> bytes:
    """The shipped weights file; ModelLoadError when it is missing."""
    path = resources.files("policies.learned.dual_agent").joinpath("default", SHIPPED_FILE)
    try:
        return path.read_bytes()
    except OSError as error:
        raise ModelLoadError(f"the shipped dual-agent model is missing: {error}") from error


@cache
def shipped_model() -> ShippedModel:
    """The shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    data = shipped_bytes()
    version = "shipped-" + hashlib.sha256(data).hexdigest()[:12]
    return ShippedModel(model=DualAgentModel.from_bytes(data), version=version)
