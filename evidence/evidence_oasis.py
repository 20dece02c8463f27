"""Evidence for OASiS: total utility against accept-all FIFO and DRF, beside the paper's claim.

    .venv/bin/python -m evidence.evidence_oasis --processes 2  # section `oasis` of docs/results.md
    .venv/bin/python -m evidence.evidence_oasis --max-jobs 300 --seeds 0 --out /tmp/results.md

Bao, Peng, Wu and Li, *Online Job Scheduling in Distributed Machine Learning
Clusters* (INFOCOM 2018) admit a job only when its utility beats the priced cost
of its best schedule, with prices that grow exponentially with the committed
use of each resource, and prove the online algorithm competitive (docs/oasis.md).
The claim checked here: where admission matters, the `oasis` profile earns more
total utility than the same cluster accepting every job under FIFO (`fifo`) or
DRF (`drf`). OASiS also runs with the paper's completion rule (SLOT_END: a schedule
valued at the end of its last slot) beside ours (valued when its work is done).

* **Trace** (TRACE, CLUSTER): Alibaba's fortnight on its 44-GPU cluster, whole;
  each case (CASES) runs it at the recorded arrival times or with arrival gaps
  divided by a factor, which overloads the cluster so that a queue builds and a
  job that waits loses utility. The load facts quoted are computed from the
  trace.
* **Utilities** come from the workload options `utility` (`sigmoid`, `step`)
  and `utility_value` (`gpu-hours`, or a seeded `priority` per job), documented
  in `simulator/workload.py`. Jobs are rigid, as recorded.
* **Reference.** Σ f_j(recorded duration), the utility if every job started on
  arrival and ran exactly its recorded time. No schedule earns more (machine
  speed variation aside), so it bounds the offline optimum that the competitive
  ratio speaks of.
* Every case runs over seeds 0–2 (the seed draws the jobs' model families,
  priorities and machine speeds), with the measured performance model and the
  in-process engine, OASiS's state kept between rounds as the service keeps it.
  A comparison is read over the seeds, paired: a mean per-seed difference no
  larger than the standard deviation of the per-seed differences is a tie (the
  rule of `make results`). The runs are independent tasks on `--processes N`.

The section is written with `results_sections.splice`, so `make_results.py`
keeps it when it regenerates the rest of the file. The run is deterministic.
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from evidence.runner import (
    Stopwatch,
    add_out,
    command_line,
    machine,
    over_seeds,
    write_section,
)
from policies.common.oasis import RESOURCES, STATE_KEY, OasisParams, OasisState, load_state
from simulator.cluster import ClusterSpec, load_cluster
from simulator.deciders import EngineDecider, shipped_profiles
from simulator.metrics import SimulationResult
from simulator.paths import clusters_dir, traces_dir
from simulator.report import fmt, fmt_count
from simulator.runner import RunConfig, build_simulation
from simulator.sweep_cli import add_runner_arguments, runner_from_args
from simulator.traces import TraceJob, compress_arrivals, read_trace
from simulator.workload import UTILITY_HORIZON, WorkloadOptions, make_jobs

SECTION = "oasis"
SLOT_END = "oasis-slot-end"
"""OASiS valuing a schedule at the end of its last slot, the paper's rule
(`completion_value="slot_end"`), beside the default that values it when done."""
PROFILES = ("oasis", SLOT_END, "fifo", "drf")
SEEDS = (0, 1, 2)
UtilityForm = Literal["sigmoid", "step"]
UtilityValue = Literal["gpu-hours", "priority"]
TRACE = "alibaba_openb.2w-day135.csv"
CLUSTER = "alibaba_openb.json"
WHY = (
    "the whole fortnight on the cluster it is paired with, cheap to simulate since few "
    "jobs run at once"
)


@dataclass(frozen=True)
class Case:
    load: float
    """Arrival compression: gaps between arrivals divided by this (1: as recorded)."""
    form: UtilityForm
    value: UtilityValue

    @property
    def label(self) -> str:
        return f"arrivals x{self.load:g}, `{self.form}` utility, value = {self.value}"


CASES: tuple[Case, ...] = (
    Case(1.0, "sigmoid", "priority"),
    Case(2.0, "sigmoid", "priority"),
    Case(2.0, "step", "priority"),
    Case(2.0, "sigmoid", "gpu-hours"),
)


@dataclass(frozen=True)
class Load:
    """The window's demand if no job ever waited, from the trace alone."""

    span_h: float
    peak_gpus: int
    mean_gpus: float
    hours_over: float


def offered_load(rows: Sequence[TraceJob], capacity: int) -> Load:
    """Busy GPUs over the arrivals' span if every job ran from arrival for its recorded time."""
    events = sorted(
        [(r.submit_time_s, r.num_gpus) for r in rows]
        + [(r.submit_time_s + r.duration_s, -r.num_gpus) for r in rows],
        key=lambda e: (e[0], e[1]),
    )
    start = rows[0].submit_time_s
    end = rows[-1].submit_time_s  # after the last arrival the tail drains; it adds no load
    busy = peak = 0
    over = area = 0.0
    last = start
    for t, change in events:
        if t > last and last < end:
            dt = min(t, end) - last
            area += busy * dt
            if busy > capacity:
                over += dt
        last = max(last, t)
        busy += change
        if t <= end:
            peak = max(peak, busy)
    span = max(end - start, 1.0)
    return Load(span / 3600.0, peak, area / span, over / 3600.0)


def no_wait_utility(result: SimulationResult) -> float:
    """Σ f_j(recorded duration) over every job of the run (the reference)."""
    return sum(
        r.utility.value_at(r.recorded_duration_s) for r in result.jobs if r.utility is not None
    )


def alpha(state: OasisState) -> tuple[float, str]:
    """The paper's α = max over resources of max(1, ln(U_k / L_k)), from OASiS's final state."""
    best, which = 1.0, "none"
    floor, ceiling = state.floor, state.ceiling
    if floor is None or ceiling is None:
        return best, which
    for name, low, high in zip(RESOURCES, floor, ceiling, strict=True):
        if low > 0 and high > 0 and math.log(high / low) > best:
            best, which = math.log(high / low), name
    return best, which


@dataclass
class Run:
    profile: str
    seed: int
    metrics: dict[str, Any]
    reference: float
    alpha: float | None = None
    alpha_resource: str = ""
    rejected_long: int = 0
    """Rejected jobs whose recorded run time exceeds OASiS's horizon."""
    rejected_short: int = 0
    """Rejected jobs whose utility horizon (twice the run time) is under one slot."""


def _rejections(run: Run, result: SimulationResult) -> None:
    params = OasisParams()
    week = params.slot_s * params.horizon_slots
    for record in result.jobs:
        if record.status != "rejected":
            continue
        if record.recorded_duration_s > week:
            run.rejected_long += 1
        elif UTILITY_HORIZON * record.recorded_duration_s < params.slot_s:
            run.rejected_short += 1


@cache
def trace_rows(max_jobs: int | None) -> tuple[TraceJob, ...]:
    return tuple(read_trace(traces_dir() / TRACE, max_jobs))


@dataclass(frozen=True)
class Point:
    """One simulation: a case, a seed, a profile."""

    case: Case
    seed: int
    profile: str
    max_jobs: int | None = None


def run_point(point: Point) -> Run:
    """Simulate one point (a top-level function of picklable inputs, for the runner)."""
    case, seed = point.case, point.seed
    cluster = load_cluster(clusters_dir() / CLUSTER)
    trace = compress_arrivals(trace_rows(point.max_jobs), case.load)
    config = RunConfig(
        seed=seed, workload=WorkloadOptions(utility=case.form, utility_value=case.value)
    )
    jobs = make_jobs(trace, config.workload, seed=seed)
    decider = decider_for(point.profile)
    result = build_simulation(jobs, cluster, config).run(decider)
    run = Run(point.profile, seed, result.metrics, no_wait_utility(result))
    _rejections(run, result)
    kept = decider.state.get(STATE_KEY)
    if kept is not None:
        run.alpha, run.alpha_resource = alpha(load_state(kept))
    print(
        f"  {case.label} {point.profile} seed {seed}: utility "
        f"{result.metrics['utility']:.1f}, {result.metrics['sim_wall_s']:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return run


def decider_for(profile: str) -> EngineDecider:
    """The shipped profile, or for SLOT_END OASiS with the paper's completion rule."""
    if profile != SLOT_END:
        return EngineDecider.named(profile)
    base = shipped_profiles()["oasis"]
    params = {**base.admission.params, "completion_value": "slot_end"}
    admission = base.admission.model_copy(update={"params": params})
    return EngineDecider(base.model_copy(update={"name": SLOT_END, "admission": admission}))


def case_load(rows: Sequence[TraceJob], cluster: ClusterSpec, case: Case) -> Load:
    return offered_load(compress_arrivals(rows, case.load), cluster.training_gpus())


def _pct(a: float, b: float) -> str:
    return f"{100.0 * (a / b - 1.0):+.1f} %" if b else "–"


def _mean(runs: Sequence[Run], key: str) -> float | None:
    values = [float(r.metrics[key]) for r in runs if r.metrics[key] is not None]
    return statistics.fmean(values) if values else None


def _utility(run: Run) -> float:
    return float(run.metrics["utility"])


def _spread(values: Sequence[float]) -> str:
    return f" ± {fmt(statistics.stdev(values))}" if len(values) > 1 else ""


def table(runs: Sequence[Run]) -> list[str]:
    """One row per profile: means over seeds (utility with its standard deviation)."""
    lines = [
        "| profile | seeds | utility | share of reference | completed | rejected | unfinished "
        "| avg JCT (s) | p95 JCT (s) | avg queueing (s) | GPU util. | sim (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for profile, mine in _by(runs).items():
        utilities = [_utility(r) for r in mine]
        share = statistics.fmean(_utility(r) / r.reference for r in mine if r.reference)
        queue = _mean(mine, "avg_queue_s")
        waited = max(0.0, queue) if queue is not None else None
        lines.append(
            f"| {profile} | {len(mine)} | {fmt(statistics.fmean(utilities))}"
            f"{_spread(utilities)} | {100 * share:.1f} % "
            f"| {fmt_count(_mean(mine, 'jobs_completed'))} "
            f"| {fmt_count(_mean(mine, 'jobs_rejected'))} "
            f"| {fmt_count(_mean(mine, 'jobs_unfinished'))} | {fmt(_mean(mine, 'avg_jct_s'))} "
            f"| {fmt(_mean(mine, 'p95_jct_s'))} | {fmt(waited)} "
            f"| {_mean(mine, 'gpu_utilization') or 0.0:.3f} | {fmt(_mean(mine, 'sim_wall_s'))} |"
        )
    return lines


def _by(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs by profile (in PROFILES order), each list by seed."""
    return {
        name: sorted((r for r in runs if r.profile == name), key=lambda r: r.seed)
        for name in PROFILES
        if any(r.profile == name for r in runs)
    }


def compare(runs: Sequence[Run], other: str, mine: str = "oasis") -> tuple[str, float, float, int]:
    """`mine`'s utility against `other`'s, paired by seed: (verdict, mean difference, SD of
    the differences, seeds). "more" or "less" only beyond the SD; else "a tie"."""
    by = _by(runs)
    theirs = {r.seed: _utility(r) for r in by[other]}
    diffs = [_utility(r) - theirs[r.seed] for r in by[mine] if r.seed in theirs]
    sign, mean, spread = over_seeds(diffs)
    return ("a tie", "more", "less")[sign], mean, spread, len(diffs)


def reading(runs: Sequence[Run]) -> list[str]:
    """What one table says, computed from it."""
    by = _by(runs)
    oasis = by["oasis"]
    u = statistics.fmean(_utility(r) for r in oasis)
    out: list[str] = []
    for other in ("fifo", "drf"):
        b = statistics.fmean(_utility(r) for r in by[other])
        word, mean, spread, seeds = compare(runs, other)
        margin = f"±{fmt(spread)}" if math.isfinite(spread) else "no spread on one seed"
        claim = (
            f"as much utility as accept-all {other} (a tie)"
            if word == "a tie"
            else f"{word} utility than accept-all {other}"
        )
        out.append(
            f"oasis earns {claim}: {fmt(u)} vs {fmt(b)} "
            f"({_pct(u, b)}; mean per-seed difference {mean:+,.0f}, {margin}, "
            f"{seeds} seed(s))."
        )
    if SLOT_END in by:
        word, mean, spread, seeds = compare(runs, SLOT_END)
        paper = statistics.fmean(_utility(r) for r in by[SLOT_END])
        margin = f"±{fmt(spread)}" if math.isfinite(spread) else "no spread on one seed"
        rejected_then = statistics.fmean(float(r.metrics["jobs_rejected"]) for r in by[SLOT_END])
        out.append(
            f"Valued at the end of its last slot (the paper's rule, row {SLOT_END}), "
            f"OASiS earns {fmt(paper)} and rejects {fmt_count(rejected_then)} jobs; valued "
            f"when the work is done it earns "
            + ("as much (a tie)" if word == "a tie" else word)
            + f": {_pct(u, paper)} (mean per-seed difference {mean:+,.0f}, {margin}, "
            f"{seeds} seed(s))."
        )
    rejected = statistics.fmean(float(r.metrics["jobs_rejected"]) for r in oasis)
    if rejected:
        jobs = oasis[0].metrics["jobs"]
        long = statistics.fmean(r.rejected_long for r in oasis)
        short = statistics.fmean(r.rejected_short for r in oasis)
        completed = statistics.fmean(float(r.metrics["jobs_completed"]) for r in oasis)
        out.append(
            f"oasis rejects {fmt_count(rejected)} of {jobs:,} jobs (mean over seeds): "
            f"{fmt_count(long)} run longer than its one-week horizon, the rest "
            f"({fmt_count(rejected - long)}) cannot pay for GPU-time at the prices of their "
            f"arrival ({fmt_count(short)} of them jobs whose utility halves or ends within "
            "half an hour: twice their run time is under a slot). Its JCT and queueing "
            f"average the {fmt_count(completed)} it ran, so they are not comparable with the "
            "accept-all runs'."
        )
    alphas = [r.alpha for r in oasis if r.alpha is not None]
    references = [r.reference for r in oasis if r.reference]
    if alphas and references and u > 0:
        worst = max(alphas)
        span = (
            f"{worst:.1f}"
            if f"{min(alphas):.1f}" == f"{worst:.1f}"
            else (f"{min(alphas):.1f}–{worst:.1f}")
        )
        share = statistics.fmean(_utility(r) / r.reference for r in oasis if r.reference)
        out.append(
            f"Competitive ratio: OASiS's final price bounds give α = {span} over the "
            f"seeds (ln U/L of "
            f"{oasis[0].alpha_resource}), so the paper's bound promises at least "
            f"1/(2α) = {100 / (2 * worst):.1f} % of the offline optimum; it earns "
            f"{100 * share:.1f} % of the reference, which is at least the optimum."
        )
    return out


Result = tuple[Case, Load, list[Run]]


def render(
    results: Sequence[Result],
    rows: Sequence[TraceJob],
    cluster: ClusterSpec,
    wall_s: float,
    seeds: Sequence[int],
) -> str:
    jobs = len(rows)
    params = OasisParams()
    week = params.slot_s * params.horizon_slots
    over = [r.duration_s for r in rows if r.duration_s > week]
    longest = (len(over), max(over, default=0.0))
    lines = [
        "## OASiS: total utility against accept-all FIFO and DRF",
        "",
        "Generated by `evidence/evidence_oasis.py` (`make results-oasis`); do not edit by hand.",
        f"The run took {wall_s / 60:.1f} min of wall time on this machine "
        f"({machine()}, 2 cores shared with other work, Python "
        f"{platform.python_version()}).",
        "",
        "Bao et al. (INFOCOM 2018) evaluate OASiS by the total utility of the jobs against "
        "schedulers that accept every job, and report it higher. Here: `oasis` against "
        "`fifo` and `drf` (both accept every job) on the same jobs and cluster. "
        f"Trace `{TRACE}`, all {jobs:,} jobs, on `{CLUSTER}` "
        f"({cluster.training_gpus():,} GPUs): {WHY}. Measured performance model, seeds "
        f"{', '.join(str(s) for s in seeds)} (each draws the jobs' model families, "
        "priorities and machine speeds; a table shows means over them, utility ± its "
        "standard deviation), rigid jobs as recorded, OASiS with its default parameters (30-minute "
        "slots, one-week horizon) and its state kept between rounds as the service keeps "
        "it. Utilities come from the workload options `--utility` and `--utility-value` "
        "(simulator/workload.py): `sigmoid` is worth V/2 at twice the job's recorded run "
        "time, `step` pays V until then and nothing after; V is either the job's "
        "requested GPU-hours or a priority drawn per job (seeded, uniform in [1, 10], "
        "independent of size, as the paper's evaluation gives jobs random priorities). "
        "The *reference* is Σ f(recorded duration), what the jobs would earn if each "
        "started on arrival: no schedule earns more (up to machine-speed variation of a "
        "few per cent), so it also bounds the offline optimum. Arrivals are at the "
        "recorded times (x1) or compressed (gaps divided by the factor) to overload the "
        "cluster. A sentence compares OASiS with a baseline over the seeds, paired: a "
        "mean per-seed difference no larger than the standard deviation of the "
        "per-seed differences is a tie.",
        "",
        "| case | arrivals span (h) | peak demand if no job waited (GPUs) "
        "| mean demand (GPUs) | hours demand exceeds the cluster |",
        "|---|---:|---:|---:|---:|",
    ]
    seen: set[float] = set()
    for case, load, _ in results:
        if case.load in seen:
            continue
        seen.add(case.load)
        lines.append(
            f"| arrivals x{case.load:g} | {load.span_h:.0f} | {load.peak_gpus:,} "
            f"| {load.mean_gpus:.1f} | {load.hours_over:.0f} |"
        )
    lines.append("")
    for case, _, runs in results:
        lines += [
            f"### {case.label}",
            "",
            *table(runs),
            "",
            *[f"* {line}" for line in reading(runs)],
            "",
        ]
    lines += summary(results, longest)
    return "\n".join(lines)


def _rule_verdicts(results: Sequence[Result]) -> list[str]:
    """Per rule, how OASiS fares against the accept-all baselines over every table."""
    out = []
    for name, rule in (("oasis", "valued when done"), (SLOT_END, "valued at the slot's end")):
        counts = {"more": 0, "less": 0, "a tie": 0}
        for *_, runs in results:
            for other in ("fifo", "drf"):
                counts[compare(runs, other, name)[0]] += 1
        out.append(
            f"{rule} it earns more in {counts['more']}, less in {counts['less']} and as "
            f"much in {counts['a tie']} of {sum(counts.values())} comparisons"
        )
    return out


def summary(results: Sequence[Result], longest: tuple[int, float]) -> list[str]:
    """How the claim and the paper's guarantee show up, computed over every table."""
    verdicts: dict[str, list[str]] = {"more": [], "less": [], "a tie": []}
    for case, _, runs in results:
        for other in ("fifo", "drf"):
            verdicts[compare(runs, other)[0]].append(f"{case.label} vs {other}")
    wins, losses, ties = verdicts["more"], verdicts["less"], verdicts["a tie"]
    rule_verdicts = _rule_verdicts(results)
    cap = OasisParams().max_price_ratio
    alphas = sorted({round(r.alpha, 1) for *_, runs in results for r in runs if r.alpha})
    shares = [
        statistics.fmean(_utility(r) / r.reference for r in _by(runs)["oasis"] if r.reference)
        for *_, runs in results
    ]
    return [
        "### Reading",
        "",
        f"* oasis earns more total utility than the accept-all baseline in {len(wins)} of "
        f"{len(wins) + len(losses) + len(ties)} comparisons over the seeds"
        + (f"; less in: {'; '.join(losses)}" if losses else "")
        + (f"; a tie in: {'; '.join(ties)}" if ties else "")
        + ".",
        "* **Completion inside a slot.** OASiS values a schedule when its work is done "
        "inside its last slot (ours, docs/oasis.md); the paper's slotted model values it "
        f"at the end of that slot, the rows {SLOT_END}. With 30-minute slots that rule "
        "makes a job of minutes whose utility is gone within a slot (Alibaba's trace is "
        "full of them) worth nothing, so it is rejected, and lets a job that arrives late "
        "in a slot wait for the next one at no loss to it. Against accept-all, "
        f"{'; '.join(rule_verdicts)}.",
        "* **Where admission pays.** With arrivals compressed the cluster is overloaded: "
        "under FIFO and DRF every job joins the queue and waits, and with utility falling "
        "in the wait many finish worth little. OASiS prices GPU-time by how much of it is "
        "already committed, turns away jobs whose value at their best completion cannot "
        "pay for it, and starts the admitted ones when their schedule says, so they keep "
        "their value. It needs value per GPU-hour to differ between jobs, as it does with "
        "priorities: then prices select.",
        "* **Where it does not.** At the recorded arrival times the cluster rarely queues: "
        "accepting everything loses almost nothing, and every rejection is utility "
        "forgone. OASiS rejects jobs that cannot finish within its one-week horizon "
        f"however long they may run (the trace has {longest[0]:,}, the longest of "
        f"{longest[1] / 86400:.1f} days); when V is a job's GPU-hours, those few jobs of "
        "days on several GPUs carry a large share of all the value, and utility "
        "proportional to size gives every GPU-hour the same worth, so there is nothing "
        "for prices to select and rejecting them costs more than admission gains. "
        "`drf` queues less than strict `fifo` because its progressive filling starts "
        "whichever tenant's job still fits, so a large job at the head does not block "
        "the rest.",
        "* **The competitive ratio.** The paper proves its online algorithm within a "
        "factor 2α of the offline optimum, α = max over resources of max(1, ln(U_k/L_k)), "
        "U and L the bounds of the price function. Our OASiS estimates U and L from the "
        "jobs it has seen (docs/oasis.md); at the end of the runs α = "
        f"{', '.join(f'{a:.1f}' for a in alphas)}"
        + (
            f" (the cap U/L ≤ {cap:.0e} binds: jobs whose utility is nearly gone by the "
            "horizon's end push L towards zero)"
            if any(abs(a - math.log(cap)) < 0.05 for a in alphas)
            else ""
        )
        + ", so the "
        f"guarantee is only {', '.join(f'{100 / (2 * a):.1f} %' for a in alphas)} of the "
        "optimum, while oasis earns "
        f"{', '.join(f'{100 * x:.0f} %' for x in shares)} of the reference (itself at "
        "least the optimum). The bound is a worst case over adversarial arrivals and "
        "loose by design; it does not predict the ranking against accept-all schedulers, "
        "which have no guarantee at all (one long job admitted at the wrong moment makes "
        "everything behind it late). What the numbers show is the mechanism the proof "
        "rests on, prices that rise exponentially with committed use, paying off when "
        "the cluster is overloaded and costing little otherwise except through the "
        "horizon.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__)
    add_out(parser)
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=list(SEEDS), metavar="N", help="as `arbiter sweep`"
    )
    parser.add_argument(
        "--max-jobs", type=int, default=None, help="Only the first N jobs (quick looks)."
    )
    add_runner_arguments(parser, default_processes=1, what="simulations")
    args = parser.parse_args(argv)
    seeds: list[int] = args.seeds
    cluster = load_cluster(clusters_dir() / CLUSTER)
    rows = trace_rows(args.max_jobs)
    clock = Stopwatch()
    points = [
        Point(case, seed, profile, args.max_jobs)
        for case in CASES
        for seed in seeds
        for profile in PROFILES
    ]
    runs = runner_from_args(args, len(points)).map(run_point, points)
    results: list[Result] = [
        (
            case,
            case_load(rows, cluster, case),
            [r for p, r in zip(points, runs, strict=True) if p.case == case],
        )
        for case in CASES
    ]
    wall = clock.wall_s
    write_section(args.out, SECTION, render(results, rows, cluster, wall, seeds), wall)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
