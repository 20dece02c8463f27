"""Regenerate docs/results.md: the scheduling profiles on whole shared traces, over seeds.

    python -m evidence.make_results                      # everything; writes docs/results.md
    python -m evidence.make_results --estimate           # the plan and its time, no simulation
    python -m evidence.make_results --scale 0.05 --out /tmp/results.md   # a quick look
    python -m evidence.make_results --trace itp_cluster04.2w-day14.csv --out /tmp/itp.md

What runs. Each shared trace is replayed whole on the cluster its README pairs it
with (CASES), twice: at its recorded arrivals, and with its arrivals compressed so
that jobs queue. The compression is computed from the trace's own demand: the
offered load (GPU-seconds requested ÷ the span of the arrivals, the GPUs that
would be busy on average if no job ever waited) is scaled to the cluster's size
(LOADED_DEMAND; never less than MIN_COMPRESSION), and each table's heading states
the factor and the numbers behind it. Every point of the grid (trace × load ×
profile × seed) is one `simulator.sweep` point, so a row here is exactly what
`arbiter sweep` gives for the same point, on local processes (`--processes`, 2 by
default) or on a Ray cluster (`--ray ADDRESS`). Runs use the measured performance
model and the default workload options (model families drawn per job, rigid jobs,
perfect estimates); the seed fixes the families drawn, the machine speeds and each
round's policy seed, so the profiles of one seed see the same jobs and machines.

What each column means (per row, mean ± sample standard deviation over its seeds):

* `JCT ÷ bound`: mean JCT over the no-queueing bound, the mean recorded duration of
  the jobs the run completed. A rigid job cannot finish faster than it ran when it
  was recorded, so 1 is a cluster where nothing waits and nothing runs slower (the
  measured model can run a job a little faster than recorded on a quick machine, so
  values just under 1 occur).
* `mean JCT`, `p95 JCT`, `p99 JCT`: job completion time (finish − submission) over
  completed jobs, seconds; `mean queueing`: the part of it spent holding no GPUs
  (before the first start and while suspended).
* `utilisation`: GPU-seconds held ÷ GPU-seconds of the cluster over the makespan;
  `cost`: GPU-seconds held × each node's price (USD); `preemptions`: running jobs
  stopped to make room; `completed`: jobs that finished (admission control may
  reject some; their JCTs then cover fewer jobs).

A sentence under a table compares two profiles over their shared seeds, paired (a
seed gives both the same jobs and machines): a mean per-seed difference of mean JCT
no larger than the standard deviation of the per-seed differences is a tie, and no
sentence compares rows with fewer than COMPARE_SEEDS seeds (`compare`).

Budget (≤ 30 min of wall time on 2 cores). Every figure below is the CPU time of
one run (`run_point`, FIFO, the whole trace, seed 0), measured on the 2-core
development machine while other work kept it busy (load average 4–6; wall time was
2–3× the CPU time then, and contention inflates CPU time too, so these are upper
figures). Jobs per CPU-second at recorded / compressed arrivals (RATE), the CPU
time of one run, and FIFO's mean queueing:

    trace                      jobs    recorded              compressed
    Philly fortnight         24,137   232/s 104 s  4,257 s   ×1.15: 138/s 175 s  16,487 s
    Helios Venus week         4,089   1,030/s 4 s     87 s   ×1.15: 607/s   7 s     488 s
    ITP cluster04 fortnight   6,568   610/s  11 s  2,263 s   ×1.15: 226/s  29 s  19,014 s
    Alibaba fortnight         2,782   5,600/s 0.5 s    2 s   ×1.6: 2,189/s 1.3 s    447 s
    Helios Venus, pooled     10,796   1,870/s 6 s      6 s   ×1.25: 461/s  23 s   2,899 s
    Alibaba, pooled           6,203   122/s  51 s  165,966 s

A long queue slows every round, so the rate falls as the queue grows. Beside FIFO
(RELATIVE_COST, measured beside it): Tiresias and SRTF cost 0.7–1.0× (Tiresias
155 s on the Philly fortnight ×1.15), DL2's network 1.5×, OASiS 3× (Alibaba,
compressed) to 18× (Helios week, recorded); the dual agent replays about 44 jobs
per CPU-second whatever the queue (OWN_RATE). All 19 profiles × 3 seeds × 2 loads
would take hours, so the plan (CASES) spends seeds where a sentence compares and one
where a row is only shown; Tiresias against FIFO gets ten seeds wherever a run is
cheap (PAIR_SEEDS):

    Philly fortnight   recorded: fifo, tiresias × 3 seeds; srtf, spread × 1    832 s
                       ×1.15: fifo, tiresias × 3 seeds                      1,049 s
    Helios Venus week  recorded: fifo, tiresias × 10; every other profile
                              but the mixed-type ones × 1                     193 s
                       ×1.15: fifo, tiresias × 10; fifo-backfill, sjf, srtf,
                              drf, optimus, spread × 3                        256 s
    ITP cluster04      recorded: fifo, tiresias × 10; every other classic
                              profile × 1                                     361 s
                       ×1.15: the same eight as Helios, as there            1,104 s
    Alibaba fortnight  both loads: fifo, tiresias × 10; the other 16
                              profiles × 3 (dual agent: 1)                    318 s
    Helios pooled      recorded: fifo, tiresias × 10; every other classic
                              profile × 1                                     193 s
                       ×1.25: fifo, tiresias × 10; srtf, spread × 3           609 s

about 4,900 CPU-s: 41 min on the two worker processes at these busy-machine rates,
less on a quiet machine; `--estimate` prints the same arithmetic for whatever plan
the options select. A check: the Alibaba fortnight alone (`--trace`) took 315 CPU-s
against 294 estimated (4.9 min of wall time on the busy machine, each worker getting
about half a core). The plan of three seeds everywhere (about 3,280 CPU-s estimated)
ran in 18.7 min of wall time on the quiet machine (commit 2e3e59a, 36.6 min of runs
on the two workers), and in 10.2 min on a faster machine of the same kind (commit
866ec74, 20.0 min of runs): 1.4 to 2.7 times less wall time than estimated. Points
are sent longest first so that the two processes finish together. Left out: the pooled
Philly (82,247 jobs) and ITP (56,652) traces, minutes per run, and the pooled
Alibaba release, whose pods hold the 44 GPUs for weeks so that FIFO's queue never
drains; `arbiter sweep` runs any of them.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence.results_sections import carry_over
from evidence.runner import (
    Stopwatch,
    add_json,
    add_out,
    command_line,
    machine,
    over_seeds,
    write_json,
)
from policies.profiles import dispatch_profile_names
from simulator.cluster import load_cluster
from simulator.deciders import shipped_profiles
from simulator.paths import clusters_dir, traces_dir
from simulator.report import fmt, fmt_count
from simulator.sweep import Point, Summary, run_point, summarise
from simulator.sweep_cli import add_runner_arguments, runner_from_args
from simulator.traces import TraceJob, read_trace

PREFERRED_ORDER = (
    "fifo",
    "fifo-backfill",
    "sjf",
    "srtf",
    "tiresias",
    "drf",
    "optimus",
    "quota",
    "load-threshold",
    "first-fit",
    "spread",
    "random",
    "dl2",
    "dl2-srtf",
    "aryl",
    "static",
    "oasis",
    "hetero-greedy",
    "dual-agent",
)

SLOW = ("oasis",)
"""Profiles an order of magnitude slower per job than the rest; only on the smaller traces."""

MIXED_ONLY = ("dual-agent", "hetero-greedy")
"""Profiles that choose among GPU types: they run only where a cluster has several."""

SEEDS = (0, 1, 2)
COMPARE_SEEDS = 3
"""No sentence compares two rows with fewer seeds than this."""

PAIR = ("fifo", "tiresias")
PAIR_SEEDS = tuple(range(10))
"""Tiresias against FIFO, the comparison the papers and the peer simulators make and the one
every table that queues must settle, runs over ten seeds wherever a run costs under half a
CPU-minute: every trace but the Philly fortnight. Three seeds left the Helios week at recorded
arrivals a tie (-0.3 % within ±1.0 %, FIFO queueing 92 s) where the same seeds 0 to 9 are
lower (the `tiresias` section); the page's rule compares the mean per-seed difference with
the standard deviation of the differences, which more seeds do not shrink, so ten seeds
estimate the same comparison better without loosening it. Other profiles keep three."""

LOADED_DEMAND = 0.9
"""The loaded variant compresses arrivals until the offered load is this share of the
cluster's GPUs. Bursts then exceed the cluster, and the measured model's slower machines
and whole-node placement leave less than the offered load free, so FIFO queues. At 1.0
the queue grows for the whole fortnight instead of coming and going: the Philly fortnight
×1.25 (offered load 100 % of 640 GPUs) left FIFO at 5.1× the bound, 35,678 s mean
queueing, and took 275 CPU-s per run; ITP cluster04 ×1.25, 4.0× and 37 CPU-s."""

MIN_COMPRESSION = 1.1
"""A trace that already offers that much is still compressed this far, to be a harder variant."""

QUEUE_THRESHOLD_S = 60.0
"""A table where FIFO's mean queueing stays under this "never queues"."""

RATE = {
    "philly.2w-2017-10-02.csv": (232.0, 138.0),
    "helios_venus.1w-2020-06-01.csv": (1030.0, 607.0),
    "itp_cluster04.2w-day14.csv": (610.0, 226.0),
    "alibaba_openb.2w-day135.csv": (5600.0, 2189.0),
    "helios_venus.full.csv": (1870.0, 461.0),
}
"""Jobs per CPU-second of FIFO on the whole trace, at recorded and at compressed arrivals
(measured; see the docstring). A long queue slows every round: the rate falls with it."""

RELATIVE_COST = {"oasis": 15.0, "dl2": 1.5}
"""CPU time per job against FIFO's, measured beside it (see the docstring)."""

OWN_RATE = {"dual-agent": 44.0}
"""Jobs per CPU-second of a profile whose cost does not follow FIFO's: the dual agent's
networks and GP cost the same per job at any queue (Alibaba fortnight, both loads)."""


def scheduling_profiles() -> list[str]:
    """The profiles that order and place training jobs (dispatch ones decide like `fifo`)."""
    names = [n for n in shipped_profiles() if n not in dispatch_profile_names()]
    return ordered_profiles(names)


def ordered_profiles(names: Sequence[str]) -> list[str]:
    known = [n for n in PREFERRED_ORDER if n in names]
    return known + sorted(n for n in names if n not in known)


@dataclass(frozen=True)
class Plan:
    """Which profiles run over `seeds` (an empty `only`: every scheduling profile but
    `skip`), and which run on the first seed only (`once`, or with `others_once` every
    other scheduling profile but `skip`: shown, never compared)."""

    seeds: tuple[int, ...] = SEEDS
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    once: tuple[str, ...] = ()
    others_once: bool = False
    wide: tuple[str, ...] = ()
    """Profiles (of those that run) over PAIR_SEEDS instead of `seeds`."""

    def runs(self, mixed_types: bool, seeds: Sequence[int] | None = None) -> list[tuple[str, int]]:
        """(profile, seed) pairs, profiles in PREFERRED_ORDER; `seeds` overrides the plan's."""
        chosen = list(seeds) if seeds is not None else list(self.seeds)
        names = [n for n in (list(self.only) or scheduling_profiles()) if n not in self.skip]
        once = list(self.once)
        if self.others_once:
            once += [n for n in scheduling_profiles() if n not in self.skip]
        names += [n for n in once if n not in names]
        out: list[tuple[str, int]] = []
        for name in ordered_profiles(names):
            if name in MIXED_ONLY and not mixed_types:
                continue
            if seeds is None and name in self.wide:
                mine = list(PAIR_SEEDS)
            elif name in once and name not in self.only:
                mine = chosen[:1]
            else:
                mine = chosen
            out.extend((name, seed) for seed in mine)
        return out


@dataclass(frozen=True)
class Case:
    """A shared trace on its paired cluster; `loaded` None: recorded arrivals only."""

    trace: str
    cluster: str
    about: str
    recorded: Plan
    loaded: Plan | None


CORE = ("fifo", "fifo-backfill", "sjf", "srtf", "tiresias", "drf", "optimus", "spread")
"""The profiles the sentences compare, each against FIFO, on three seeds where the trace allows
(FIFO and Tiresias on PAIR_SEEDS)."""

EVERY_ONCE = Plan(seeds=(0,), skip=(*SLOW, *MIXED_ONLY), wide=PAIR)
"""Every classic profile (not OASiS, not the mixed-type ones) on one seed, shown, not compared;
FIFO and Tiresias over PAIR_SEEDS."""

CORE_SEEDS = Plan(only=CORE, wide=PAIR)

SANITY = Plan(only=("fifo", "srtf", "tiresias", "spread"), wide=PAIR)
"""The directions a loaded window should show (SRTF and Tiresias below FIFO, spread
placement above consolidated), over three seeds (FIFO and Tiresias over PAIR_SEEDS):
where a run is too dear for more."""

CASES: tuple[Case, ...] = (
    Case(
        "philly.2w-2017-10-02.csv",
        "philly.json",
        "the Philly fortnight (the trace's two busiest weeks) on 640 P100/P40 GPUs",
        # The dearest trace (1.5-3 CPU-min a run): over seeds only Tiresias against FIFO,
        # the comparison the papers and the peer simulators make on it.
        recorded=Plan(only=("fifo", "tiresias"), once=("srtf", "spread")),
        loaded=Plan(only=("fifo", "tiresias")),
    ),
    Case(
        "helios_venus.1w-2020-06-01.csv",
        "helios_venus.json",
        "a Helios Venus week on 760 V100s (the real 1,024 never queue this week)",
        recorded=Plan(only=PAIR, skip=MIXED_ONLY, others_once=True, wide=PAIR),
        loaded=CORE_SEEDS,
    ),
    Case(
        "itp_cluster04.2w-day14.csv",
        "itp.json",
        "the ITP cluster04 fortnight on 704 V100s",
        recorded=Plan(only=PAIR, skip=(*SLOW, *MIXED_ONLY), others_once=True, wide=PAIR),
        loaded=CORE_SEEDS,
    ),
    Case(
        "alibaba_openb.2w-day135.csv",
        "alibaba_openb.json",
        "the Alibaba fortnight on 44 GPUs of five types",
        recorded=Plan(once=("dual-agent",), wide=PAIR),
        loaded=Plan(once=("dual-agent",), wide=PAIR),
    ),
    Case(
        "helios_venus.full.csv",
        "helios_venus-full.json",
        "the whole Helios Venus slice (20 days) at Venus's real size, 1,024 V100s",
        recorded=EVERY_ONCE,
        loaded=SANITY,
    ),
)
"""The pooled Philly (82,247 jobs) and ITP (56,652) traces take minutes per run, and the whole
Alibaba release (6,203 jobs, pods that hold GPUs for weeks: FIFO waits 46 h on average at
recorded arrivals) about 50 CPU-s per run; they do not fit the budget, and
`arbiter sweep --case TRACE CLUSTER` runs them. The GPU-type-aware
profiles (MIXED_ONLY) run where they are cheap, on the Alibaba fortnight's five types."""


@dataclass(frozen=True)
class Demand:
    """A trace's offered load against its cluster, and the compression that loads it."""

    jobs: int
    span_s: float
    offered_gpus: float
    cluster_gpus: int

    @property
    def ratio(self) -> float:
        return self.offered_gpus / self.cluster_gpus

    def compression(self) -> float:
        """Arrival compression for the loaded variant, rounded up to a multiple of 0.05."""
        if self.offered_gpus <= 0:
            return MIN_COMPRESSION
        wanted = LOADED_DEMAND / self.ratio
        return max(MIN_COMPRESSION, math.ceil(round(wanted * 20, 6)) / 20)


def demand(rows: Sequence[TraceJob], cluster_gpus: int) -> Demand:
    """Offered load of `rows`: GPU-seconds requested ÷ the span of their arrivals."""
    if not rows:
        return Demand(0, 0.0, 0.0, cluster_gpus)
    span = max(r.submit_time_s for r in rows) - min(r.submit_time_s for r in rows)
    gpu_s = sum(r.num_gpus * r.duration_s for r in rows)
    return Demand(len(rows), span, gpu_s / span if span > 0 else 0.0, cluster_gpus)


@dataclass(frozen=True)
class Table:
    """One table of the page: a case at one load, with the points that fill it."""

    case: Case
    load: float
    heading: str
    why: str
    points: tuple[Point, ...]


def _cluster_gpus(path: Path) -> tuple[int, bool]:
    spec = load_cluster(path)
    types = {g.gpu_type for g in spec.node_groups if g.pool == "training"}
    return spec.training_gpus(), len(types) > 1


def tables(
    cases: Sequence[Case],
    scale: float = 1.0,
    profiles: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Table]:
    """The page's tables and their points; `profiles`/`seeds` narrow every plan."""
    out: list[Table] = []
    for case in cases:
        trace_path, cluster_path = traces_dir() / case.trace, clusters_dir() / case.cluster
        whole = read_trace(trace_path)
        max_jobs = None if scale >= 1.0 else max(1, int(len(whole) * scale))
        rows = whole[:max_jobs] if max_jobs is not None else whole
        gpus, mixed = _cluster_gpus(cluster_path)
        need = demand(rows, gpus)
        offered = (
            f"{need.jobs:,} jobs offer {need.offered_gpus:,.0f} GPUs busy on average over "
            f"{need.span_s / 86400:.1f} days against {gpus:,} GPUs ({need.ratio:.0%})"
        )
        variants: list[tuple[float, Plan, str, str]] = [
            (1.0, case.recorded, "recorded arrivals", offered)
        ]
        if case.loaded is not None:
            factor = need.compression()
            variants.append(
                (
                    factor,
                    case.loaded,
                    f"arrivals compressed ×{factor:g}",
                    f"{offered}; gaps between arrivals divided by {factor:g} bring the "
                    f"offered load to {need.ratio * factor:.0%} of the cluster, so bursts "
                    "exceed it and jobs queue",
                )
            )
        for load, plan, label, why in variants:
            points = tuple(
                Point(
                    trace=str(trace_path),
                    cluster=str(cluster_path),
                    profile=name,
                    seed=seed,
                    max_jobs=max_jobs,
                    load=load,
                )
                for name, seed in plan.runs(mixed, seeds)
                if profiles is None or name in profiles
            )
            if points:
                heading = f"`{case.trace}` on `{case.cluster}`, {label}"
                out.append(Table(case, load, heading, why, points))
    return out


def estimate_s(point: Point, jobs: int) -> float:
    """CPU-seconds a point should take, from the measured rates (RATE)."""
    if point.profile in OWN_RATE:
        return jobs / OWN_RATE[point.profile]
    recorded, loaded = RATE.get(Path(point.trace).name, (180.0, 180.0))
    rate = loaded if point.load > 1.0 else recorded
    return jobs / rate * RELATIVE_COST.get(point.profile, 1.0)


def _jobs(point: Point) -> int:
    if point.max_jobs is not None:
        return point.max_jobs
    return _trace_jobs(point.trace)


_JOB_COUNTS: dict[str, int] = {}


def _trace_jobs(path: str) -> int:
    if path not in _JOB_COUNTS:
        _JOB_COUNTS[path] = len(read_trace(path))
    return _JOB_COUNTS[path]


def longest_first(points: Sequence[Point]) -> list[int]:
    """Indices of `points` by estimated time, longest first: two workers then finish
    together instead of one waiting out a long run started last."""
    return sorted(range(len(points)), key=lambda i: -estimate_s(points[i], _jobs(points[i])))


# ---- reading the numbers -------------------------------------------------------------

SummaryKeys = (
    "jct_vs_bound",
    "avg_jct_s",
    "avg_queue_s",
    "p95_jct_s",
    "p99_jct_s",
    "gpu_utilization",
    "cost_usd",
    "preemptions",
    "jobs_completed",
    "jobs",
    "jobs_rejected",
    "jobs_unfinished",
    "bound_s",
    "jobs_per_s",
)

COLUMNS = (
    ("JCT ÷ bound", "jct_vs_bound", 3),
    ("mean JCT (s)", "avg_jct_s", 0),
    ("mean queueing (s)", "avg_queue_s", 0),
    ("p95 JCT (s)", "p95_jct_s", 0),
    ("p99 JCT (s)", "p99_jct_s", 0),
    ("utilisation", "gpu_utilization", 3),
    ("cost (USD)", "cost_usd", 0),
    ("preemptions", "preemptions", 0),
    ("completed", "jobs_completed", 0),
)
"""(header, metric key, decimals) of each column."""


def cell(mean: float | None, spread: float | None, digits: int) -> str:
    """Mean ± standard deviation over seeds ("–": no value; no "±" for one seed)."""
    if mean is None:
        return "–"
    # + 0.0 turns the -0.0 that float noise rounds to (a queueing of -1e-12 s) into 0.
    text = f"{round(mean, digits) + 0.0:,.{digits}f}"
    if spread is not None and not math.isnan(spread):
        text += f" ± {spread:,.{digits}f}"
    return text


COMPARED_WITH_FIFO = ("fifo-backfill", "sjf", "srtf", "tiresias", "optimus", "drf", "dl2")


def _m(s: Summary, key: str) -> float:
    value = s.mean.get(key)
    return 0.0 if value is None else value


def _on_seeds(s: Summary, key: str, seeds: set[int]) -> float:
    """Mean of `key` over `seeds` (the row's own mean when it ran none of them)."""
    values = [v for seed in seeds if (v := s.by_seed[seed].get(key)) is not None]
    return statistics.fmean(values) if values else _m(s, key)


def _sd(s: Summary, key: str) -> float:
    value = s.spread.get(key)
    return 0.0 if value is None or math.isnan(value) else value


def _whole(s: Summary, key: str, seeds: set[int] | None = None) -> str:
    """The mean to whole units (+ 0.0: float noise rounds to -0, which is 0), over `seeds`
    if given (two rows compared on the seeds both ran)."""
    value = _m(s, key) if seeds is None else _on_seeds(s, key, seeds)
    return f"{round(value) + 0.0:,.0f}"


def complete(s: Summary) -> bool:
    """Whether every seed's run completed every job (rejecting profiles average fewer)."""
    return s.mean.get("avg_jct_s") is not None and _m(s, "jobs_completed") == _m(s, "jobs")


def queues(summaries: Sequence[Summary]) -> bool:
    """Whether jobs wait under FIFO with every job admitted (the window's own contention).

    Not any profile's queueing: OASiS defers admitted jobs to cheaper slots on its own.
    """
    fifo = [s for s in summaries if s.setting["profile"] == "fifo"]
    base = fifo or list(summaries)
    return any(_m(s, "avg_queue_s") >= QUEUE_THRESHOLD_S for s in base)


def compare(a: Summary, b: Summary, key: str = "avg_jct_s") -> tuple[str, str]:
    """(verdict, sentence) for `a` against `b` on `key`: "lower", "higher", "tie" or
    "few seeds".

    On shared seeds the two runs of a seed replay the same jobs on the same machines,
    so the spread is that of the per-seed differences (paired): a mean difference no
    larger than their standard deviation is a tie. Without COMPARE_SEEDS shared seeds
    nothing is called; rows over different seeds fall back to the sum of the two
    standard deviations.
    """
    ma, mb = _m(a, key), _m(b, key)
    shared = sorted(set(a.by_seed) & set(b.by_seed))
    pairs = [(a.by_seed[s].get(key), b.by_seed[s].get(key)) for s in shared]
    paired = [(x, y) for x, y in pairs if x is not None and y is not None]
    if len(paired) >= COMPARE_SEEDS:
        # Rows over different seeds (FIFO and Tiresias over ten, the rest over three):
        # the change, like the difference, is that of the seeds both ran.
        ma = statistics.fmean(x for x, _ in paired)
        mb = statistics.fmean(y for _, y in paired)
    change = f"{100 * (ma / mb - 1.0) + 0.0:+.1f} %" if mb else "n/a"
    seeds = min(a.seeds, b.seeds)
    if seeds < COMPARE_SEEDS:
        return "few seeds", f"{change} on {seeds} seed(s), too few to call"
    diffs = [x - y for x, y in paired]
    if len(diffs) >= COMPARE_SEEDS:
        _, difference, margin = over_seeds(diffs)
        how = "paired over seeds"
    else:
        difference, margin = ma - mb, _sd(a, key) + _sd(b, key)
        how = "summed over the two rows"
    if abs(difference) <= margin:
        return "tie", f"a tie ({change}, within the spread of ±{margin:,.0f} s, {how})"
    word = "lower" if difference < 0 else "higher"
    return word, (
        f"{word} by {abs(difference):,.0f} s ({change}, beyond the spread of ±{margin:,.0f} s, "
        f"{how})"
    )


def observations(summaries: Sequence[Summary]) -> list[str]:
    """Plain statements computed from one table's summaries."""
    by = {s.setting["profile"]: s for s in summaries}
    out: list[str] = []
    full = [s for s in summaries if complete(s)]
    if not full:
        return ["No profile completed every job."]
    bound = _m(full[0], "bound_s")
    out.append(f"No-queueing bound (mean recorded duration): {fmt(bound)} s.")
    fifo = by.get("fifo")
    if not queues(summaries):
        base = [fifo] if fifo is not None else summaries
        worst = max(0.0, *(_m(s, "avg_queue_s") for s in base))
        out.append(
            f"Jobs hardly wait (mean queueing at most {worst:.0f} s under FIFO): ordering "
            "and admission have little to decide, and profiles differ mostly through placement."
        )
    elif fifo is not None:
        out.append(
            f"FIFO queues: mean queueing {fmt(_m(fifo, 'avg_queue_s'))} s, mean JCT "
            f"{_m(fifo, 'jct_vs_bound'):.2f}× the bound."
        )
    # Rows over enough seeds to compare, when there are any (one-seed rows are only shown).
    seeded = [s for s in full if s.seeds >= COMPARE_SEEDS] or full
    # Compared on the seeds they all ran (rows may run ten seeds or three).
    common = set.intersection(*(set(s.by_seed) for s in seeded))
    best = min(seeded, key=lambda s: _on_seeds(s, "avg_jct_s", common))
    ties = [s.setting["profile"] for s in seeded if s is not best and compare(s, best)[0] == "tie"]
    line = (
        f"Lowest mean JCT among profiles that ran every job: **{best.setting['profile']}** "
        f"({_m(best, 'jct_vs_bound'):.2f}× the bound)"
    )
    if best.seeds < COMPARE_SEEDS:
        line += f", on {best.seeds} seed(s): shown, not compared"
    if ties:
        line += "; tied with it within the spread: " + ", ".join(ties)
    out.append(line + ".")
    if fifo is not None and complete(fifo):
        for name in COMPARED_WITH_FIFO:
            s = by.get(name)
            if s is None or not complete(s):
                continue
            _, said = compare(s, fifo)
            shared = set(s.by_seed) & set(fifo.by_seed)
            out.append(
                f"{name} vs fifo: mean JCT {said}; mean queueing "
                f"{_whole(s, 'avg_queue_s', shared)} s vs {_whole(fifo, 'avg_queue_s', shared)} s; "
                f"{_whole(s, 'preemptions')} preemptions."
            )
        spread = by.get("spread")
        if spread is not None and complete(spread):
            _, said = compare(spread, fifo)
            out.append(f"Spread placement vs consolidated (both strict FIFO): mean JCT {said}.")
    for s in summaries:
        if _m(s, "jobs_rejected"):
            out.append(
                f"{s.setting['profile']} rejected {fmt_count(_m(s, 'jobs_rejected'))} jobs at "
                "admission (mean over seeds); its JCTs average the jobs it ran, so they are "
                "not comparable with the others'."
            )
        if _m(s, "jobs_unfinished"):
            out.append(
                f"{s.setting['profile']} left {fmt_count(_m(s, 'jobs_unfinished'))} jobs "
                "unfinished."
            )
    speeds = [(s.setting["profile"], _m(s, "jobs_per_s")) for s in summaries]
    slow, fast = min(speeds, key=lambda x: x[1]), max(speeds, key=lambda x: x[1])
    out.append(
        f"Simulator speed: {fmt(slow[1])} jobs/s ({slow[0]}) to {fmt(fast[1])} jobs/s ({fast[0]})."
    )
    return out


Result = tuple[Table, list[Summary]]


def summary(results: Sequence[Result]) -> list[str]:
    """The cross-table reading of the numbers, each statement computed from them."""
    queued = [(t, s) for t, s in results if queues(s)]
    lines = ["## What the numbers say", ""]
    lines.append(
        f"* **Where jobs queue.** FIFO queues (mean queueing ≥ {QUEUE_THRESHOLD_S:.0f} s) in "
        f"{len(queued)} of {len(results)} tables"
        + (
            ": " + "; ".join(t.heading for t, s in results if not queues(s)) + " do not."
            if len(queued) < len(results)
            else "."
        )
    )
    tally: dict[str, dict[str, int]] = {}
    for _, summaries in queued:
        by = {s.setting["profile"]: s for s in summaries}
        fifo = by.get("fifo")
        if fifo is None or not complete(fifo):
            continue
        for name in ("srtf", "tiresias", "sjf", "spread"):
            s = by.get(name)
            if s is not None and complete(s):
                verdict, _ = compare(s, fifo)
                tally.setdefault(name, {}).setdefault(verdict, 0)
                tally[name][verdict] += 1
    for name, counts in tally.items():
        said = ", ".join(f"{k} in {v}" for k, v in sorted(counts.items()))
        lines.append(f"* **{name} vs fifo** on the tables that queue (mean JCT): {said}.")
    rejecting = sorted(
        {s.setting["profile"] for _, ss in results for s in ss if _m(s, "jobs_rejected")}
    )
    if rejecting:
        lines.append(
            f"* **Admission control** ({', '.join(rejecting)}) rejects jobs; mean JCT then "
            "covers only the jobs admitted, so compare such profiles on `completed`, utility "
            "and cost too."
        )
    lines += [
        "* **Utilisation** is GPU-seconds held over capacity across the makespan, which the "
        "longest jobs stretch past the last arrival.",
        "* These workloads have rigid jobs, no utility functions and no inference pool, so "
        "`aryl`, `static` and `dl2` run here as scheduling baselines: the sections after the "
        "tables test OASiS, Aryl and DL2 on workloads where they have something to decide.",
        "",
    ]
    return lines


def table_markdown(summaries: Sequence[Summary]) -> str:
    header = "| profile | seeds | " + " | ".join(name for name, _, _ in COLUMNS) + " |"
    rule = "|---|---:|" + "---:|" * len(COLUMNS)
    rows = [
        f"| {s.setting['profile']} | {s.seeds} | "
        + " | ".join(cell(s.mean.get(key), s.spread.get(key), d) for _, key, d in COLUMNS)
        + " |"
        for s in summaries
    ]
    return "\n".join([header, rule, *rows])


def render(results: Sequence[Result], wall_s: float, runs_s: float, scale: float) -> str:
    lines = [
        "# Results: the scheduling profiles on whole shared traces",
        "",
        "Generated by `python -m evidence.make_results` (`make results`); do not edit by hand.",
        f"Regeneration took {wall_s / 60:.1f} min of wall time; the runs themselves took "
        f"{runs_s / 60:.1f} min together (sum of each run's wall time, on the worker "
        f"processes) on this machine ({machine()}, Python "
        f"{platform.python_version()}).",
        "",
        "Setup: measured performance model (docs/performance-model.md), default workload "
        "options (model family drawn per job among the measured families, rigid jobs, "
        "recorded durations as perfect estimates); each row is mean ± sample standard "
        "deviation over its seeds (the seed fixes the families, the machine speeds and the "
        "policy seed). Each trace is replayed "
        + ("whole" if scale >= 1.0 else f"over its first {scale:.1%} of jobs")
        + " from an empty cluster, at recorded arrivals and with arrivals compressed as "
        "each heading states. `JCT ÷ bound` is mean JCT over the mean recorded duration "
        "of the completed jobs (a rigid job cannot finish faster); the columns are defined "
        "in `evidence/make_results.py` and docs/simulator.md. Sentences compare two "
        "profiles over their shared seeds, paired (a seed gives both the same jobs and "
        "machines): a mean per-seed difference no larger than the standard deviation of "
        "the per-seed differences is called a tie, and rows with fewer than "
        f"{COMPARE_SEEDS} seeds are not compared.",
        "",
        "| table | why |",
        "|---|---|",
    ]
    lines += [f"| {t.heading} | {t.why} |" for t, _ in results]
    lines.append("")
    lines += summary(results)
    for table, summaries in results:
        lines += [
            f"## {table.heading}",
            "",
            f"{table.case.about}; {table.why}.",
            "",
            table_markdown(summaries),
            "",
            *[f"* {line}" for line in observations(summaries)],
            "",
        ]
    return "\n".join(lines)


def _write(out: Path, text: str) -> None:
    """Write the tables, keeping the sections other evidence modules own (results_sections)."""
    old = out.read_text(encoding="utf-8") if out.exists() else ""
    out.write_text(carry_over(old, text), encoding="utf-8")


def _group(rows: Sequence[Mapping[str, Any]]) -> list[Summary]:
    return summarise(rows, SummaryKeys)


def run_tables(
    plan: Sequence[Table], runner_args: Any
) -> Iterator[tuple[Table, list[dict[str, Any]]]]:
    """Every point of every table on one runner, longest first; the rows per table."""
    points = [p for t in plan for p in t.points]
    order = longest_first(points)
    runner = runner_from_args(runner_args, len(points))
    done = runner.map(run_point, [points[i] for i in order])
    rows: list[dict[str, Any]] = [{}] * len(points)
    for i, row in zip(order, done, strict=True):
        rows[i] = row
    start = 0
    for table in plan:
        mine = rows[start : start + len(table.points)]
        start += len(table.points)
        yield table, mine


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__)
    add_out(parser)
    add_json(parser, help="Also dump every row here (re-render with --from-json).")
    parser.add_argument("--scale", type=float, default=1.0, help="Fraction of each trace.")
    parser.add_argument("--profile", action="append", default=None, help="Only these.")
    parser.add_argument("--trace", action="append", default=None, help="Only these traces.")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="Override seeds.")
    parser.add_argument(
        "--estimate", action="store_true", help="Print the plan and its estimated time only."
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="Re-render the Markdown from rows saved by --json (no simulation).",
    )
    add_runner_arguments(parser, default_processes=2, what="simulations")
    args = parser.parse_args(argv)
    cases = list(CASES)
    if args.trace:
        cases = [c for c in cases if c.trace in args.trace]
    if args.from_json is not None:
        raw = json.loads(args.from_json.read_text(encoding="utf-8"))
        # The headings state the compression, which depends on the share replayed.
        plan = tables(cases, raw["scale"], args.profile, args.seeds)
        saved = {t["heading"]: t["rows"] for t in raw["tables"]}
        results = [(t, _group(saved[t.heading])) for t in plan if t.heading in saved]
        _write(args.out, render(results, raw["wall_s"], raw["runs_s"], raw["scale"]))
        print(f"wrote {args.out} from {args.from_json}", file=sys.stderr)
        return 0
    plan = tables(cases, args.scale, args.profile, args.seeds)
    if args.estimate:
        print_estimate(plan, processes=int(args.processes))
        return 0
    clock = Stopwatch()
    raw_rows = list(run_tables(plan, args))
    wall = clock.wall_s
    runs = sum(float(row.get("sim_wall_s") or 0.0) for _, rows in raw_rows for row in rows)
    results = [(t, _group(rows)) for t, rows in raw_rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _write(args.out, render(results, wall, runs, args.scale))
    if args.json is not None:
        dump = {
            "wall_s": wall,
            "runs_s": runs,
            "scale": args.scale,
            "tables": [{"heading": t.heading, "rows": rows} for t, rows in raw_rows],
        }
        write_json(args.json, dump)
    print(f"wrote {args.out} in {wall / 60:.1f} min", file=sys.stderr)
    return 0


def print_estimate(plan: Sequence[Table], processes: int) -> None:
    total = 0.0
    for table in plan:
        took = sum(estimate_s(p, _jobs(p)) for p in table.points)
        total += took
        profiles = len({p.profile for p in table.points})
        seeds = len({p.seed for p in table.points})
        print(f"{table.heading}: {profiles} profiles × {seeds} seeds ≈ {took:,.0f} CPU-s")
    print(
        f"total ≈ {total:,.0f} CPU-s: {total / 60 / processes:.0f} min on {processes} "
        "processes at the measured rates"
    )


if __name__ == "__main__":
    sys.exit(main())
