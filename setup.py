"""The compiled part of Arbiter; everything else is declared in pyproject.toml."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup


def compiled(module: str, source: str, macro: str) -> Extension:
    """A Cython module that says which source it was built from (`macro`, its SHA-256),
    so that a test can tell a stale build (a source edited since `pip install -e .`)
    from a current one. No floating-point contraction: every sum and product must round
    as the interpreter's and NumPy's do."""
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return Extension(
        module,
        sources=[source],
        define_macros=[(macro, f'"{digest}"')],
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )


setup(
    ext_modules=[
        # Part of OASiS's schedule search.
        compiled("policies.common._oasis", "policies/common/_oasis.pyx", "OASIS_SOURCE_SHA256"),
        # The free capacity's per-job queries and commits.
        compiled("policies._capacity", "policies/_capacity.pyx", "CAPACITY_SOURCE_SHA256"),
    ]
)
