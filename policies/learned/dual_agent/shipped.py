"""The dual-agent model shipped with Arbiter, so the `dual-agent` profile works before any
retraining: package data next to this module (`default/dual_agent.safetensors`, written by
`evidence/train_dual_agent.py`), read once per process and shared (inference never changes
a model)."""

from __future__ import annotations

from functools import cache

from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.weights import Shipped, load_shipped, shipped_file

SHIPPED_FILE = "dual_agent.safetensors"

ShippedModel = Shipped[DualAgentModel]


def shipped_bytes() -> bytes:
    """The shipped weights file; ModelLoadError when it is missing."""
    return shipped_file("policies.learned.dual_agent", SHIPPED_FILE, "dual-agent")


@cache
def shipped_model() -> ShippedModel:
    """The shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    return load_shipped(shipped_bytes(), DualAgentModel.from_bytes)
