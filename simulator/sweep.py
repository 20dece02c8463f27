"""Grids of simulations, on local processes or on a Ray cluster, collected in one table.

A grid is every combination of (trace, cluster), profile, seed, arrival load and
workload options. Each point is one simulation (:func:`run_point`), independent of
the others, so the points run anywhere: in this process, on a pool of local
processes, or as Ray tasks. The results do not depend on where they ran: a point's
metrics are fixed by its fields (seeded), so a grid gives the same table on any
runner, wall-clock keys aside (a test holds all three to it). The runners
(:class:`Runner`) map any top-level function over picklable inputs; DL2's trainer
plays its rollout episodes on them too.

Beside the simulator's metrics each row carries the no-queueing bound of its run:
the mean recorded duration of the jobs it completed. A rigid job cannot finish
faster than it ran when it was recorded, so `avg_jct_s / bound_s` (`jct_vs_bound`)
says how far a policy is from a cluster where nothing ever waits.

:func:`summarise` folds the seeds of each setting into a mean and a sample standard
deviation, so that a comparison can tell a difference from noise.
"""

from __future__ import annotations

import functools
import itertools
import math
import multiprocessing
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

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


T = TypeVar("T")
R = TypeVar("R")


class Runner(Protocol):
    """Where independent tasks run: `map(task, inputs)` is `[task(x) for x in inputs]`.

    `task` is a top-level function and `inputs` and results are picklable, so a
    task runs the same anywhere; the results come back in the order of `inputs`.
    A grid's points (:func:`run_point`) and DL2's rollout episodes
    (:mod:`training.dl2.reinforce`) are such tasks.
    """

    def map(self, task: Callable[[T], R], inputs: Sequence[T]) -> list[R]: ...

    def started(self) -> AbstractContextManager[None]:
        """Keep the workers up for several maps: a trainer maps once per update, and
        starting processes (or a Ray instance) each time would cost more than the
        tasks. `map` outside it starts and stops them itself."""
        ...


class InProcess:
    """Tasks one after another in this process."""

    def map(self, task: Callable[[T], R], inputs: Sequence[T]) -> list[R]:
        return [task(x) for x in inputs]

    @contextmanager
    def started(self) -> Iterator[None]:
        yield


class ProcessPool:
    """Tasks on a pool of `processes` local processes (spawned: no state leaks between)."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None

    def map(self, task: Callable[[T], R], inputs: Sequence[T]) -> list[R]:
        if self._pool is None:
            with self.started():
                return self.map(task, inputs)
        return list(self._pool.map(task, inputs))

    @contextmanager
    def started(self) -> Iterator[None]:
        if self._pool is not None:
            yield
            return
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.processes, mp_context=context) as pool:
            self._pool = pool
            try:
                yield
            finally:
                self._pool = None


class RayCluster:
    """Tasks on the Ray cluster at `address` (None or "local": a local instance).

    Every node of the cluster needs Arbiter installed and the shared data where
    `ARBITER_SHARED_DIR` (or the checkout's `../shared`) says. An instance this
    starts is shut down when :meth:`started` (or a lone `map`) ends; a cluster
    given by address is left running, and so is a Ray already initialised here.
    """

    def __init__(self, address: str | None, num_cpus: int | None = None) -> None:
        self.address = address
        self.num_cpus = num_cpus

    def map(self, task: Callable[[T], R], inputs: Sequence[T]) -> list[R]:
        import ray  # noqa: PLC0415 - an optional extra

        with self.started():
            remote = ray.remote(task)
            results: list[R] = ray.get([remote.remote(x) for x in inputs])
            return results

    @contextmanager
    def started(self) -> Iterator[None]:
        import ray  # noqa: PLC0415 - an optional extra

        if ray.is_initialized():
            yield
            return
        local = self.address in {None, "local"}
        ray.init(
            address=None if local else self.address,
            num_cpus=self.num_cpus if local else None,
            include_dashboard=False,
            log_to_driver=False,
        )
        try:
            yield
        finally:
            ray.shutdown()


GridRunner = Callable[[Sequence[Point]], list[dict[str, Any]]]
"""A grid's points in, their rows out, in order: a :class:`Runner` mapping :func:`run_point`."""


def run_sequential(points: Sequence[Point]) -> list[dict[str, Any]]:
    return InProcess().map(run_point, points)


def process_runner(processes: int) -> GridRunner:
    """Points on a pool of `processes` local processes (:class:`ProcessPool`)."""
    return functools.partial(ProcessPool(processes).map, run_point)


def ray_runner(address: str | None, num_cpus: int | None = None) -> GridRunner:
    """Points as Ray tasks on the cluster at `address` (:class:`RayCluster`)."""
    return functools.partial(RayCluster(address, num_cpus).map, run_point)


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
    by_seed: dict[int, dict[str, float | None]] = field(default_factory=dict)
    """Each seed's value of each metric: two settings run on the same seeds see the same
    jobs and machines, so their per-seed differences can be compared (paired)."""


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
                by_seed={
                    int(m["seed"]): {k: None if m.get(k) is None else float(m[k]) for k in keys}
                    for m in members
                },
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
