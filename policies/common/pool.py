"""The cluster as one pool of GPUs, CPUs and memory, for scaling policies.

Scaling policies that decide worker counts (DRF, Optimus, Aryl's knapsack, and
DL2 through its featurizer, :mod:`policies.learned.dl2.features`) reason about
the training side of the cluster as a single pool, as their papers do: node
boundaries and fragmentation are placement's concern, and the engine reports a
job that cannot be placed. This module holds the bookkeeping they share, so each
policy's file is only its objective.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from policies.common.wording import counted
from policies.model import Job, JobState, Snapshot

RESOURCES: tuple[str, ...] = ("GPUs", "CPUs", "memory")

# Tolerance for float CPU and memory sums, so exact fits are not refused.
_SLACK = 1e-9


def demand(job: Job, workers: int) -> tuple[float, float, float]:
    """GPUs, CPUs and memory (GB) that `workers` workers of `job` occupy."""
    return (
        float(workers * job.gpus_per_worker),
        workers * job.cpus_per_worker,
        workers * job.memory_gb_per_worker,
    )


class FloorParams(BaseModel):
    """Where a scaling policy that hands out a pool starts running jobs each round."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_running: bool = Field(
        default=True,
        description=(
            "Running jobs start each round from what they hold, so the policy only grows "
            "them; False: from their minimum, reallocating every job every round as DL2's "
            "paper does for every scheduler it compares (each resize restarts the job)."
        ),
    )
    minimum_when_full: bool = Field(
        default=False,
        description=(
            "A waiting job the pool has no room for still gets its minimum (taking "
            "nothing from the pool), so that a preemptive ordering (SRTF) can stop running "
            "jobs to start it; False: it gets no workers and waits, and no ordering "
            "preempts for it."
        ),
    )


DEFAULT_FLOOR = FloorParams()
"""The floor of a policy given no parameters: running jobs keep theirs, a full pool waits."""


@dataclass
class ResourcePool:
    """Totals and what is left of the training-schedulable nodes' resources."""

    total: tuple[float, float, float]
    left: list[float]

    @classmethod
    def for_training(cls, snapshot: Snapshot) -> ResourcePool:
        nodes = [n for n in snapshot.nodes if n.schedulable_for_training]
        total = (
            float(sum(n.gpus for n in nodes)),
            float(sum(n.cpus for n in nodes)),
            float(sum(n.memory_gb for n in nodes)),
        )
        return cls(total=total, left=list(total))

    def fits(self, job: Job, workers: int) -> bool:
        # Spelled out rather than zipped with `demand`: scaling policies ask this for
        # every job of every decision.
        left = self.left
        return (
            workers * job.gpus_per_worker <= left[0] + _SLACK
            and workers * job.cpus_per_worker <= left[1] + _SLACK
            and workers * job.memory_gb_per_worker <= left[2] + _SLACK
        )

    def has_a_gpu_left(self) -> bool:
        """Whether one more GPU fits: no worker of any job fits without (each has one or more)."""
        return self.left[0] + _SLACK >= 1

    def take(self, job: Job, workers: int) -> None:
        """Count `workers` more workers of `job`; may go below zero for jobs already running."""
        left = self.left
        left[0] -= workers * job.gpus_per_worker
        left[1] -= workers * job.cpus_per_worker
        left[2] -= workers * job.memory_gb_per_worker

    def share(self, used: tuple[float, float, float] | list[float]) -> tuple[float, str]:
        """Dominant share of `used` and the resource it is on (resources with no total skipped)."""
        best, which = 0.0, RESOURCES[0]
        for amount, total, name in zip(used, self.total, RESOURCES, strict=True):
            if total > 0 and amount / total > best:
                best, which = amount / total, name
        return best, which


def holds_unusable_gpus(job: Job, snapshot: Snapshot) -> bool:
    """A running job with GPUs on a node training can no longer use (the engine preempts it)."""
    if job.state is not JobState.RUNNING:
        return False
    nodes = snapshot.nodes_by_id
    for a in job.placement:  # a loop, not any(): scaling policies ask for every running job
        node = nodes.get(a.node_id)
        if node is None or not node.schedulable_for_training:
            return True
    return False


def unusable_holders(jobs: Sequence[Job], snapshot: Snapshot) -> set[str]:
    """Ids of the running jobs among `jobs` that :func:`holds_unusable_gpus`.

    The nodes training may use are listed once, not looked up job by job: scaling
    policies ask this of every running job of every decision.
    """
    usable = {n.id for n in snapshot.nodes if n.schedulable_for_training}
    out: set[str] = set()
    if len(usable) == len(snapshot.nodes):
        # A valid snapshot places jobs only on its own nodes: none can hold an unusable one.
        return out
    running = JobState.RUNNING
    for job in jobs:
        if job.state is running:
            for a in job.placement:
                if a.node_id not in usable:
                    out.add(job.id)
                    break
    return out


def held_count(job: Job) -> int:
    """Workers a running job keeps: what it holds if the job accepts that count.

    Otherwise the largest accepted count below it (a shrink), or its minimum.
    """
    if job.min_workers is None and job.max_workers is None:
        # A rigid job accepts its request alone: it keeps that, whatever it holds (the
        # other branches come to the same answer; this one skips their work, as scaling
        # policies ask for every running job).
        return job.workers
    held = job.placed_workers
    if job.accepts_workers(held):
        return held
    below = [c for c in job.allowed_worker_counts() if c <= held]
    return below[-1] if below else job.allowed_worker_counts()[0]


def keep_running(
    jobs: Sequence[Job],
    snapshot: Snapshot,
    pool: ResourcePool,
    label: str,
    *,
    at_minimum: bool = False,
) -> tuple[dict[str, int], dict[str, str]]:
    """Running jobs first: each keeps what it holds (taken from `pool`), or with
    `at_minimum` its smallest accepted count (:class:`FloorParams`).

    A job holding GPUs on a node training can no longer use gets 0 workers and a reason
    (the engine preempts it). Returns workers and those reasons, by job id.
    """
    workers: dict[str, int] = {}
    reasons: dict[str, str] = {}
    unusable = unusable_holders(jobs, snapshot)
    running = JobState.RUNNING
    left = pool.left
    for job in jobs:
        if job.state is not running:
            continue
        job_id = job.id
        if job_id in unusable:
            workers[job_id] = 0
            reasons[job_id] = f"{label}: it holds GPUs on a node training can no longer use"
            continue
        # `held_count` and `pool.take`, inlined for the rigid jobs most snapshots are made
        # of (the same sums in the same order): this runs for every running job.
        if job.min_workers is None and job.max_workers is None:
            count = job.workers
        elif at_minimum:
            count = job.allowed_worker_counts()[0]
        else:
            count = held_count(job)
        workers[job_id] = count
        left[0] -= count * job.gpus_per_worker
        left[1] -= count * job.cpus_per_worker
        left[2] -= count * job.memory_gb_per_worker
    return workers, reasons


class OverFullReasons:
    """The reasons of waiting jobs given their minimum beyond what the pool has left
    (:attr:`FloorParams.minimum_when_full`): each resource a job lacks, GPUs, CPUs or
    memory, with what the pool has left of it. Worded once per need and pool left: the
    waiting jobs of a full cluster share a few."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._said: dict[tuple[float, ...], str] = {}

    def of(self, job: Job, minimum: int, pool: ResourcePool, servers: int = 0) -> str:
        """The reason of `job` at `minimum` workers and `servers` parameter servers."""
        gpus, cpus, memory = demand(job, minimum)
        need = (gpus, cpus + servers * job.ps_cpus, memory + servers * job.ps_memory_gb)
        left = pool.left
        key = (minimum, servers, *need, *left)
        said = self._said.get(key)
        if said is None:
            short = [i for i in range(3) if need[i] > left[i] + _SLACK] or [0]
            lacks = ", ".join(
                f"{_amount(need[i], i)} with {_amount(max(0.0, left[i]), i)} left" for i in short
            )
            with_servers = f" and {counted(servers, 'parameter server')}" if servers else ""
            said = self._said[key] = (
                f"{self.label}: its minimum of {counted(minimum, 'worker')}{with_servers} "
                f"needs {lacks} in the pool: it starts only if the ordering stops running "
                "jobs for it"
            )
        return said


def _amount(value: float, resource: int) -> str:
    """`2 GPUs`, `16 CPUs`, `64 GB of memory`: an amount of resource 0, 1 or 2 of a pool."""
    if resource == 2:
        return f"{value:g} GB of memory"
    return counted(float(value), ("GPU", "CPU")[resource])


def worker_counts(jobs: Sequence[Job]) -> dict[str, Sequence[int]]:
    """Each job's :meth:`Job.allowed_worker_counts`, by id; the lists must not be changed.

    Computed once per distinct shape (bounds, request, rule and step), not once per
    job: most jobs of a snapshot share a handful of shapes, and scaling policies need
    the counts of every job of every decision.
    """
    by_shape: dict[tuple[object, ...], Sequence[int]] = {}
    out: dict[str, Sequence[int]] = {}
    for job in jobs:
        shape = (job.workers, job.min_workers, job.max_workers, job.scaling_rule, job.worker_step)
        counts = by_shape.get(shape)
        if counts is None:
            counts = by_shape[shape] = job.allowed_worker_counts()
        out[job.id] = counts
    return out


def next_count(counts: Sequence[int], workers: int) -> int | None:
    """The next count above `workers` in `counts` (a job's ascending accepted counts), if any."""
    at = bisect_right(counts, workers)
    return counts[at] if at < len(counts) else None
