"""Where the shared data lives (traces, cluster specs, performance tables).

The data is not part of the package: it sits in a `shared/` folder beside the
checkout (`../shared` from the repository root) or inside it (`./shared`, as
on machines that receive a copy of the working tree). `ARBITER_SHARED_DIR`
overrides both. Nothing is looked up at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

SHARED_ENV = "ARBITER_SHARED_DIR"


class SharedDataNotFound(FileNotFoundError):
    """No folder with the shared traces and performance tables was found."""


def shared_dir() -> Path:
    """The folder holding `traces/`, `clusters/` and `perf/`."""
    override = os.environ.get(SHARED_ENV)
    if override:
        path = Path(override)
        if not (path / "perf").is_dir():
            raise SharedDataNotFound(f"{SHARED_ENV}={override} has no perf/ folder")
        return path
    repo_root = Path(__file__).resolve().parent.parent
    for candidate in (repo_root / "shared", repo_root.parent / "shared", Path.cwd() / "shared"):
        if (candidate / "perf").is_dir():
            return candidate
    raise SharedDataNotFound(
        f"no shared data folder (with perf/) beside or inside {repo_root}; set {SHARED_ENV}"
    )


def perf_dir() -> Path:
    return shared_dir() / "perf"


def traces_dir() -> Path:
    return shared_dir() / "traces"


def clusters_dir() -> Path:
    return shared_dir() / "clusters"
