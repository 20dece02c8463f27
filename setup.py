"""The compiled part of Arbiter; everything else is declared in pyproject.toml."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "policies/common/_oasis.pyx"
# The module says which source it was built from, so that a test can tell a stale build
# (a source edited since `pip install -e .`) from a current one.
source_sha256 = hashlib.sha256(Path(SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        # Part of OASiS's schedule search. No floating-point contraction: every sum and
        # product must round as the interpreter's and NumPy's do.
        Extension(
            "policies.common._oasis",
            sources=[SOURCE],
            define_macros=[("OASIS_SOURCE_SHA256", f'"{source_sha256}"')],
            extra_compile_args=["-O2", "-ffp-contract=off"],
        )
    ]
)
