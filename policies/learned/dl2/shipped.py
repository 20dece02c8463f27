"""The DL2 models shipped with Arbiter, so the `dl2` and `dl2-srtf` profiles work before
any retraining.

The files are package data next to this module (`default/dl2.safetensors` for the
`dl2` profile, `default/dl2_srtf.safetensors` for `dl2-srtf`; both written by
`evidence/train_dl2.py`, docs/dl2.md). Reading them is the one file access in `policies`:
a package's own data, read once per process and shared by every policy instance
(inference never changes a model, so sharing is safe).
"""

from __future__ import annotations

from functools import cache

from policies.learned.dl2.network import Dl2Model
from policies.learned.weights import Shipped, load_shipped, shipped_file

SHIPPED_FILE = "dl2.safetensors"
"""The `dl2` profile's model: trained behind FIFO with backfill."""
SHIPPED_SRTF_FILE = "dl2_srtf.safetensors"
"""The `dl2-srtf` profile's model: trained behind SRTF, every waiting job its minimum."""

ShippedModel = Shipped[Dl2Model]


def shipped_bytes(filename: str = SHIPPED_FILE) -> bytes:
    """A shipped weights file; ModelLoadError when it is missing."""
    return shipped_file("policies.learned.dl2", filename, "DL2")


@cache
def shipped_model(filename: str = SHIPPED_FILE) -> ShippedModel:
    """A shipped model, loaded once; ModelLoadError (not cached) when it cannot be."""
    return load_shipped(shipped_bytes(filename), Dl2Model.from_bytes)
