"""Evidence for Aryl: capacity loaning and elastic scaling against `static`, beside the paper.

    .venv/bin/python -m evidence.evidence_aryl --processes 2    # section `aryl` of docs/results.md
    .venv/bin/python -m evidence.evidence_aryl --jobs 300 --seeds 0 --out /tmp/results.md

Li, Xu, Zhu, Liu, Guo and Wang, *Aryl: An Elastic Cluster Scheduler for Deep
Learning* (arXiv 2202.07896, 2022), report 1.53x lower average queueing, 1.50x
lower average JCT and up to 26.9 % higher cluster usage than the same cluster
scheduler without capacity loaning or elastic scaling (the EuroSys 2023 version,
Lyra: 1.53x, 1.48x, up to 25 %). This script runs the `aryl` profile against
`static` (docs/aryl.md: the same FIFO-with-backfill ordering and the same
placement, but inference servers never used by training and every job at its
requested size) on the same jobs and cluster:

* cluster `shared/clusters/philly-loaning.json`: Philly's 640-GPU training pool
  plus 24 inference servers of 8 GPUs, whose demand follows
  `shared/perf/inference_sd_lora_5min.csv` (docs/performance-model.md §4);
  loaning is on (`InferenceOptions(loan_idle=True)`): idle servers are lent,
  and taken back through the profile's reclaim policy when demand rises;
* trace: the first `--jobs` jobs of `philly.2w-2017-10-02.csv`, half of them
  elastic (`elastic_fraction=0.5`: half to twice their requested workers,
  seeded draw per job, `simulator/workload.py`), at the recorded arrival times
  and with arrivals compressed by each `--load` factor, since at the recorded
  load the training pool (sized for 0.8 of the fortnight's mean demand) rarely
  queues at the start of the trace; `--whole` replays every job of the
  fortnight instead, at the recorded arrivals (where it does queue), as its own
  section `aryl-whole`;
* measured performance model, timer rounds every 300 s (plus a round after
  every arrival, completion and capacity change), seeds 0–2 (each draws which
  jobs are elastic, their model families and the machine speeds): tables show
  means over the seeds, and a ratio is the mean ± SD of its per-seed values,
  called a tie when 1 lies within one SD of the mean (the rule of `make results`,
  on ratios). The runs are independent tasks on `--processes N`.

*Cluster usage* is the paper's notion as we read it: GPUs allocated, to
training jobs or to inference, over all GPUs of both pools, averaged over the
arrivals' span (from the first to the last arrival, while the load is on; the
tail after it is a few long jobs draining, the same work for both profiles).

The section is written with `results_sections.splice`, so `make_results.py`
keeps it when it regenerates the rest of the file. The run is deterministic.
"""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from evidence.runner import (
    Stopwatch,
    add_out,
    command_line,
    machine,
    over_seeds,
    write_section,
)
from simulator.cluster import ClusterSpec, load_cluster
from simulator.core import SimOptions, Simulation
from simulator.deciders import EngineDecider
from simulator.inference import InferenceOptions
from simulator.metrics import SimulationResult
from simulator.paths import clusters_dir, traces_dir
from simulator.report import fmt, fmt_count
from simulator.runner import RunConfig, build_simulation
from simulator.sweep_cli import add_runner_arguments, runner_from_args
from simulator.traces import TraceJob, compress_arrivals, read_trace
from simulator.workload import WorkloadOptions, make_jobs

SECTION = "aryl"
TRACE = "philly.2w-2017-10-02.csv"
CLUSTER = "philly-loaning.json"
PROFILES = ("static", "aryl")
ELASTIC_FRACTION = 0.5
ROUND_PERIOD_S = 300.0
SEEDS = (0, 1, 2)
PAPER = {"queue": 1.53, "jct": 1.50, "usage": 0.269}
"""arXiv 2202.07896 abstract: 1.53x and 1.50x lower average queueing and JCT, up to 26.9 %
higher cluster usage, against the scheduler without capacity loaning or elastic scaling."""


@dataclass
class Run:
    profile: str
    seed: int
    metrics: dict[str, Any]
    usage: float
    """Cluster usage over the arrivals' span (module docstring)."""
    loaned_gpu_h: float
    """GPU-hours training jobs held on loaned servers, over the whole run."""
    lendable_share: float
    """Share of the inference pool's GPU-time that inference did not need (arrivals' span)."""


def _integral(times: Sequence[float], values: Sequence[int], start: float, end: float) -> float:
    """∫ of a step function (value i holds from times[i] to times[i+1]) over [start, end]."""
    total = 0.0
    for i, (t, v) in enumerate(zip(times, values, strict=True)):
        until = times[i + 1] if i + 1 < len(times) else end
        lo, hi = max(t, start), min(until, end)
        if hi > lo:
            total += v * (hi - lo)
    return total


def inference_gpu_s(sim: Simulation, gpus_per_server: int, start: float, end: float) -> float:
    """GPU-seconds the inference pool keeps for itself over [start, end]."""
    demand = sim.demand
    if demand is None:
        return 0.0
    step = demand.series.step_s
    total = 0.0
    t = start
    while t < end:
        # The demand is constant within a bin of the series.
        edge = (demand.bin_at(t) + 1) * step - demand.options.offset_s
        until = min(max(edge, t + 1e-6), end)
        total += demand.servers_needed(t) * gpus_per_server * (until - t)
        t = until
    return total


def measure(
    point: Point,
    sim: Simulation,
    result: SimulationResult,
    cluster: ClusterSpec,
    span: tuple[float, float],
) -> Run:
    start, end = span
    pool = [g for g in cluster.node_groups if g.pool == "inference"]
    pool_gpus = sum(g.count * g.gpus for g in pool)
    per_server = pool[0].gpus
    all_gpus = sum(g.count * g.gpus for g in cluster.node_groups)
    series = result.series
    training = _integral(series.t, series.busy_gpus, start, end)
    inference = inference_gpu_s(sim, per_server, start, end)
    usage = (training + inference) / (all_gpus * (end - start))
    lendable = 1.0 - inference / (pool_gpus * (end - start))
    loaned = result.metrics["loaned_gpu_hours"]
    return Run(point.profile, point.seed, result.metrics, usage, loaned, lendable)


@cache
def trace_rows(jobs: int | None) -> tuple[TraceJob, ...]:
    """The trace's first `jobs` rows (all of them: None), read once per process."""
    return tuple(read_trace(traces_dir() / TRACE, jobs))


@dataclass(frozen=True)
class Point:
    """One simulation: an arrival compression, a seed, a profile."""

    load: float
    seed: int
    profile: str
    jobs: int


def run_point(point: Point) -> Run:
    """Simulate one point (a top-level function of picklable inputs, for the runner)."""
    cluster = load_cluster(clusters_dir() / CLUSTER)
    trace = compress_arrivals(trace_rows(point.jobs), point.load)
    config = RunConfig(
        seed=point.seed,
        workload=WorkloadOptions(elastic_fraction=ELASTIC_FRACTION),
        sim=SimOptions(round_period_s=ROUND_PERIOD_S),
        inference=InferenceOptions(loan_idle=True),
    )
    jobs = make_jobs(trace, config.workload, seed=point.seed)
    span = (trace[0].submit_time_s, trace[-1].submit_time_s)
    sim = build_simulation(jobs, cluster, config)
    result = sim.run(EngineDecider.named(point.profile))
    print(
        f"  load x{point.load:g} {point.profile} seed {point.seed}: avg JCT "
        f"{result.metrics['avg_jct_s']:.0f} s, {result.metrics['sim_wall_s']:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return measure(point, sim, result, cluster, span)


def mean_run(runs: Sequence[Run]) -> Run:
    """One profile's runs over seeds as one: every number the mean over the seeds."""
    metrics: dict[str, Any] = {}
    for key, first in runs[0].metrics.items():
        values = [r.metrics[key] for r in runs]
        if isinstance(first, bool) or not all(isinstance(v, int | float) for v in values):
            metrics[key] = first
        else:
            metrics[key] = statistics.fmean(float(v) for v in values)
    return replace(
        runs[0],
        seed=-1,
        metrics=metrics,
        usage=statistics.fmean(r.usage for r in runs),
        loaned_gpu_h=statistics.fmean(r.loaned_gpu_h for r in runs),
        lendable_share=statistics.fmean(r.lendable_share for r in runs),
    )


Seeded = dict[str, list[Run]]
"""A load's runs: by profile, each list by seed."""


def by_profile(runs: Sequence[Run]) -> Seeded:
    return {
        name: sorted((r for r in runs if r.profile == name), key=lambda r: r.seed)
        for name in PROFILES
    }


def _ratio(base: float | None, ours: float | None) -> float | None:
    if base is None or ours is None or ours <= 0:
        return None
    return base / ours


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def _ratios(seeded: Seeded, key: str) -> list[float]:
    """static ÷ aryl of a metric, per seed (seeds where either is missing left out)."""
    out = []
    for static, aryl in zip(seeded["static"], seeded["aryl"], strict=True):
        # A mean queueing of 0 can come out a hair below it (float sums): read as 0.
        base = static.metrics[key]
        ratio = _ratio(max(0.0, base) if base is not None else None, aryl.metrics[key])
        if ratio is not None:
            out.append(ratio)
    return out


def spread_ratio(values: Sequence[float]) -> str:
    """Mean ± SD of per-seed ratios, and whether 1 (no difference) is beyond the SD."""
    if not values:
        return "–"
    # static ÷ aryl above 1: aryl's figure is the lower one.
    sign, excess, spread = over_seeds([v - 1.0 for v in values])
    if len(values) < 2:
        return f"{1.0 + excess:.2f}x"
    return f"{1.0 + excess:.2f}x ± {spread:.2f} ({('a tie', 'lower', 'higher')[sign]})"


def table(runs: Sequence[Run]) -> list[str]:
    lines = [
        "| profile | jobs completed | avg queueing (s) | avg JCT (s) | p95 JCT (s) "
        "| cluster usage | GPU util. (training + loans) | loaned GPU-h used | reclaims "
        "| servers returned | jobs shrunk | jobs preempted | all preemptions | sim (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        m = run.metrics
        queue = max(0.0, m["avg_queue_s"]) if m["avg_queue_s"] is not None else None
        lines.append(
            f"| {run.profile} | {fmt_count(m['jobs_completed'])} | {fmt(queue)} "
            f"| {fmt(m['avg_jct_s'])} | {fmt(m['p95_jct_s'])} | {100 * run.usage:.1f} % "
            f"| {m['gpu_utilization']:.3f} | {fmt(run.loaned_gpu_h)} | {fmt_count(m['reclaims'])} "
            f"| {fmt_count(m['servers_reclaimed'])} | {fmt_count(m['reclaim_shrinks'])} "
            f"| {fmt_count(m['reclaim_preemptions'])} | {fmt_count(m['preemptions'])} "
            f"| {m['sim_wall_s']:.0f} |"
        )
    return lines


def comparison(results: Sequence[tuple[float, Seeded]]) -> list[str]:
    """static ÷ aryl per load: mean ± SD of the per-seed ratios (lower: aryl's is lower)."""
    lines = [
        "| setting | seeds | avg queueing, static / aryl | avg JCT, static / aryl "
        "| cluster usage, aryl vs static |",
        "|---|---:|---:|---:|---:|",
        f"| paper (arXiv 2202.07896; Lyra, EuroSys 2023) | | {PAPER['queue']:.2f}x | "
        f"{PAPER['jct']:.2f}x (1.48x) | up to {100 * PAPER['usage']:.1f} % higher (25 %) |",
    ]
    for load, seeded in results:
        static, aryl = mean_run(seeded["static"]), mean_run(seeded["aryl"])
        gains = [
            a.usage / s.usage - 1.0 for s, a in zip(seeded["static"], seeded["aryl"], strict=True)
        ]
        spread = f" ± {100 * statistics.stdev(gains):.1f}" if len(gains) > 1 else ""
        points = 100 * (aryl.usage - static.usage)
        lines.append(
            f"| ours, arrivals x{load:g} | {len(gains)} | "
            f"{spread_ratio(_ratios(seeded, 'avg_queue_s'))} "
            f"| {spread_ratio(_ratios(seeded, 'avg_jct_s'))} "
            f"| {100 * statistics.fmean(gains):.1f}{spread} % higher "
            f"({100 * static.usage:.1f} → {100 * aryl.usage:.1f} %, {points:+.1f} points) |"
        )
    return lines


def reading(results: Sequence[tuple[float, Seeded]]) -> list[str]:
    """The honest comparison with the paper, each number computed from the runs (means
    over the seeds)."""
    out: list[str] = []
    for load, seeded in results:
        static, aryl = mean_run(seeded["static"]), mean_run(seeded["aryl"])
        sm, am = static.metrics, aryl.metrics
        shrunk, preempted = am["reclaim_shrinks"], am["reclaim_preemptions"]
        handled = shrunk + preempted
        out.append(
            f"**Arrivals x{load:g}.** static waits {fmt(max(0.0, sm['avg_queue_s']))} s on "
            f"average, aryl {fmt(max(0.0, am['avg_queue_s']))} s; mean JCT "
            f"{fmt(sm['avg_jct_s'])} vs {fmt(am['avg_jct_s'])} s. aryl ran "
            f"{fmt(aryl.loaned_gpu_h)} GPU-hours on loaned "
            f"servers; inference left {100 * aryl.lendable_share:.0f} % of its pool's GPU-time "
            f"idle over the arrivals' span. Its {fmt_count(am['reclaims'])} reclaims returned "
            f"{fmt_count(am['servers_reclaimed'])} servers and touched {fmt_count(handled)} jobs: "
            f"{fmt_count(shrunk)} shrunk (extra workers on the returned server), "
            f"{fmt_count(preempted)} preempted."
        )
    return out


def render(
    results: Sequence[tuple[float, Seeded]],
    rows: Sequence[TraceJob],
    cluster: ClusterSpec,
    wall_s: float,
    *,
    seeds: Sequence[int],
    whole_jobs: int,
) -> str:
    jobs = len(rows)
    span_days = (rows[-1].submit_time_s - rows[0].submit_time_s) / 86400.0
    inference = sum(g.count * g.gpus for g in cluster.node_groups if g.pool == "inference")
    whole = jobs == whole_jobs
    lines = [
        "## Aryl on the whole Philly fortnight"
        if whole
        else "## Aryl: capacity loaning and elastic scaling against `static`",
        "",
        "Generated by `evidence/evidence_aryl.py` "
        f"(`make {'results-aryl-whole' if whole else 'results-aryl'}`); do not edit by hand.",
        f"The run took {wall_s / 60:.1f} min of wall time on this machine "
        f"({machine()}, 2 cores shared with other work, Python "
        f"{platform.python_version()}).",
        "",
        f"Setup: `{TRACE}`, "
        + (
            f"all {jobs:,} jobs ({span_days:.1f} days of arrivals), "
            if whole
            else f"first {jobs:,} jobs (its first {span_days:.1f} days of arrivals), "
        )
        + f"on `{CLUSTER}` "
        f"({cluster.training_gpus():,} training GPUs and {inference:,} inference GPUs); "
        f"{100 * ELASTIC_FRACTION:.0f} % of jobs elastic (half to twice their requested "
        "workers, a seeded draw per job); inference demand from "
        "`inference_sd_lora_5min.csv` scaled to the pool (docs/performance-model.md §4); "
        "loaning on, with each profile's own reclaim policy (`aryl`: least preemption "
        "cost; `static`: fewest jobs); measured performance model, seeds "
        f"{', '.join(str(s) for s in seeds)} (each draws which jobs are elastic, the "
        "model families and the machine speeds; tables show means over them, and a "
        "ratio is the mean ± SD of its per-seed values, called a tie when 1 is within "
        f"the SD), {ROUND_PERIOD_S:.0f} s timer rounds. `static` is Aryl's baseline "
        "(docs/aryl.md): the same ordering and placement, inference servers never used "
        "by training, jobs at their requested size. Arrivals are at the recorded times "
        "(x1) and compressed (gaps divided by the factor) to load the training pool: "
        "at the recorded rate, the first days of the trace rarely fill 640 GPUs. "
        "*Cluster usage*: GPUs allocated to training jobs or kept by inference, over "
        "all GPUs of both pools, averaged from the first to the last arrival.",
        "",
        *comparison(results),
        "",
    ]
    for load, seeded in results:
        means = [mean_run(seeded[name]) for name in PROFILES]
        lines += [f"### Arrivals x{load:g} (means over seeds)", "", *table(means), ""]
    lines += [
        "### Reading",
        "",
        *[f"* {line}" for line in reading(results)],
        *[f"* {line}" for line in differences(results, span_days, jobs, whole_jobs)],
        "",
    ]
    return "\n".join(lines)


def differences(
    results: Sequence[tuple[float, Seeded]], span_days: float, jobs: int, whole_jobs: int
) -> list[str]:
    """Why our figures differ from the paper's; the numbers quoted come from the runs."""
    touched = shrunk = 0.0
    queue_up = []
    for load, seeded in results:
        aryl = mean_run(seeded["aryl"]).metrics
        static = mean_run(seeded["static"]).metrics
        touched += aryl["reclaim_shrinks"] + aryl["reclaim_preemptions"]
        shrunk += aryl["reclaim_shrinks"]
        if (aryl["avg_queue_s"] or 0.0) > (static["avg_queue_s"] or 0.0):
            queue_up.append(f"x{load:g}")
    return [
        "**Why our figures differ from the paper's.** The paper's simulation replays 15 "
        "days and over 50,000 jobs of its own production training trace beside an "
        "inference cluster whose idle servers it measured; here "
        f"{span_days:.1f} days of Philly arrivals, a public inference series scaled to a "
        "pool of 30 % of training's size, and an elastic share (50 %) and range (half to "
        "twice the request) that are our assumptions, not the paper's. Queueing is a "
        "nonlinear function of load: the same extra capacity cuts a long queue by a "
        "larger factor than a short one, so ratios of averages depend on how close to "
        "saturation the window runs; "
        + (
            "the rows at several arrival rates show that."
            if len(results) > 1
            else "`make results-aryl` runs the fortnight's first days at several arrival rates."
        ),
        "**Base demand before extras.** Elastic jobs grow into idle GPUs (loans included); "
        "when a job arrives whose base demand does not fit, running elastic jobs give back "
        "extra workers, the least urgent first, each shrink costing a restart (docs/aryl.md), "
        "so a burst does not queue behind jobs that grew while the cluster was quiet"
        + (f"; queueing still rises at {', '.join(queue_up)}" if queue_up else "")
        + ".",
        f"**Reclaims.** {fmt_count(shrunk)} of the {fmt_count(touched)} jobs that `aryl`'s "
        "reclaims touched (means over seeds"
        + (", summed over the loads) " if len(results) > 1 else ") ")
        + "were only shrunk: `loan_aware` placement puts elastic jobs' extra workers on "
        "loans, so returning a server costs them a restart (the measured model's restart "
        "overhead) and no trip back to the queue. The preempted ones had base workers "
        "(every worker of a rigid job) on a loan, placed there when the training pool "
        "had no room. `static` never places "
        "training work on a loan, so its reclaims touch no job and its loaned servers sit "
        "idle: that is what lending nothing means.",
        "**Usage.** Inference keeps the same GPUs under both profiles, so the usage "
        "difference is training work run on loans. The paper's 26.9 % is its maximum "
        "over settings; ours is the mean over the arrivals' span of the jobs replayed.",
    ] + (
        []
        if jobs == whole_jobs
        else [
            f"**Whole trace.** This window is the first {span_days:.1f} days of the "
            f"fortnight's {whole_jobs:,} jobs; `make results-aryl-whole` replays all of them "
            "at the recorded arrivals (section `aryl-whole`)."
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__)
    add_out(parser)
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=list(SEEDS), metavar="N", help="as `arbiter sweep`"
    )
    parser.add_argument("--jobs", type=int, default=2500, help="First N jobs of the trace.")
    parser.add_argument(
        "--whole",
        action="store_true",
        help="The whole fortnight (every job), at the recorded arrivals unless --load says; "
        "written as its own section, `aryl-whole`.",
    )
    parser.add_argument(
        "--load",
        type=float,
        action="append",
        help="Arrival compression factor; repeat for several (default: 1 and 3).",
    )
    add_runner_arguments(parser, default_processes=1, what="simulations")
    args = parser.parse_args(argv)
    seeds: list[int] = args.seeds
    loads: list[float] = args.load or ([1.0] if args.whole else [1.0, 3.0])
    every_row = trace_rows(None)
    whole_jobs = len(every_row)
    jobs = whole_jobs if args.whole else int(args.jobs)
    cluster = load_cluster(clusters_dir() / CLUSTER)
    rows = every_row[:jobs]  # `read_trace` with `max_jobs` reads this prefix
    clock = Stopwatch()
    # The longest points first, so that a pool's last worker does not start one late.
    points = sorted(
        (Point(load, seed, name, jobs) for load in loads for seed in seeds for name in PROFILES),
        key=lambda p: (-p.load, p.profile != "aryl"),
    )
    runs = runner_from_args(args, len(points)).map(run_point, points)
    results = [
        (load, by_profile([r for p, r in zip(points, runs, strict=True) if p.load == load]))
        for load in loads
    ]
    wall = clock.wall_s
    section = render(results, rows, cluster, wall, seeds=seeds, whole_jobs=whole_jobs)
    write_section(args.out, f"{SECTION}-whole" if args.whole else SECTION, section, wall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
