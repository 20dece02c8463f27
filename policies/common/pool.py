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


def held_count(job: Job) -> int:
    """Workers a running job keeps: what it holds if the job accepts that count.

    Otherwise the largest accepted count below it (a shrink), or its minimum.
    """
    held = job.placed_workers
    if job.accepts_workers(held):
        return held
    below = [c for c in job.allowed_worker_counts() if c <= held]
    return below[-1] if below else job.allowed_worker_counts()[0]


def keep_running(
    jobs: Sequence[Job], snapshot: Snapshot, pool: ResourcePool, label: str
) -> tuple[dict[str, int], dict[str, str]]:
    """Running jobs first: each keeps what it holds (taken from `pool`).

    A job holding GPUs on a node training can no longer use gets 0 workers and a reason
    (the engine preempts it). Returns workers and those reasons, by job id.
    """
    workers: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for job in jobs:
        if job.state is not JobState.RUNNING:
            continue
        if holds_unusable_gpus(job, snapshot):
            workers[job.id] = 0
            reasons[job.id] = f"{label}: it holds GPUs on a node training can no longer use"
        else:
            workers[job.id] = held_count(job)
            pool.take(job, workers[job.id])
    return workers, reasons


def next_count(counts: list[int], workers: int) -> int | None:
    """The next count above `workers` in `counts` (a job's ascending accepted counts), if any."""
    at = bisect_right(counts, workers)
    return counts[at] if at < len(counts) else None
