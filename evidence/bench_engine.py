"""Benchmark the engine in process: decision time per profile, without HTTP.

    .venv/bin/python -m evidence.bench_engine                        # every profile, both examples
    .venv/bin/python -m evidence.bench_engine --profiles fifo,oasis --iterations 50 --repeat 5
    .venv/bin/python -m evidence.bench_engine --json out/engine.json
    .venv/bin/python -m evidence.bench_engine --checkout ../old   # an older commit's core
    .venv/bin/python -m evidence.bench_engine --profiles oasis,aryl --widen 5   # wide ranges
    .venv/bin/python -m evidence.bench_engine --profiles oasis --wide-servers 100

For each profile and each snapshot (default `examples/small.json` and
`examples/large.json`) the profile's pipeline is built once (`Pipeline.build`), a few
warm-up decisions are made, then `Pipeline.run` is timed `--iterations` times (default
30, at least 5), each time on a snapshot of its own, decoded and checked just before,
outside the timed call, as the service decodes and checks each request's: a snapshot
keeps the lookups a decision builds on it (jobs by id, their positions), so a run on
a snapshot decided before would skip work that no request skips. Stateful
profiles (`oasis`, `tiresias`) get an empty state every time (`state=None`), so every
iteration does the same work and the profiles compare. Also measured: decoding the
snapshot (`decode_snapshot` on the raw bytes), its semantic check
(`snapshot_problems`: ids, bounds, every placed GPU, as the service checks every
snapshot it is sent) and encoding the decision (`policies.model.encode`, as the
service answers).

`--widen N` adds, for each snapshot, a variant (`<name>-wide`) in which every N-th
waiting job accepts a wide range of worker counts (up to 4,096, as a caller may send:
`evidence.generate_examples.widen_waiting_jobs`), for the policies that price or score
every count.
`--wide-servers N` adds a variant (`<name>-wide-servers`) in which every N-th waiting job
accepts 1 to 4,096 workers and places two to four parameter servers
(`evidence.generate_examples.wide_jobs_with_servers`): OASiS lays out each count's
servers on what its workers leave.

`--repeat K` repeats the whole measurement K times (every cell once per round, so slow
drifts of a shared machine spread over all cells) and reports the median of the K
per-round p50s and p90s, and the minimum over all rounds.

The speed issue's targets apply to the large snapshot (`Pipeline.run` p50):
10 ms for fifo, sjf, srtf, tiresias, drf and optimus, 25 ms for aryl and dl2 and
50 ms for oasis. The table marks each as met or not met; other rows show "—".
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.machinery
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidence.runner import (
    EXAMPLES,
    add_json,
    add_quiet,
    command_line,
    interpreter,
    machine,
    percentile,
    progress,
    write_json,
)

if TYPE_CHECKING:
    from policies.decision import Decision
    from policies.engine import Pipeline
    from policies.model import Snapshot


DEFAULT_SNAPSHOTS = (EXAMPLES / "small.json", EXAMPLES / "large.json")
MIN_ITERATIONS = 5

# From the speed issue: p50 of `Pipeline.run` on the large example, in milliseconds.
TARGET_SNAPSHOT = "large"
TARGETS_MS: dict[str, float] = {
    **dict.fromkeys(("fifo", "sjf", "srtf", "tiresias", "drf", "optimus"), 10.0),
    **dict.fromkeys(("aryl", "dl2", "dl2-srtf"), 25.0),  # dl2-srtf: held to dl2's target
    "oasis": 50.0,
}


@dataclass
class Cell:
    """The figures of one (profile, snapshot) pair, over every round."""

    profile: str
    snapshot: str
    run_ms: list[list[float]] = field(default_factory=list)  # one list per round
    encode_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)  # of the snapshot, shared by profiles
    check_ms: list[float] = field(default_factory=list)  # its semantic check, likewise

    @property
    def p50_ms(self) -> float:
        """Median of the per-round medians."""
        return statistics.median(percentile(sorted(r), 0.5) for r in self.run_ms)

    @property
    def p90_ms(self) -> float:
        return statistics.median(percentile(sorted(r), 0.9) for r in self.run_ms)

    @property
    def min_ms(self) -> float:
        return min(min(r) for r in self.run_ms)

    @property
    def round_p50s_ms(self) -> list[float]:
        return [percentile(sorted(r), 0.5) for r in self.run_ms]

    @property
    def iterations(self) -> int:
        return sum(len(r) for r in self.run_ms)


@dataclass(frozen=True)
class Core:
    """The parts of the core this benchmark drives, from one checkout."""

    Pipeline: Any
    load_profiles: Callable[[Any], dict[str, Any]]
    build_registry: Callable[[], Any]
    decode_snapshot: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]
    check_snapshot: Callable[[Any], object]


def _load_policies_from(checkout: Path) -> None:
    """Import the `policies` package of `checkout` as `policies`, for this process.

    Only the package itself is found in that checkout (its submodules follow its
    `__path__`); the import path is left alone, so this benchmark's own code and every
    other package still come from the environment. It must run before anything imports
    `policies`: one process holds one core.
    """
    location = str((checkout / "policies").resolve())
    loaded = sys.modules.get("policies")
    if loaded is not None:
        if list(getattr(loaded, "__path__", [])) == [location]:
            return
        raise RuntimeError(f"policies is already imported from {loaded.__path__}")
    spec = importlib.machinery.PathFinder.find_spec("policies", [str(checkout.resolve())])
    if spec is None or spec.loader is None:
        raise SystemExit(f"--checkout {checkout}: no policies package there")
    module = importlib.util.module_from_spec(spec)
    sys.modules["policies"] = module
    spec.loader.exec_module(module)


def load_core(checkout: Path | None) -> Core:
    """The core's modules from `checkout` (default: this one), imported on first use.

    Another checkout (an older commit's `git worktree`) gives before-and-after figures
    from the one benchmark; checkouts from before `decode_snapshot` and `encode` existed
    are read and written through their pydantic models instead.
    """
    if checkout is not None:
        _load_policies_from(checkout)
    model: Any = importlib.import_module("policies.model")
    encode = getattr(model, "encode", None)
    return Core(
        Pipeline=importlib.import_module("policies.engine").Pipeline,
        load_profiles=importlib.import_module("policies.profiles").load_profiles,
        build_registry=importlib.import_module("policies.registry").build_registry,
        decode_snapshot=getattr(model, "decode_snapshot", None)
        or model.Snapshot.model_validate_json,
        encode=encode or (lambda decision: decision.model_dump_json().encode()),
        check_snapshot=model.snapshot_problems,
    )


CORE: Core | None = None


def core() -> Core:
    global CORE  # noqa: PLW0603 - set once, by main, before anything is measured
    if CORE is None:
        CORE = load_core(None)
    return CORE


def encode_decision(decision: Decision) -> bytes:
    """The decision as JSON, the way the service writes it."""
    return core().encode(decision)


def time_ms(call: Callable[[], object], iterations: int) -> list[float]:
    """Wall time of `iterations` calls, one figure per call, in milliseconds."""
    samples: list[float] = []
    for _ in range(iterations):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000.0)
    return samples


def time_on_fresh_ms(
    call: Callable[[Any], object], fresh: Callable[[], Any], iterations: int
) -> list[float]:
    """Wall time of `iterations` calls, each on an argument made by `fresh` just before
    (not timed), one figure per call, in milliseconds."""
    samples: list[float] = []
    for _ in range(iterations):
        argument = fresh()
        started = time.perf_counter()
        call(argument)
        samples.append((time.perf_counter() - started) * 1000.0)
    return samples


def fresh_snapshot(raw: bytes, of: Core | None = None) -> Snapshot:
    """`raw` decoded and checked by the core `of` (default: this benchmark's), as the
    service has it when its engine runs."""
    used = of or core()
    snapshot: Snapshot = used.decode_snapshot(raw)
    used.check_snapshot(snapshot)
    return snapshot


def target_for(profile: str, snapshot: str) -> float | None:
    """The issue's p50 target for this row, in ms; None where it sets none."""
    if snapshot != TARGET_SNAPSHOT:
        return None
    return TARGETS_MS.get(profile)


def target_status(profile: str, snapshot: str, p50_ms: float) -> tuple[str, str]:
    """(target, verdict) as table text: ("≤ 10 ms", "met"), or ("—", "—") when none applies."""
    target = target_for(profile, snapshot)
    if target is None:
        return "—", "—"
    return f"≤ {target:g} ms", "met" if p50_ms <= target else "not met"


TABLE_HEADER = (
    "| profile | snapshot | runs | p50 ms | p90 ms | min ms | p50 per round ms "
    "| decode p50 ms | check p50 ms | encode p50 ms | in-process total ms | target | status |",
    "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---|",
)


def format_row(cell: Cell) -> str:
    """One Markdown table row; the total is decode + check + run + encode (p50 each), what
    the service does for a decision besides HTTP and the log."""
    decode = statistics.median(cell.decode_ms)
    check = statistics.median(cell.check_ms)
    encode = statistics.median(cell.encode_ms)
    rounds = cell.round_p50s_ms
    per_round = (
        "—" if len(rounds) < 2 else f"{min(rounds):.2f}–{max(rounds):.2f} ({len(rounds)} rounds)"
    )
    target, verdict = target_status(cell.profile, cell.snapshot, cell.p50_ms)
    return (
        f"| {cell.profile} | {cell.snapshot} | {cell.iterations} | {cell.p50_ms:.2f} | "
        f"{cell.p90_ms:.2f} | {cell.min_ms:.2f} | {per_round} | {decode:.2f} | {check:.2f} | "
        f"{encode:.2f} | {decode + check + cell.p50_ms + encode:.2f} | {target} | {verdict} |"
    )


def render(cells: Sequence[Cell], iterations: int, repeat: int) -> str:
    met = [c for c in cells if target_for(c.profile, c.snapshot) is not None]
    met_count = sum(
        1 for c in met if c.p50_ms <= (target_for(c.profile, c.snapshot) or float("inf"))
    )
    lines = [
        f"In-process decision time (`Pipeline.run`), {iterations} timed runs per cell and "
        f"round, {repeat} round(s); {interpreter()} on {machine()}.",
        "",
        *TABLE_HEADER,
        *(format_row(cell) for cell in cells),
        "",
        f"Targets (large snapshot, `Pipeline.run` p50): {met_count} of {len(met)} met.",
    ]
    return "\n".join(lines)


def measure(
    profiles: Sequence[str],
    snapshots: Sequence[Path],
    *,
    iterations: int,
    warmup: int,
    repeat: int,
    seed: int,
    widen: int | None = None,
    wide_servers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Cell]:
    """Every (profile, snapshot) cell, measured `repeat` times round-robin; with `widen`
    or `wide_servers`, each snapshot's variant too."""
    registry = core().build_registry()
    known = core().load_profiles(registry)
    unknown = [name for name in profiles if name not in known]
    if unknown:
        raise SystemExit(f"unknown profile(s): {', '.join(unknown)}; known: {', '.join(known)}")
    pipelines = {name: core().Pipeline.build(known[name], registry) for name in profiles}
    raws = {path.stem: path.read_bytes() for path in snapshots}
    plain = set(raws)
    # Imported here: it reads `policies`, which `--checkout` may have replaced.
    from evidence.generate_examples import (  # noqa: PLC0415
        wide_jobs_with_servers,
        widen_waiting_jobs,
    )

    variants = [
        ("wide", widen_waiting_jobs, widen),
        ("wide-servers", wide_jobs_with_servers, wide_servers),
    ]
    for suffix, change, every in variants:
        if every is None:
            continue
        for name, raw in [(n, r) for n, r in raws.items() if n in plain]:
            changed = change(json.loads(raw), every)
            raws[f"{name}-{suffix}"] = json.dumps(changed, separators=(",", ":")).encode()
    decode_snapshot = core().decode_snapshot
    cells = {
        (profile, name): Cell(profile=profile, snapshot=name)
        for profile in profiles
        for name in raws
    }
    for round_number in range(repeat):
        for name, raw in raws.items():
            gc.collect()
            decode_ms = time_ms(partial(decode_snapshot, raw), iterations)
            # Checked fresh too: the check also leaves lookups on the snapshot.
            check_ms = time_on_fresh_ms(
                core().check_snapshot, partial(decode_snapshot, raw), iterations
            )
            for profile in profiles:
                cells[(profile, name)].decode_ms.extend(decode_ms)
                cells[(profile, name)].check_ms.extend(check_ms)
        for profile in profiles:
            pipeline = pipelines[profile]
            for name, raw in raws.items():
                if progress is not None:
                    progress(f"round {round_number + 1}/{repeat}: {profile} on {name}")

                def decide(snapshot: Snapshot, pipeline: Pipeline = pipeline) -> Decision:
                    return pipeline.run(
                        snapshot,
                        state=None,
                        seed=seed,
                        decision_id="bench-engine",
                    ).decision

                fresh = partial(fresh_snapshot, raw)
                for _ in range(warmup):
                    decide(fresh())
                decision = decide(fresh())
                gc.collect()
                cell = cells[(profile, name)]
                cell.run_ms.append(time_on_fresh_ms(decide, fresh, iterations))
                cell.encode_ms.extend(time_ms(partial(encode_decision, decision), iterations))
    return list(cells.values())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line(__doc__)
    parser.add_argument(
        "--profiles", default=None, help="comma-separated profiles (default: every shipped one)"
    )
    parser.add_argument(
        "--snapshots",
        type=Path,
        nargs="+",
        default=list(DEFAULT_SNAPSHOTS),
        help="snapshot files (a file's stem names its rows; targets apply to 'large')",
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=30,
        help=f"timed runs per cell and round (default 30, at least {MIN_ITERATIONS})",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds; figures are medians over rounds"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed passed to Pipeline.run")
    parser.add_argument(
        "--widen",
        type=int,
        default=None,
        metavar="N",
        help="also each snapshot with every N-th waiting job accepting up to 4,096 worker counts",
    )
    parser.add_argument(
        "--wide-servers",
        type=int,
        default=None,
        metavar="N",
        help="also each snapshot with every N-th waiting job accepting 1 to 4,096 workers and "
        "placing 2 to 4 parameter servers",
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=None,
        help="measure the core of another checkout (e.g. an older commit's worktree)",
    )
    add_json(parser, help="also write raw figures here")
    add_quiet(parser)
    args = parser.parse_args(argv)
    if args.iterations < MIN_ITERATIONS:
        parser.error(f"--iterations must be at least {MIN_ITERATIONS}")
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be at least 1 and --warmup at least 0")
    for option, every in (("--widen", args.widen), ("--wide-servers", args.wide_servers)):
        if every is not None and every < 1:
            parser.error(f"{option} must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    global CORE  # noqa: PLW0603
    args = parse_args(argv)
    CORE = load_core(args.checkout)
    if args.profiles is None:
        profiles = sorted(core().load_profiles(core().build_registry()))
    else:
        profiles = [name.strip() for name in args.profiles.split(",") if name.strip()]

    cells = measure(
        profiles,
        args.snapshots,
        iterations=args.iterations,
        warmup=args.warmup,
        repeat=args.repeat,
        seed=args.seed,
        widen=args.widen,
        wide_servers=args.wide_servers,
        progress=None if args.quiet else progress(),
    )
    print(render(cells, args.iterations, args.repeat))
    if args.json is not None:
        figures = {
            "iterations": args.iterations,
            "warmup": args.warmup,
            "repeat": args.repeat,
            "cells": [
                {
                    **asdict(cell),
                    "p50_ms": cell.p50_ms,
                    "p90_ms": cell.p90_ms,
                    "min_ms": cell.min_ms,
                    "target_ms": target_for(cell.profile, cell.snapshot),
                }
                for cell in cells
            ],
        }
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
