"""Count the machine instructions of a decision: before and after, free of the machine's drift.

    .venv/bin/python -m evidence.bench_instructions --profiles tiresias,drf
    .venv/bin/python -m evidence.bench_instructions --checkout ../old   # against an older core
    .venv/bin/python -m evidence.bench_instructions --profiles oasis --decisions 3 --by-object

Wall-clock figures on a shared virtual machine move by tens of percent from one minute
to the next, so a change worth a few percent cannot be told from noise by timing it.
The number of instructions a decision executes does not drift: it is counted by
Valgrind's callgrind tool (`valgrind` must be on the PATH; Debian's package
`valgrind`), which runs the interpreter on a simulated CPU.

For each profile and checkout, a child process builds the profile's pipeline, makes
two warm-up decisions and then `--decisions` more (default 10), each with an empty
state and on a snapshot (default `examples/large.json`) decoded and checked for it
beforehand, as `bench_engine` makes them. It runs twice under callgrind, once making
none of the counted decisions (but decoding and checking as many snapshots): the
difference of the two counts, divided by `--decisions`, is one decision's
instructions (`Pipeline.run` alone; start-up, imports and decoding cancel). Hash randomisation
is off in the children, so the two runs take the same paths, and OpenBLAS runs one
thread (its idle threads' spinning would be counted too). Each count takes a minute
or more (the imports alone run some 7 billion instructions under the simulated CPU);
the two runs of a pair go in parallel, as instruction counts do not depend on what
else runs.

With `--by-object` each child also writes its callgrind profile, the instructions of
each shared object's own code are summed off it (:func:`objects`), and the two
children's sums (the interpreter, NumPy, the C library, …) are differenced the same
way: which machinery a decision's instructions run in.

With `--through-app` each child instead sends decision requests (`{"profile": …,
"snapshot": …}`, default snapshot `examples/small.json`) through the service's ASGI
application, built by `create_app` on embedded defaults in a temporary folder, on an
event loop of its own, without sockets: a request's decoding, checks, decision,
encoding, logging hand-off and the framework's layers, as one worker serves it. Only
the requesting thread is counted (callgrind's `--separate-threads`), and the decision
log's writer is held back for the run, so the count is the request path's own. It is
not exact to the instruction: a garbage collection runs on whichever thread allocates
when its threshold passes, so runs of one commit can differ by a per cent or two.

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
import tempfile
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from evidence.runner import ROOT, add_json, add_quiet, command_line, progress, write_json

DEFAULT_PROFILES = ("fifo", "sjf", "srtf", "tiresias", "drf", "optimus")
DEFAULT_SNAPSHOT = ROOT / "examples" / "large.json"
DEFAULT_REQUEST_SNAPSHOT = ROOT / "examples" / "small.json"
WARM_UP = 2
COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)
SHOWN_OBJECTS = 6


@dataclass(frozen=True)
class Count:
    """One decision's instructions for a profile, from one checkout."""

    profile: str
    checkout: str
    per_decision: float
    decisions: int
    by_object: dict[str, float] | None = None
    """With `--by-object`: one decision's own instructions per shared object."""


def collected(valgrind_output: str) -> int:
    """The instruction count callgrind prints when the program ends."""
    found = COLLECTED.findall(valgrind_output)
    if len(found) != 1:
        raise RuntimeError(f"callgrind printed no single instruction count:\n{valgrind_output}")
    return int(found[0])


def objects(profile: str) -> Counter[str]:
    """Own instructions per shared object (its file name), read off a callgrind profile.

    In callgrind's format, `ob=` sets the object of the cost lines that follow (a name
    is given once with its number, `(3) /lib/libc.so.6`, there or in a callee's `cob=`,
    then by the number alone), and the cost line after a `calls=` line is the call's
    inclusive cost, the callee's and not the caller's own, so it is left out: the sums
    over objects add up to the profile's total.
    """
    names: dict[str, str] = {}
    totals: Counter[str] = Counter()
    current, inclusive = "?", False
    for line in profile.splitlines():
        if line.startswith(("ob=", "cob=")):
            number, _, name = line.partition("=")[2].partition(" ")
            if name:
                names[number] = Path(name).name
            if line.startswith("ob="):
                current = names.get(number, Path(number).name)
        elif line.startswith("calls="):
            inclusive = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            if inclusive:
                inclusive = False
                continue
            fields = line.split()  # a position, then the count; a count of 0 may be left out
            if len(fields) > 1:
                totals[current] += int(fields[1])
    return totals


def per_decision(without: int, with_decisions: int, decisions: int) -> float:
    """Instructions per decision from a run without and a run with `decisions` decisions."""
    if decisions < 1:
        raise ValueError("decisions must be 1 or more")
    return (with_decisions - without) / decisions


def child_command(
    checkout: Path | None,
    profile: str,
    snapshot: Path,
    decisions: int,
    out: Path | None = None,
    *,
    through_app: bool = False,
    prepared: int | None = None,
) -> list[str]:
    """The callgrind run of one child; its profile goes to `out`, or nowhere when only
    the total counts. Through the app, one profile per thread, `out` its prefix. With
    `prepared`, the child decodes and checks that many snapshots before it counts, used
    or not, so that the two children of a pair do the same work but the decisions."""
    command = ["valgrind", "--tool=callgrind"]
    if through_app:
        command += ["--separate-threads=yes"]
    command += [
        f"--callgrind-out-file={out or os.devnull}",
        sys.executable,
        "-m",
        "evidence.bench_instructions",
    ]
    if prepared is not None:
        command += ["--prepared", str(prepared)]
    command += [
        "--child",
        profile,
        str(snapshot),
        str(decisions),
    ]
    if through_app:
        command += ["--through-app"]
    if checkout is not None:
        command += ["--checkout", str(checkout)]
    return command


SUMMARY = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)


def first_thread(prefix: Path) -> int:
    """The instructions of a run's first thread (the one that sent the requests), read
    off callgrind's per-thread profile `<prefix>-01`."""
    found = SUMMARY.findall(Path(f"{prefix}-01").read_text())
    if not found:
        raise RuntimeError(f"no total in callgrind's profile {prefix}-01")
    return int(found[0])


def count(
    checkout: Path | None,
    profile: str,
    snapshot: Path,
    decisions: int,
    by_object: bool = False,
    *,
    through_app: bool = False,
) -> tuple[float, dict[str, float] | None]:
    """One decision's instructions: two children under callgrind, in parallel; with
    `by_object`, also its own instructions per shared object (the difference of the two
    children's profiles); `through_app`, a request's, on the thread that sends it."""
    # One BLAS thread: OpenBLAS's idle workers spin for a while before they sleep, and
    # callgrind counts their instructions too, millions a decision that vary from run
    # to run; the decisions' few matrix products are too small to be split anyway.
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}

    with tempfile.TemporaryDirectory() as folder:

        def total(n: int) -> tuple[int, Counter[str]]:
            out = Path(folder) / f"callgrind.{n}" if by_object or through_app else None
            done = subprocess.run(
                child_command(
                    checkout,
                    profile,
                    snapshot,
                    n,
                    out,
                    through_app=through_app,
                    prepared=None if through_app else decisions,
                ),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"child for {profile} failed:\n{done.stderr[-4000:]}")
            if through_app:
                assert out is not None
                return first_thread(out), Counter[str]()
            shares = objects(out.read_text()) if out is not None else Counter[str]()
            return collected(done.stderr), shares

        with ThreadPoolExecutor(max_workers=2) as pool:
            (without, before), (with_decisions, after) = pool.map(total, (0, decisions))
    shares = None
    if by_object:
        shares = {
            name: per_decision(before[name], after[name], decisions) for name in after | before
        }
    return per_decision(without, with_decisions, decisions), shares


def child(
    profile: str, snapshot: Path, decisions: int, checkout: Path | None, prepared: int = 0
) -> None:
    """What runs under callgrind: set-up, warm-up, then `decisions` decisions.

    Each decision is made on a snapshot of its own, decoded and checked before the
    decisions start (`prepared` of them, at least `decisions`), as the service decides
    each request's on the snapshot it just decoded: a snapshot keeps the lookups a
    decision builds on it, which a decision on one decided before would not build.
    """
    from evidence.bench_engine import (  # noqa: PLC0415 - after --checkout is known
        fresh_snapshot,
        load_core,
    )

    core = load_core(checkout)
    registry = core.build_registry()
    known = core.load_profiles(registry)
    if profile not in known:
        raise SystemExit(f"unknown profile {profile!r}; known: {', '.join(sorted(known))}")
    pipeline = core.Pipeline.build(known[profile], registry)
    fresh = partial(fresh_snapshot, snapshot.read_bytes(), core)
    for _ in range(WARM_UP):
        pipeline.run(fresh(), state=None, seed=0, decision_id="bench-instructions")
    snapshots = [fresh() for _ in range(max(prepared, decisions))]
    gc.collect()
    gc.freeze()  # as the service does after start-up: set-up's objects stay out of collections
    for decoded in snapshots[:decisions]:
        pipeline.run(decoded, state=None, seed=0, decision_id="bench-instructions")


def child_through_app(profile: str, snapshot: Path, requests: int) -> None:
    """What runs under callgrind with `--through-app`: the service on embedded defaults,
    warm-up requests, then `requests` more, each answered 200."""
    import asyncio  # noqa: PLC0415 - the child's own needs
    import json  # noqa: PLC0415

    from fastapi.testclient import TestClient  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    body = json.dumps(
        {"profile": profile, "snapshot": json.loads(snapshot.read_bytes())},
        separators=(",", ":"),
    ).encode()
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]

    async def one(app: Any) -> None:
        sent: list[dict[str, Any]] = []
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if given:
                await asyncio.Event().wait()  # no disconnect while the answer is made
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/decisions",
            "raw_path": b"/v1/decisions",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 50000),
            "state": {},
        }
        await app(scope, receive, send)
        if sent[0]["status"] != 200:
            raise RuntimeError(f"a request was answered {sent[0]['status']}: {sent[1:]}")

    async def run(app: Any) -> None:
        for _ in range(WARM_UP * 10):
            await one(app)
        gc.collect()
        for _ in range(requests):
            await one(app)

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(
            database_url=f"sqlite:///{Path(folder) / 'arbiter.db'}",
            redis_url=None,
            spill_dir=Path(folder) / "spill",
            # The writer waits past the run: the count is the request thread's own work.
            log_flush_interval_s=3600.0,
            log_batch_size=1_000_000,
        )
        app = create_app(settings)
        with TestClient(app):  # the lifespan: services, the log, gc.freeze()
            asyncio.run(run(app))
            # Not the shutdown's flush of what was held back: it is no request's work.
            # Exiting at once skips the folder's own clean-up, so it is done here.
            shutil.rmtree(folder, ignore_errors=True)
            os._exit(0)


def render(counts: Sequence[Count], checkout: Path | None) -> str:
    here = {c.profile: c for c in counts if c.checkout == "this checkout"}
    lines = []
    if checkout is None:
        lines += ["| profile | instructions per decision (millions) |", "|---|---:|"]
        lines += [f"| {c.profile} | {c.per_decision / 1e6:,.2f} |" for c in here.values()]
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


def render_objects(counts: Sequence[Count]) -> str:
    """Per profile and checkout, the shared objects that run most of a decision."""
    lines = [
        "| profile | checkout | shared object | own instructions per decision (millions) | share |",
        "|---|---|---|---:|---:|",
    ]
    for c in counts:
        if c.by_object is None:
            continue
        whole = sum(c.by_object.values())
        ranked = sorted(c.by_object.items(), key=lambda item: -item[1])
        for name, own in ranked[:SHOWN_OBJECTS]:
            lines.append(
                f"| {c.profile} | {c.checkout} | `{name}` | {own / 1e6:,.1f} | {own / whole:.1%} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--profiles", default=",".join(DEFAULT_PROFILES))
    parser.add_argument("--snapshot", type=Path, default=None)
    parser.add_argument(
        "--decisions", type=int, default=10, help="decisions counted per run (default 10)"
    )
    parser.add_argument(
        "--checkout", type=Path, default=None, help="also count another checkout's core"
    )
    parser.add_argument(
        "--by-object",
        action="store_true",
        help="also split each decision's instructions by shared object",
    )
    parser.add_argument(
        "--through-app",
        action="store_true",
        help="count a decision request sent through the service's application instead "
        "(default snapshot examples/small.json)",
    )
    parser.add_argument("--child", nargs=3, metavar=("PROFILE", "SNAPSHOT", "N"), help="(internal)")
    parser.add_argument("--prepared", type=int, default=0, help="(internal)")
    add_json(parser)
    add_quiet(parser)
    args = parser.parse_args(argv)
    if args.child is not None:
        profile, snapshot, n = args.child
        if args.through_app:
            child_through_app(profile, Path(snapshot), int(n))
        else:
            child(profile, Path(snapshot), int(n), args.checkout, args.prepared)
        return 0
    if args.decisions < 1:
        parser.error("argument --decisions: must be 1 or more")
    if args.through_app and (args.checkout is not None or args.by_object):
        parser.error("--through-app counts this checkout's service alone, as a whole")
    if args.snapshot is None:
        args.snapshot = DEFAULT_REQUEST_SNAPSHOT if args.through_app else DEFAULT_SNAPSHOT
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
            figure, shares = count(
                checkout,
                profile,
                args.snapshot.resolve(),
                args.decisions,
                args.by_object,
                through_app=args.through_app,
            )
            counts.append(Count(profile, name, figure, args.decisions, shares))
    if args.through_app:
        print(f"Per decision request through the application, `{args.snapshot.name}`:")
    print(render(counts, args.checkout))
    if args.by_object:
        print()
        print(render_objects(counts))
    if args.json is not None:
        write_json(args.json, {"snapshot": str(args.snapshot), "counts": [vars(c) for c in counts]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
