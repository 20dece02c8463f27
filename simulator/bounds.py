"""Floors on a job's completion time that no scheduling policy can go below.

The sweep's no-queueing bound (:mod:`simulator.sweep`) is the recorded duration: a
rigid job run as recorded cannot finish sooner. An elastic job can, given more
workers, a faster GPU type or a faster machine than it was recorded on. Its floor
here is its work over the fastest rate any allocation could give it alone on the
cluster (:meth:`simulator.perf.ClusterPerf.fastest_rate`): every factor of the
performance model at its best at once, no wait, no restart. A policy's mean JCT
over the mean floor says how much any policy, even one that knew the future, could
still gain on the same jobs and cluster (docs/dl2.md uses it for DL2's room).
"""

from __future__ import annotations

from collections.abc import Sequence

from simulator.perf import ClusterPerf, JobShape
from simulator.workload import JobSpec


def floor_s(model: ClusterPerf, spec: JobSpec) -> float:
    """The least time `spec` can take from submission to completion on `model`'s
    cluster (inf when not even its fewest workers fit in all of its GPUs)."""
    shape = JobShape(
        family=spec.family, gpus_per_worker=spec.gpus_per_worker, workers=spec.workers, ps=spec.ps
    )
    lo = min(spec.min_workers, spec.workers)
    rate = model.fastest_rate(shape, lo, max(spec.max_workers, spec.workers))
    return spec.duration_s / rate if rate > 0 else float("inf")


def floors_s(model: ClusterPerf, specs: Sequence[JobSpec]) -> list[float]:
    """:func:`floor_s` of each job, in order."""
    return [floor_s(model, spec) for spec in specs]
