"""The RELMAS model shipped with Arbiter, so the `relmas` profile works before any retraining.

Package data next to this module (`default/relmas.safetensors`, written by
`make relmas-model`), read once per process, as DL2's shipped model is.
"""

from __future__ import annotations

from functools import cache

from policies.learned.relmas.network import RelmasModel
from policies.learned.weights import Shipped, load_shipped, shipped_file

SHIPPED_FILE = "relmas.safetensors"

ShippedModel = Shipped[RelmasModel]


def shipped_bytes() -> bytes:
    """The shipped weights file; ModelLoadError when it is missing."""
    return shipped_file("policies.learned.relmas", SHIPPED_FILE, "RELMAS")


@cache
def shipped_model() -> ShippedModel:
    """The shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    return load_shipped(shipped_bytes(), RelmasModel.from_bytes)
