"""What every evidence and benchmark command shares: where things are, the common
options, progress, timing, and writing a figure down with where it was taken.

Each command keeps its own measurement and its own table; only the plumbing that they
all repeated lives here. Importing this module imports nothing of the project, so
`bench_engine --checkout` can still load another checkout's core afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import httpx

from evidence.results_sections import splice

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: the commands read `examples/` and write `docs/` and the shipped models."""
EXAMPLES = ROOT / "examples"
RESULTS = ROOT / "docs" / "results.md"


def command_line(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose description is the first line of the command's module docstring."""
    return argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])


def add_out(parser: argparse.ArgumentParser, default: Path = RESULTS) -> None:
    """`--out FILE`: the Markdown file whose section the command writes."""
    parser.add_argument("--out", type=Path, default=default)


def add_json(parser: argparse.ArgumentParser, help: str = "also write the figures here") -> None:
    """`--json FILE`: the raw figures as JSON, beside the printed table."""
    parser.add_argument("--json", type=Path, default=None, help=help)


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def progress(quiet: bool = False) -> Callable[[str], None]:
    """Print progress on stderr (flushed, so it interleaves with a child's output)."""

    def say(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return say


@dataclass
class Stopwatch:
    """Wall and CPU time since it was made (CPU: this process's, every thread)."""

    wall_started: float = field(default_factory=time.perf_counter)
    cpu_started: float = field(default_factory=time.process_time)

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.wall_started

    @property
    def cpu_s(self) -> float:
        return time.process_time() - self.cpu_started


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile (0–1) of sorted values, linear between the closest ranks (latency tables)."""
    if not sorted_values:
        raise ValueError("no values")
    position = q * (len(sorted_values) - 1)
    below = int(position)
    above = min(below + 1, len(sorted_values) - 1)
    fraction = position - below
    return sorted_values[below] * (1 - fraction) + sorted_values[above] * fraction


def over_seeds(differences: Sequence[float]) -> tuple[int, float, float]:
    """The rule every sentence of the evidence compares by, on per-seed differences
    (paired: a seed gives both sides the same jobs and machines): (sign, mean, standard
    deviation), sign 0 when the mean is no larger than the deviation (a tie), else the
    mean's sign. One difference has no spread (infinite): always a tie."""
    mean = statistics.fmean(differences)
    spread = statistics.stdev(differences) if len(differences) > 1 else math.inf
    return (0 if abs(mean) <= spread else (1 if mean > 0 else -1)), mean, spread


def machine() -> str:
    """The processor architecture the figures were taken on, as the tables name it."""
    return platform.machine()


def interpreter(maps: Path = Path("/proc/self/maps")) -> str:
    """The interpreter the figures were taken with: its version and how its core is
    linked. The same decisions took 12 to 18 % less time on an interpreter whose core is
    linked into the executable and built with profile-guided and link-time optimisation
    (Debian's) than on one that loads it as a shared library, built with `./configure`'s
    defaults (docs/benchmarks.md, "The interpreter's build"). Whether
    an interpreter was built with those optimisations is not always recorded in it;
    the linkage is, in the libraries the process has mapped (Linux)."""
    name = f"{platform.python_implementation()} {platform.python_version()}"
    try:
        mapped = maps.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return name
    shared = any(
        Path(line.split()[-1]).name.startswith("libpython")
        for line in mapped.splitlines()
        if "/" in line
    )
    return f"{name}, libpython {'shared' if shared else 'in the executable'}"


def commit() -> str | None:
    """The checkout's commit (short hash, `+` when files differ from it), None outside git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+" if dirty else "")


def provenance() -> dict[str, str | None]:
    """Where a figure was taken: Python, its build, machine and commit, for JSON records."""
    return {
        "python": platform.python_version(),
        "interpreter": interpreter(),
        "machine": machine(),
        "commit": commit(),
    }


def write_json(path: Path, figures: dict[str, object]) -> None:
    """Write `figures` after the provenance, say so on stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**provenance(), **figures}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def write_section(path: Path, name: str, body: str, wall_s: float | None = None) -> None:
    """Put `body` into `path` as section `name` (results_sections), say so on stderr."""
    splice(path, name, body)
    took = "" if wall_s is None else f" in {wall_s / 60:.1f} min"
    print(f"wrote section {name!r} of {path}{took}", file=sys.stderr)


class Timed(Protocol):
    """Results that say how long their run took."""

    @property
    def wall_s(self) -> float: ...


T = TypeVar("T", bound=Timed)


def section_command(
    doc: str | None,
    section: str,
    run: Callable[[bool, argparse.Namespace], T],
    render: Callable[[T], str],
    argv: Sequence[str] | None,
    *,
    quick: str,
    what: str,
) -> int:
    """The command of an evidence section whose tasks run on a runner: `--out`, `--quick`
    (`quick` says what the smoke run is), `--processes N | --ray ADDRESS` for `what`; runs,
    renders and writes the section."""
    from simulator.sweep_cli import add_runner_arguments  # noqa: PLC0415 - the simulator

    parser = command_line(doc)
    add_out(parser)
    parser.add_argument("--quick", action="store_true", help=quick)
    add_runner_arguments(parser, default_processes=1, what=what)
    args = parser.parse_args(argv)
    results = run(args.quick, args)
    write_section(args.out, section, render(results), results.wall_s)
    return 0


def wait_until_ready(
    url: str, server: subprocess.Popen[bytes], log_path: Path, timeout_s: float
) -> None:
    """Poll `GET /readyz` of a started `arbiter serve` until it answers 200; exit with
    the tail of its log if the process ends or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise SystemExit(
                f"arbiter serve exited ({server.returncode}) before it was ready:\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise SystemExit(
                f"arbiter serve was not ready within {timeout_s:g} s:\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        time.sleep(0.5)
