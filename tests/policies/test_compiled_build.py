"""The compiled part of the core (setup.py) is built from the sources in the tree.

An editable install compiles `policies/common/_oasis.pyx` once; editing it afterwards
changes nothing until the next build, so a stale build would test old code silently.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from policies.common import _oasis

ROOT = Path(__file__).resolve().parents[2]


def test_the_compiled_search_is_built_from_the_current_source() -> None:
    source = ROOT / "policies" / "common" / "_oasis.pyx"
    current = hashlib.sha256(source.read_bytes()).hexdigest()
    built = _oasis.SOURCE_SHA256
    assert built == current, (
        f"{source.relative_to(ROOT)} changed since it was compiled: run `make install` "
        "(or `pip install -e .`) to rebuild it"
    )
