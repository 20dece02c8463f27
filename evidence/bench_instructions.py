"""Count the machine instructions of a decision: before and after, free of the machine's drift.

    .venv/bin/python -m evidence.bench_instructions --profiles tiresias,drf
    .venv/bin/python -m evidence.bench_instructions --checkout ../old   # against an older core

Wall-clock figures on a shared virtual machine move by tens of percent from one minute
to the next, so a change worth a few percent cannot be told from noise by timing it.
The number of instructions a decision executes does not drift: it is counted by
Valgrind's callgrind tool (`valgrind` must be on the PATH; Debian's package
`valgrind`), which runs the interpreter on a simulated CPU.

For each profile and checkout, a child process decodes the snapshot (default
`examples/large.json`), builds the profile's pipeline, makes two warm-up decisions and
then `--decisions` more (default 10), each with an empty state, as `bench_engine`
makes them. It runs twice under callgrind, once making none of the timed decisions:
the difference of the two counts, divided by `--decisions`, is one decision's
instructions (`Pipeline.run` alone; start-up and imports cancel). Hash randomisation
is off in the children, so the two runs take the same paths. Each count takes a minute
or more (the imports alone run some 7 billion instructions under the simulated CPU);
the two runs of a pair go in parallel, as instruction counts do not depend on what
else runs.

Instructions are not time: a NumPy call on many cells, a cache miss and a branch
mispredicted all cost differently. They decide whether a change of the interpreted
code did less work, which is what the speed work's exact, behaviour-preserving changes
need to show.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from evidence.runner import ROOT, add_json, add_quiet, command_line, progress, write_json

DEFAULT_PROFILES = ("fifo", "sjf", "srtf", "tiresias", "drf", "optimus")
DEFAULT_SNAPSHOT = ROOT / "examples" / "large.json"
WARM_UP = 2
COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Count:
    """One decision's instructions for a profile, from one checkout."""

    profile: str
    checkout: str
    per_decision: float
    decisions: int


def collected(valgrind_output: str) -> int:
    """The instruction count callgrind prints when the program ends."""
    found = COLLECTED.findall(valgrind_output)
    if len(found) != 1:
        raise RuntimeError(f"callgrind printed no single instruction count:\n{valgrind_output}")
    return int(found[0])


def per_decision(without: int, with_decisions: int, decisions: int) -> float:
    """Instructions per decision from a run without and a run with `decisions` decisions."""
    if decisions < 1:
        raise ValueError("decisions must be 1 or more")
    return (with_decisions - without) / decisions


def child_command(checkout: Path | None, profile: str, snapshot: Path, decisions: int) -> list[str]:
    """The callgrind run of one child (the output file is discarded: only the total counts)."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-m",
        "evidence.bench_instructions",
        "--child",
        profile,
        str(snapshot),
        str(decisions),
    ]
    if checkout is not None:
        command += ["--checkout", str(checkout)]
    return command


def count(checkout: Path | None, profile: str, snapshot: Path, decisions: int) -> float:
    """One decision's instructions: two children under callgrind, in parallel."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def total(n: int) -> int:
        done = subprocess.run(
            child_command(checkout, profile, snapshot, n),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"child for {profile} failed:\n{done.stderr[-4000:]}")
        return collected(done.stderr)

    with ThreadPoolExecutor(max_workers=2) as pool:
        without, with_decisions = pool.map(total, (0, decisions))
    return per_decision(without, with_decisions, decisions)


def child(profile: str, snapshot: Path, decisions: int, checkout: Path | None) -> None:
    """What runs under callgrind: set-up, warm-up, then `decisions` decisions."""
    from evidence.bench_engine import load_core  # noqa: PLC0415 - after --checkout is known

    core = load_core(checkout)
    registry = core.build_registry()
    known = core.load_profiles(registry)
    if profile not in known:
        raise SystemExit(f"unknown profile {profile!r}; known: {', '.join(sorted(known))}")
    pipeline = core.Pipeline.build(known[profile], registry)
    decoded = core.decode_snapshot(snapshot.read_bytes())
    for _ in range(WARM_UP):
        pipeline.run(decoded, state=None, seed=0, decision_id="bench-instructions")
    gc.collect()
    gc.freeze()  # as the service does after start-up: set-up's objects stay out of collections
    for _ in range(decisions):
        pipeline.run(decoded, state=None, seed=0, decision_id="bench-instructions")


def render(counts: Sequence[Count], checkout: Path | None) -> str:
    here = {c.profile: c for c in counts if c.checkout == "this checkout"}
    lines = []
    if checkout is None:
        lines += ["| profile | instructions per decision (millions) |", "|---|---:|"]
        lines += [f"| {c.profile} | {c.per_decision / 1e6:,.1f} |" for c in here.values()]
    else:
        lines += [
            f"| profile | `{checkout}` (millions) | this checkout (millions) | change |",
            "|---|---:|---:|---:|",
        ]
        for c in counts:
            if c.checkout == "this checkout":
                continue
            after = here[c.profile].per_decision
            change = (after - c.per_decision) / c.per_decision * 100
            lines.append(
                f"| {c.profile} | {c.per_decision / 1e6:,.1f} | {after / 1e6:,.1f} | "
                f"{change:+.1f} % |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--profiles", default=",".join(DEFAULT_PROFILES))
    parser.add_argument("--snapshot", type=Path, default=DEFAULT_SNAPSHOT)
    parser.add_argument(
        "--decisions", type=int, default=10, help="decisions counted per run (default 10)"
    )
    parser.add_argument(
        "--checkout", type=Path, default=None, help="also count another checkout's core"
    )
    parser.add_argument("--child", nargs=3, metavar=("PROFILE", "SNAPSHOT", "N"), help="(internal)")
    add_json(parser)
    add_quiet(parser)
    args = parser.parse_args(argv)
    if args.child is not None:
        profile, snapshot, n = args.child
        child(profile, Path(snapshot), int(n), args.checkout)
        return 0
    if args.decisions < 1:
        parser.error("argument --decisions: must be 1 or more")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on the PATH (Debian: apt-get install valgrind)")
    say = progress(args.quiet)
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    sides: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.checkout is not None:
        sides.insert(0, (str(args.checkout), args.checkout.resolve()))
    counts = []
    for profile in profiles:
        for name, checkout in sides:
            say(f"{profile}, {name}: two runs under callgrind")
            figure = count(checkout, profile, args.snapshot.resolve(), args.decisions)
            counts.append(Count(profile, name, figure, args.decisions))
    print(render(counts, args.checkout))
    if args.json is not None:
        write_json(args.json, {"snapshot": str(args.snapshot), "counts": [vars(c) for c in counts]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
