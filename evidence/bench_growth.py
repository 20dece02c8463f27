"""How decision time grows with the cluster: 16 to 4,096 nodes × 8 GPUs, 50 to 20,000 jobs.

    .venv/bin/python -m evidence.bench_growth                      # default sizes and profiles
    .venv/bin/python -m evidence.bench_growth --sizes 16:50,64:312 --profiles fifo,oasis
    .venv/bin/python -m evidence.bench_growth --profile-stages     # + where the time goes

Snapshots come from the examples' generator (`evidence/generate_examples.py`) with a
layout scaled from `examples/large.json`'s: racks of 16 eight-GPU nodes, about 5/8 of
them V100 and the rest P100, one node in 32 an inference server (a quarter of those
lent to training), one unhealthy node per 512, the large example's eight tenants with
their GPU quotas scaled to the cluster, its GPU mix, hint rate and busy fraction. Jobs
grow with the nodes (about 4.9 per node): 50 on 16 nodes, 312 on 64, 1,250 on 256, 5,000
on 1,024 and 20,000 on 4,096. Generated snapshots are cached under `var/bench-growth/`
(the largest takes about 15 s to generate); the cache key includes the generator's
source, so a changed generator never serves a stale file.

For each size, every profile's pipeline runs once to warm up, then `Pipeline.run` is
timed up to `--iterations` times (default 5) or until `--budget-s` seconds are spent
on the cell, each time on a snapshot decoded and checked afresh (not timed), as the
service decides each request's; the median is reported, with the median of
`decode_snapshot` on the raw bytes beside it. Stateful profiles get an empty state
every run. A profile whose median passes `--give-up-s` at one size is not run at
larger ones. The growth exponent
is the least-squares slope of log(time) against log(jobs): 1 is linear, 2 quadratic.

Output: a Markdown table (median ms per size, exponent per profile), a log-log plot
(`--plot`, default `docs/img/growth.png`), and with `--json PATH` the raw figures.
`--profile-stages` adds one cProfile'd run per cell: the time spent in each engine
stage (the policies' `admit`, `order`, `scale` and `place` as the engine calls them;
"engine, other" is the rest of `Pipeline.run`) with its own growth exponent, and the
top 15 functions by cumulative time, then by own time, at the largest size.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import inspect
import io
import math
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from matplotlib.figure import Figure

from evidence import generate_examples as generator
from evidence.bench_engine import fresh_snapshot
from evidence.runner import ROOT, add_json, add_quiet, command_line, progress, write_json
from policies.decision import Stage
from policies.engine import Pipeline
from policies.model import Snapshot, decode_snapshot, snapshot_problems
from policies.profiles import load_profiles
from policies.registry import build_registry

DEFAULT_SIZES: tuple[tuple[int, int], ...] = (
    (16, 50),
    (64, 312),
    (256, 1250),
    (1024, 5000),
    (4096, 20000),
)
DEFAULT_PROFILES = ("fifo", "tiresias", "drf", "optimus", "aryl", "dl2", "oasis")
DEFAULT_PLOT = ROOT / "docs" / "img" / "growth.png"
DEFAULT_CACHE = ROOT / "var" / "bench-growth"
NODES_PER_RACK = 16
DECODE_SAMPLES = 10
STAGE_METHODS = {
    "admit": "admission",
    "order": "ordering",
    "scale": "scaling",
    "place": "placement",
}
STAGES = ("admission", "ordering", "scaling", "placement", "engine, other")
ENGINE_ORDER = (Stage.ADMISSION, Stage.ORDERING, Stage.SCALING, Stage.PLACEMENT)
POLICIES_DIR = str(ROOT / "policies")


# -- snapshots ------------------------------------------------------------------------------------
def growth_layout(nodes: int, jobs: int) -> generator.Layout:
    """`examples/large.json`'s layout scaled to `nodes` eight-GPU nodes and `jobs` jobs."""
    if nodes < 1 or jobs < 1:
        raise ValueError("nodes and jobs must be positive")
    large = generator.LARGE
    racks = max(1, math.ceil(nodes / NODES_PER_RACK))
    sizes = [NODES_PER_RACK] * (racks - 1) + [nodes - NODES_PER_RACK * (racks - 1)]
    # The large example: 20 of 32 racks V100, the rest P100.
    v100_racks = max(1, round(racks * 20 / 32))
    inference = max(1, nodes // 32)
    loaned = inference // 4
    unhealthy = nodes // 512
    built: list[generator.Rack] = []
    # Inference servers fill the last racks, as in the large example (its rack r31).
    inference_left, loaned_left = inference, loaned
    inference_by_rack = [0] * racks
    loaned_by_rack = [0] * racks
    for index in reversed(range(racks)):
        take = min(inference_left, sizes[index])
        inference_by_rack[index] = take
        loaned_by_rack[index] = min(loaned_left, take)
        inference_left -= take
        loaned_left -= loaned_by_rack[index]
    for index in range(racks):
        built.append(
            generator.Rack(
                f"r{index:03d}",
                generator.V100_X8 if index < v100_racks else generator.P100_X8,
                sizes[index],
                inference_nodes=inference_by_rack[index],
                loaned=loaned_by_rack[index],
                # One unhealthy training node per 512 nodes, in the first racks.
                unhealthy=int(index < unhealthy and inference_by_rack[index] < sizes[index]),
            )
        )
    scale = nodes / 512  # the large example has 512 nodes
    tenants = tuple(
        generator.TenantSpec(
            t.id,
            t.weight,
            t.share,
            None if t.gpu_quota is None else max(8, round(t.gpu_quota * scale)),
        )
        for t in large.tenants
    )
    needed = max(1, round(inference * 0.75))  # the large example: 12 of 16 servers
    return generator.Layout(
        cluster_id=f"growth-{nodes}n-{jobs}j",
        racks=tuple(built),
        jobs=jobs,
        tenants=tenants,
        gpu_mix=large.gpu_mix,
        submit_window_s=large.submit_window_s,
        run_fraction=large.run_fraction,
        max_busy_fraction=large.max_busy_fraction,
        inference_needed=needed,
        inference_forecast=tuple(
            max(1, round(inference * share)) for share in (0.75, 0.8, 0.9, 1.0)
        ),
        hint_rate=large.hint_rate,
    )


def generator_fingerprint() -> str:
    """Changes whenever the generator or this layout does, so that cached files do too."""
    digest = hashlib.sha256(Path(generator.__file__).read_bytes())
    digest.update(inspect.getsource(growth_layout).encode("utf-8"))
    return digest.hexdigest()[:12]


def snapshot_bytes(nodes: int, jobs: int, seed: int, cache_dir: Path | None) -> bytes:
    """The generated snapshot for (nodes, jobs, seed) as compact JSON, from the cache if there."""
    cached: Path | None = None
    if cache_dir is not None:
        cached = cache_dir / f"growth-{nodes}n-{jobs}j-s{seed}-{generator_fingerprint()}.json"
        if cached.is_file():
            return cached.read_bytes()
    raw = generator.dumps_compact(
        generator.build_snapshot(growth_layout(nodes, jobs), seed)
    ).encode("utf-8")
    check_snapshot(raw, f"{nodes} nodes, {jobs} jobs")
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(raw)
    return raw


def check_snapshot(raw: bytes, name: str) -> None:
    """Refuse a generated snapshot the service would reject (the engine assumes valid ones)."""
    problems = snapshot_problems(decode_snapshot(raw))
    if problems:
        listed = "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
        raise SystemExit(f"{name}: generated snapshot has {len(problems)} problem(s): {listed}")


# -- measurement ----------------------------------------------------------------------------------
def fit_exponent(jobs: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) against log(jobs): the growth exponent."""
    points = [(math.log(x), math.log(y)) for x, y in zip(jobs, seconds, strict=True) if y > 0]
    if len(points) < 2:
        return math.nan
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return math.nan
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def timed_samples_ms(
    call: Callable[..., object],
    iterations: int,
    budget_s: float,
    fresh: Callable[[], object] | None = None,
) -> list[float]:
    """Up to `iterations` timed calls (at least one), stopping once `budget_s` is spent;
    with `fresh`, each call is given an argument made by it just before, not timed."""
    samples: list[float] = []
    spent = 0.0
    while len(samples) < iterations and (not samples or spent < budget_s):
        arguments = () if fresh is None else (fresh(),)
        started = time.perf_counter()
        call(*arguments)
        elapsed = time.perf_counter() - started
        spent += elapsed
        samples.append(elapsed * 1000.0)
    return samples


@dataclass
class Size:
    nodes: int
    jobs: int
    body_bytes: int = 0
    decode_ms: list[float] = field(default_factory=list)


@dataclass
class Series:
    """One profile across the sizes: samples per size (empty where skipped)."""

    profile: str
    run_ms: list[list[float]] = field(default_factory=list)
    # With --profile-stages: policy methods' time from cProfile, and stage time by prefixes.
    stage_s: list[dict[str, float]] = field(default_factory=list)
    prefix_ms: list[dict[str, float]] = field(default_factory=list)
    top_functions: str = ""  # cProfile's top 15 by cumulative, then own time, at the largest

    def medians(self) -> list[float | None]:
        return [statistics.median(r) if r else None for r in self.run_ms]


def stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Seconds per engine stage in a profile of `Pipeline.run`.

    A stage's time is the cumulative time of its policy method (`admit`, `order`,
    `scale`, `place`, defined under `policies/`) counted only on calls from outside
    another stage method, so a policy that delegates to another's `order` is not
    counted twice. The rest of the profiled time is "engine, other".
    """
    table = stats.stats  # type: ignore[attr-defined]
    by_stage = dict.fromkeys(STAGES, 0.0)
    total = 0.0

    def is_stage_method(function: tuple[str, int, str]) -> bool:
        filename, _, name = function
        return name in STAGE_METHODS and filename.startswith(POLICIES_DIR)

    for function, (_, _, own_s, _, callers) in table.items():
        total += own_s
        if not is_stage_method(function):
            continue
        stage = STAGE_METHODS[function[2]]
        for caller, edge in callers.items():
            if not is_stage_method(caller):
                by_stage[stage] += edge[3]  # cumulative time through this caller
    by_stage["engine, other"] = max(0.0, total - sum(by_stage.values()))
    return by_stage


def profile_once(call: Callable[[], object]) -> pstats.Stats:
    """One profiled call, garbage collection off so a pause does not land in a random stage."""
    profiler = cProfile.Profile()
    gc.collect()
    gc.disable()
    try:
        profiler.enable()
        call()
        profiler.disable()
    finally:
        gc.enable()
    return pstats.Stats(profiler)


def top_cumulative(stats: pstats.Stats, count: int = 15) -> str:
    """cProfile's top `count` functions by cumulative time, then by own time: the second
    says whether any one function holds much of a decision, or the time is spread."""
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats(pstats.SortKey.CUMULATIVE).print_stats(count)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(count)
    return out.getvalue().strip()


def measure(
    sizes: Sequence[tuple[int, int]],
    profiles: Sequence[str],
    *,
    seed: int,
    iterations: int,
    budget_s: float,
    give_up_s: float,
    cache_dir: Path | None,
    stages: bool,
    progress: Callable[[str], None],
) -> tuple[list[Size], list[Series]]:
    registry = build_registry()
    known = load_profiles(registry)
    unknown = [name for name in profiles if name not in known]
    if unknown:
        raise SystemExit(f"unknown profile(s): {', '.join(unknown)}; known: {', '.join(known)}")
    pipelines = {name: Pipeline.build(known[name], registry) for name in profiles}
    measured: list[Size] = []
    series = {name: Series(profile=name) for name in profiles}
    given_up: set[str] = set()
    for position, (nodes, jobs) in enumerate(sizes):
        largest = position == len(sizes) - 1
        progress(f"{nodes} nodes, {jobs} jobs: generating (or reading the cache)")
        raw = snapshot_bytes(nodes, jobs, seed, cache_dir)
        size = Size(nodes=nodes, jobs=jobs, body_bytes=len(raw))
        gc.collect()
        # Decoding is cheap next to deciding: more samples, for a steadier median.
        size.decode_ms = timed_samples_ms(
            partial(decode_snapshot, raw), max(iterations, DECODE_SAMPLES), budget_s
        )
        measured.append(size)
        # Each run decides a snapshot of its own, decoded and checked as the service has
        # it: a snapshot keeps the lookups a decision builds on it (jobs by id, their
        # positions), which no request finds already made.
        fresh = partial(fresh_snapshot, raw)
        for name in profiles:
            line = series[name]
            if name in given_up:
                line.run_ms.append([])
                if stages:
                    line.stage_s.append({})
                    line.prefix_ms.append({})
                continue
            progress(f"{nodes} nodes, {jobs} jobs: {name}")
            decide = partial(_decide, pipelines[name], seed=seed)
            decide(fresh())  # warm-up
            gc.collect()
            samples = timed_samples_ms(decide, iterations, budget_s, fresh)
            line.run_ms.append(samples)
            if stages:
                line.prefix_ms.append(
                    prefix_stage_ms(
                        pipelines[name],
                        fresh,
                        seed,
                        full_ms=statistics.median(samples),
                        iterations=iterations,
                        budget_s=budget_s,
                    )
                )
                stats = profile_once(partial(decide, fresh()))
                line.stage_s.append(stage_seconds(stats))
                if largest or statistics.median(samples) > give_up_s * 1000:
                    line.top_functions = top_cumulative(stats)
            if statistics.median(samples) > give_up_s * 1000:
                given_up.add(name)
                progress(f"{name}: over {give_up_s:g} s at {jobs} jobs; larger sizes skipped")
    return measured, [series[name] for name in profiles]


def _decide(
    pipeline: Pipeline, snapshot: Snapshot, seed: int, stages: Sequence[Stage] | None = None
) -> object:
    return pipeline.run(
        snapshot, stages, state=None, seed=seed, decision_id="bench-growth"
    ).decision


def prefix_stage_ms(
    pipeline: Pipeline,
    fresh: Callable[[], Snapshot],
    seed: int,
    *,
    full_ms: float,
    iterations: int,
    budget_s: float,
) -> dict[str, float]:
    """Each stage's time, engine work included, without a profiler's distortion.

    `Pipeline.run` with `stages=[s]` runs `s` and the stages before it, so a stage's
    time is the median run up to it minus the median run up to the one before
    (`full_ms`, the whole pipeline, is already measured). Admission's figure also holds
    what every decision costs whatever its stages (views, explanations, the result).
    Noise can make a small stage's difference negative; it is kept as measured.
    """
    upto: list[float] = []
    for stage in ENGINE_ORDER[:-1]:
        samples = timed_samples_ms(
            partial(_decide, pipeline, seed=seed, stages=(stage,)), iterations, budget_s, fresh
        )
        upto.append(statistics.median(samples))
    upto.append(full_ms)
    return {
        stage.value: upto[index] - (upto[index - 1] if index else 0.0)
        for index, stage in enumerate(ENGINE_ORDER)
    }


# -- reporting ------------------------------------------------------------------------------------
def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _exponent(sizes: Sequence[Size], values: Sequence[float | None]) -> float:
    pairs = [(s.jobs, v) for s, v in zip(sizes, values, strict=True) if v is not None]
    return fit_exponent([float(j) for j, _ in pairs], [v for _, v in pairs])


def _finite_or_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _fmt_exponent(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


def render(sizes: Sequence[Size], series: Sequence[Series]) -> str:
    header = " | ".join(f"{s.nodes:,} n / {s.jobs:,} j" for s in sizes)
    lines = [
        "Median decision time (ms) of `Pipeline.run` by cluster size (nodes × 8 GPUs / jobs); "
        "growth exponent = least-squares slope of log time against log jobs.",
        "",
        f"| profile | {header} | exponent |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for line in series:
        medians = line.medians()
        cells = " | ".join(_ms(v) for v in medians)
        lines.append(f"| {line.profile} | {cells} | {_fmt_exponent(_exponent(sizes, medians))} |")
    decode = [statistics.median(s.decode_ms) for s in sizes]
    lines.append(
        f"| *decode_snapshot* | {' | '.join(_ms(v) for v in decode)} | "
        f"{_fmt_exponent(_exponent(sizes, list(decode)))} |"
    )
    body = " | ".join(f"{s.body_bytes / 1e6:.2f} MB" for s in sizes)
    lines.append(f"| *snapshot size* | {body} | |")
    return "\n".join(lines)


def _stage_rows(
    sizes: Sequence[Size], cells: Sequence[dict[str, float]], stages: Sequence[str], scale: float
) -> list[str]:
    rows = []
    for stage in stages:
        values = [scale * cell[stage] if cell else None for cell in cells]
        positive = [v if v is None or v > 0 else None for v in values]
        rows.append(
            f"| {stage} | {' | '.join(_ms(v) for v in values)} | "
            f"{_fmt_exponent(_exponent(sizes, positive))} |"
        )
    return rows


def render_stages(sizes: Sequence[Size], series: Sequence[Series]) -> str:
    header = " | ".join(f"{s.jobs:,} j" for s in sizes)
    columns = [f"| stage | {header} | exponent |", "|---|" + "---:|" * (len(sizes) + 1)]
    lines = [
        "Time per engine stage (ms) and its growth exponent, two ways. *By prefixes*: median "
        "`Pipeline.run(stages=[s])` minus the run up to the stage before (engine work "
        "included; admission also carries what every decision costs). *Policy methods*: "
        "cumulative time in the policies' `admit`, `order`, `scale` and `place` in one "
        "cProfile'd run (inflated by the profiler's per-call cost); the engine's own work "
        'around them is "engine, other".',
    ]
    for line in series:
        if not any(line.stage_s):
            continue
        stage_names = [stage.value for stage in ENGINE_ORDER]
        lines += ["", f"**{line.profile}**, by prefixes", "", *columns]
        lines += _stage_rows(sizes, line.prefix_ms, stage_names, 1.0)
        lines += ["", f"**{line.profile}**, policy methods (cProfile)", "", *columns]
        lines += _stage_rows(sizes, line.stage_s, STAGES, 1000.0)
    for line in series:
        if line.top_functions:
            lines += [
                "",
                f"Top 15 by cumulative time, then by own time, {line.profile}, largest "
                "size it ran:",
                "",
                "```",
                line.top_functions,
                "```",
            ]
    return "\n".join(lines)


def plot(sizes: Sequence[Size], series: Sequence[Series], path: Path) -> None:
    """Log-log plot of the medians: one line per profile, decoding dashed."""
    figure = Figure(figsize=(8, 5.5), layout="constrained")
    axes = figure.subplots()
    jobs = [s.jobs for s in sizes]
    for line in series:
        points = [(j, v) for j, v in zip(jobs, line.medians(), strict=True) if v is not None]
        if not points:
            continue
        exponent = _exponent(sizes, line.medians())
        axes.plot(
            [j for j, _ in points],
            [v for _, v in points],
            marker="o",
            label=f"{line.profile} (slope {_fmt_exponent(exponent)})",
        )
    decode = [statistics.median(s.decode_ms) for s in sizes]
    axes.plot(
        jobs,
        decode,
        linestyle="--",
        color="black",
        marker="s",
        label=f"decode_snapshot (slope {_fmt_exponent(_exponent(sizes, list(decode)))})",
    )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xticks(jobs, [f"{s.jobs:,} jobs\n{s.nodes:,} nodes" for s in sizes])
    axes.minorticks_off()
    axes.set_ylabel("median time per decision (ms)")
    axes.set_title("Arbiter decision time as the cluster grows (8 GPUs per node)")
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


# -- command line ---------------------------------------------------------------------------------
def parse_sizes(text: str) -> list[tuple[int, int]]:
    """`16:50,64:312` → [(16, 50), (64, 312)], ascending by jobs."""
    sizes: list[tuple[int, int]] = []
    for item in text.split(","):
        nodes, _, jobs = item.strip().partition(":")
        try:
            size = (int(nodes), int(jobs))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not NODES:JOBS: {item!r}") from None
        if size[0] < 1 or size[1] < 1:
            raise argparse.ArgumentTypeError(f"nodes and jobs must be positive: {item!r}")
        sizes.append(size)
    return sorted(sizes, key=lambda size: (size[1], size[0]))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line(__doc__)
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help="NODES:JOBS,… (default 16:50,64:312,256:1250,1024:5000,4096:20000)",
    )
    parser.add_argument(
        "--profiles",
        default=",".join(DEFAULT_PROFILES),
        help=f"comma-separated (default {','.join(DEFAULT_PROFILES)})",
    )
    parser.add_argument("--iterations", type=int, default=5, help="timed runs per cell (max)")
    parser.add_argument(
        "--budget-s", type=float, default=30.0, help="stop timing a cell after this many seconds"
    )
    parser.add_argument(
        "--give-up-s",
        type=float,
        default=60.0,
        help="skip larger sizes for a profile whose median passes this",
    )
    parser.add_argument("--seed", type=int, default=generator.DEFAULT_SEED)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="PNG to write")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--no-cache", action="store_true", help="always generate afresh")
    add_json(parser, help="also write raw figures here")
    parser.add_argument(
        "--profile-stages",
        action="store_true",
        help=(
            "one cProfile'd run per cell: time per stage, top 15 functions (cumulative, "
            "then own time) at the largest"
        ),
    )
    add_quiet(parser)
    args = parser.parse_args(argv)
    if args.iterations < 1 or args.budget_s <= 0 or args.give_up_s <= 0:
        parser.error("--iterations, --budget-s and --give-up-s must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    profiles = [name.strip() for name in args.profiles.split(",") if name.strip()]

    sizes, series = measure(
        args.sizes,
        profiles,
        seed=args.seed,
        iterations=args.iterations,
        budget_s=args.budget_s,
        give_up_s=args.give_up_s,
        cache_dir=None if args.no_cache else args.cache_dir,
        stages=args.profile_stages,
        progress=progress(args.quiet),
    )
    print(render(sizes, series))
    if args.profile_stages:
        print()
        print(render_stages(sizes, series))
    if not args.no_plot:
        plot(sizes, series, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json is not None:
        figures = {
            "seed": args.seed,
            "sizes": [asdict(s) for s in sizes],
            "profiles": [
                {
                    "profile": line.profile,
                    "run_ms": line.run_ms,
                    "median_ms": line.medians(),
                    "exponent": _finite_or_none(_exponent(sizes, line.medians())),
                    "stage_s": line.stage_s,
                    "prefix_ms": line.prefix_ms,
                }
                for line in series
            ],
        }
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
