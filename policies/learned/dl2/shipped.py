"""The DL2 model shipped with Arbiter, so the `dl2` profile works before any retraining.

The file is package data next to this module (`default/dl2.safetensors`, written
by `evidence/train_dl2.py`). Reading it is the one file access in `policies`: a
package's own data, read once per process and shared by every policy instance
(inference never changes a model, so sharing is safe).
"""

from __future__ import annotations

from functools import cache

from policies.learned.dl2.network import Dl2Model
from policies.learned.weights import Shipped, load_shipped, shipped_file

SHIPPED_FILE = "dl2.safetensors"

ShippedModel = Shipped[Dl2Model]


def shipped_bytes() -> bytes:
    """The shipped weights file; ModelLoadError when it is missing."""
    return shipped_file("policies.learned.dl2", SHIPPED_FILE, "DL2")


@cache
def shipped_model() -> ShippedModel:
    """The shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    return load_shipped(shipped_bytes(), Dl2Model.from_bytes)
