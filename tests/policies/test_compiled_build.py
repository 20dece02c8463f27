"""The compiled part of the core (setup.py) is built from the sources in the tree.

An editable install compiles each `.pyx` once; editing one afterwards changes nothing
until the next build, so a stale build would test old code silently.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType

import pytest

from policies import _capacity
from policies.common import _oasis

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        (_oasis, "policies/common/_oasis.pyx"),
        (_capacity, "policies/_capacity.pyx"),
    ],
    ids=["oasis-search", "capacity"],
)
def test_each_compiled_module_is_built_from_the_current_source(
    module: ModuleType, source: str
) -> None:
    current = hashlib.sha256((ROOT / source).read_bytes()).hexdigest()
    built = module.SOURCE_SHA256
    assert built == current, (
        f"{source} changed since it was compiled: run `make install` "
        "(or `pip install -e .`) to rebuild it"
    )
