"""Grids of simulations, on local processes or on a Ray cluster, collected in one table.

A grid is every combination of (trace, cluster), profile, seed, arrival load and
workload options. Each point is one simulation (:func:`run_point`), independent of
the others, so the points run anywhere: in this process, on a pool of local
processes, or as Ray tasks. The results do not depend on where they ran: a point's
metrics are fixed by its fields (seeded), so a grid gives the same table on any
runner, wall-clock keys aside (a test holds all three to it).

Beside the simulator's metrics each row carries the no-queueing bound of its run:
the mean recorded duration of the jobs it completed. A rigid job cannot finish
faster than it ran when it was recorded, so `avg_jct_s / bound_s` (`jct_vs_bound`)
says how far a policy is from a cluster where nothing ever waits.

:func:`summarise` folds the seeds of each setting into a mean and a sample standard
deviation, so that a comparison can tell a difference from noise.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from simulator.metrics import TIMING_KEYS
from simulator.perf import PerfMode
from simulator.workload import WorkloadOptions

SUMMARY_KEYS = (
    "avg_jct_s",
    "jct_vs_bound",
    "avg_queue_s",
    "p95_jct_s",
    "p99_jct_s",
    "gpu_utilization",
    "cost_usd",
    "preemptions",
)
"""The metrics :func:`summarise` reports, mean and spread over seeds."""

WORKLOAD_FIELDS = {f.name for f in fields(WorkloadOptions)}


class SweepError(ValueError):
    """A grid that cannot run (an unknown option, an empty axis)."""


@dataclass(frozen=True)
class Point:
    """One simulation of a grid: everything that fixes its metrics."""

    trace: str
    cluster: str
    profile: str
    seed: int = 0
    max_jobs: int | None = None
    perf_mode: PerfMode = "measured"
    load: float = 1.0
    """Arrival compression: gaps between arrivals divided by this (1: as recorded)."""
    workload: tuple[tuple[str, Any], ...] = ()
    """WorkloadOptions fields that differ from the defaults, as (name, value) pairs."""

    def setting(self) -> tuple[Any, ...]:
        """The point without its seed: the rows :func:`summarise` folds together."""
        return (
            self.trace,
            self.cluster,
            self.profile,
            self.max_jobs,
            self.perf_mode,
            self.load,
            self.workload,
        )


@dataclass(frozen=True)
class Grid:
    """The axes of a sweep; :meth:`points` is their product, in a fixed order."""

    cases: Sequence[tuple[str, str]]
    """(trace, cluster) pairs."""
    profiles: Sequence[str]
    seeds: Sequence[int] = (0,)
    loads: Sequence[float] = (1.0,)
    workloads: Sequence[Mapping[str, Any]] = field(default_factory=lambda: [{}])
    max_jobs: int | None = None
    perf_mode: PerfMode = "measured"

    def points(self) -> list[Point]:
        for name, values in (
            ("cases", self.cases),
            ("profiles", self.profiles),
            ("seeds", self.seeds),
            ("loads", self.loads),
            ("workloads", self.workloads),
        ):
            if not values:
                raise SweepError(f"the grid's {name} axis is empty")
        for workload in self.workloads:
            unknown = sorted(set(workload) - WORKLOAD_FIELDS)
            if unknown:
                known = ", ".join(sorted(WORKLOAD_FIELDS))
                raise SweepError(f"unknown workload options {unknown}; known: {known}")
            replace(WorkloadOptions(), **workload).check()
        for load in self.loads:
            if not load > 0:
                raise SweepError(f"loads must be positive, not {load}")
        return [
            Point(
                trace=trace,
                cluster=cluster,
                profile=profile,
                seed=seed,
                max_jobs=self.max_jobs,
                perf_mode=self.perf_mode,
                load=load,
                workload=tuple(sorted(workload.items())),
            )
            for (trace, cluster), load, workload, profile, seed in itertools.product(
                self.cases, self.loads, self.workloads, self.profiles, self.seeds
            )
        ]


def run_point(point: Point) -> dict[str, Any]:
    """One simulation, in process; the row of the grid's table (point fields + metrics)."""
    from simulator.cluster import load_cluster  # noqa: PLC0415 - a Ray task imports here
    from simulator.runner import RunConfig, simulate  # noqa: PLC0415
    from simulator.traces import compress_arrivals, read_trace  # noqa: PLC0415

    rows = read_trace(point.trace, point.max_jobs)
    if point.load != 1.0:
        rows = compress_arrivals(rows, point.load)
    config = RunConfig(
        seed=point.seed,
        perf_mode=point.perf_mode,
        workload=replace(WorkloadOptions(), **dict(point.workload)),
    )
    (run,) = simulate(rows, load_cluster(point.cluster), [point.profile], config)
    completed = [job for job in run.result.jobs if job.status == "completed"]
    bound = statistics.fmean(job.recorded_duration_s for job in completed) if completed else None
    metrics = dict(run.result.metrics)
    avg_jct = metrics.get("avg_jct_s")
    return {
        **asdict(point),
        "workload": dict(point.workload),
        **metrics,
        "bound_s": bound,
        "jct_vs_bound": avg_jct / bound if avg_jct is not None and bound else None,
    }


Runner = Callable[[Sequence[Point]], list[dict[str, Any]]]


def run_sequential(points: Sequence[Point]) -> list[dict[str, Any]]:
    return [run_point(point) for point in points]


def process_runner(processes: int) -> Runner:
    """Points on a pool of `processes` local processes (spawned: no state leaks between)."""

    def run(points: Sequence[Point]) -> list[dict[str, Any]]:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=processes, mp_context=context) as pool:
            return list(pool.map(run_point, points))

    return run


def ray_runner(address: str | None, num_cpus: int | None = None) -> Runner:
    """Points as Ray tasks on the cluster at `address` (None or "local": a local instance).

    Every node of the cluster needs Arbiter installed and the shared data where
    `ARBITER_SHARED_DIR` (or the checkout's `../shared`) says. The instance this
    starts locally is shut down after the grid; a cluster given by address is left
    running.
    """

    def run(points: Sequence[Point]) -> list[dict[str, Any]]:
        import ray  # noqa: PLC0415 - an optional extra

        local = address in {None, "local"}
        started = not ray.is_initialized()
        if started:
            ray.init(
                address=None if local else address,
                num_cpus=num_cpus if local else None,
                include_dashboard=False,
                log_to_driver=False,
            )
        try:
            task = ray.remote(run_point)
            results: list[dict[str, Any]] = ray.get([task.remote(p) for p in points])
            return results
        finally:
            if started:
                ray.shutdown()

    return run


def same_results(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Equal rows in equal order, wall-clock keys aside."""
    strip = [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in a]
    other = [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in b]
    return strip == other


@dataclass(frozen=True)
class Summary:
    """One setting of a grid over its seeds: mean and sample standard deviation per metric."""

    setting: dict[str, Any]
    seeds: int
    mean: dict[str, float | None]
    spread: dict[str, float | None]


def summarise(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str] = SUMMARY_KEYS
) -> list[Summary]:
    """Fold the seeds of each setting (the point without its seed), in first-seen order."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for row in rows:
        setting = (
            row["trace"],
            row["cluster"],
            row["profile"],
            row["max_jobs"],
            row["perf_mode"],
            row["load"],
            tuple(sorted(row["workload"].items())),
        )
        groups.setdefault(setting, []).append(row)
    out = []
    for members in groups.values():
        first = members[0]
        mean: dict[str, float | None] = {}
        spread: dict[str, float | None] = {}
        for key in keys:
            values = [float(m[key]) for m in members if m.get(key) is not None]
            mean[key] = statistics.fmean(values) if values else None
            spread[key] = statistics.stdev(values) if len(values) > 1 else None
        out.append(
            Summary(
                setting={
                    "trace": Path(first["trace"]).name,
                    "cluster": Path(first["cluster"]).name,
                    "profile": first["profile"],
                    "load": first["load"],
                    "workload": first["workload"],
                },
                seeds=len(members),
                mean=mean,
                spread=spread,
            )
        )
    return out


def render(summaries: Sequence[Summary], keys: Sequence[str] = SUMMARY_KEYS) -> str:
    """A Markdown table: each metric as mean ± standard deviation over the seeds."""
    header = ["trace", "cluster", "load", "workload", "profile", "seeds", *keys]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 5 + "---:|" * (len(keys) + 1)]
    for s in summaries:
        workload = ", ".join(f"{k}={v}" for k, v in sorted(s.setting["workload"].items())) or "–"
        cells = [
            s.setting["trace"],
            s.setting["cluster"],
            f"×{s.setting['load']:g}",
            workload,
            s.setting["profile"],
            str(s.seeds),
            *(_cell(s.mean[k], s.spread[k]) for k in keys),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(mean: float | None, spread: float | None) -> str:
    if mean is None:
        return "–"
    digits = 3 if abs(mean) < 10 else 0
    text = f"{mean:,.{digits}f}"
    if spread is not None and not math.isnan(spread):
        text += f" ± {spread:,.{digits}f}"
    return text
