"""Dominant Resource Fairness across tenants (Ghodsi et al., NSDI 2011, §4).

DRF equalises each user's *dominant share*, the largest fraction of any one
resource the user holds, by progressive filling: repeatedly serve the user with
the lowest dominant share. Here the users are tenants (weighted by
`tenants[].weight`, as in the paper's weighted DRF), the resources are
the GPUs, CPUs and memory of the training-schedulable nodes, and a "task" is
one step of a job: starting a waiting job at its minimum worker count, or
growing a started elastic job to its next accepted count.

Choices the paper leaves open, and why:
- Running jobs keep what they hold before filling starts: scaling does not
  preempt (that is the ordering's call), and their resources are spent anyway.
  `keep_running: false` starts them at their minimum instead, so that filling
  reallocates every job every round, as the schedulers DL2's paper compares do
  (ours; an experiment's setting, docs/dl2.md). `minimum_when_full: true` gives
  a waiting job that no longer fits its minimum anyway, counted in no share and
  taken from no pool, so that a preemptive ordering can start it (ours, likewise).
- A tenant's waiting jobs start (in service order) before its running jobs
  grow, since a job at zero workers gains more than one that already runs.
- Within a tenant, the job with the lowest dominant share of its own grows
  first, so a tenant's share is spread over its jobs rather than its first.
- A step that no longer fits never will (the pool only shrinks), so the job
  drops out; filling ends when no tenant has a step that fits.

Tenants and jobs sit in heaps keyed by share, so a call costs
O((jobs + steps) · log jobs) and stays fast for thousands of jobs.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from policies.common.pool import (
    FloorParams,
    OverFullReasons,
    ResourcePool,
    demand,
    held_count,
    next_count,
    unusable_holders,
    worker_counts,
)
from policies.common.wording import counted
from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context


@dataclass
class _Tenant:
    name: str
    weight: float
    rank: int  # service position of its first job: breaks ties between equal shares
    used: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    waiting: deque[Job] = field(default_factory=deque)
    growable: list[tuple[float, int, str]] = field(default_factory=list)  # (own share, rank, id)


class DominantResourceFairness:
    name: ClassVar[str] = "drf"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "Weighted dominant resource fairness across tenants by progressive filling."
    )
    source: ClassVar[str] = "Ghodsi et al., Dominant Resource Fairness, NSDI 2011, §4."
    Params: ClassVar[type[FloorParams]] = FloorParams

    def __init__(self, params: FloorParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        snapshot = ctx.snapshot
        pool = ResourcePool.for_training(snapshot)
        rank = {job.id: i for i, job in enumerate(jobs)}
        counts = worker_counts(jobs)
        workers: dict[str, int] = {}
        refused: dict[str, str] = {}
        tenants: dict[str, _Tenant] = {}

        def tenant_of(job: Job) -> _Tenant:
            tenant = tenants.get(job.tenant)
            if tenant is None:
                spec = snapshot.tenants_by_id.get(job.tenant)
                weight = spec.weight if spec is not None else 1.0
                tenant = tenants[job.tenant] = _Tenant(job.tenant, weight, rank[job.id])
            return tenant

        left = pool.left

        def grant(job: Job, count: int, tenant: _Tenant) -> None:
            extra = count - workers.get(job.id, 0)
            # What `pool.take` does, and the demand of `extra` workers added to the
            # tenant's use resource by resource (as `demand` adds): this runs for every
            # running job of every decision.
            gpus = extra * job.gpus_per_worker
            cpus = extra * job.cpus_per_worker
            memory = extra * job.memory_gb_per_worker
            left[0] -= gpus
            left[1] -= cpus
            left[2] -= memory
            used = tenant.used
            used[0] += gpus
            used[1] += cpus
            used[2] += memory
            workers[job.id] = count
            if count < counts[job.id][-1]:  # it has a next count: it may grow
                own, _ = pool.share(list(demand(job, count)))
                heapq.heappush(tenant.growable, (own, rank[job.id], job.id))

        # Running jobs first: they keep their GPUs whatever the shares say (or, not kept,
        # start from their minimum like the rest).
        running = JobState.RUNNING
        keep = self.params.keep_running
        unusable = unusable_holders(jobs, snapshot)
        for job in jobs:
            tenant = tenant_of(job)
            if job.state is not running:
                tenant.waiting.append(job)
            elif job.id in unusable:
                workers[job.id] = 0
                refused[job.id] = "DRF: it holds GPUs on a node training can no longer use"
            else:
                grant(job, held_count(job) if keep else counts[job.id][0], tenant)

        by_id = {job.id: job for job in jobs}
        over_full = self.params.minimum_when_full
        over_full_reasons = OverFullReasons("DRF")
        needs: dict[tuple[int, int, float, float], str] = {}

        def serve(tenant: _Tenant) -> bool:
            """One step for `tenant`: start a waiting job, else grow one; False if none fits."""
            # Until this step grants something, the pool and the tenant's share stay as
            # they are: jobs of one shape refused meanwhile share their reason, and the
            # part about the pool and the share is worded once.
            refusals: dict[tuple[int, int, float, float], str] = {}
            served_at = ""
            while tenant.waiting:
                job = tenant.waiting.popleft()
                minimum = counts[job.id][0]
                if pool.fits(job, minimum):
                    grant(job, minimum, tenant)
                    return True
                if over_full:
                    workers[job.id] = minimum
                    refused[job.id] = over_full_reasons.of(job, minimum, pool)
                    continue
                workers[job.id] = 0
                shape = (
                    minimum,
                    job.gpus_per_worker,
                    job.cpus_per_worker,
                    job.memory_gb_per_worker,
                )
                reason = refusals.get(shape)
                if reason is None:
                    if not served_at:
                        served_at = (
                            f"{_left(pool)} left) when tenant {tenant.name!r} was served at "
                            f"weighted dominant share {_weighted(pool, tenant):.3f}"
                        )
                    need = needs.get(shape)
                    if need is None:
                        need = needs[shape] = _needs(job, minimum)
                    reason = refusals[shape] = (
                        f"DRF: no capacity left at its minimum of {counted(minimum, 'worker')} "
                        f"({need}; {served_at}"
                    )
                refused[job.id] = reason
            while tenant.growable:
                _, _, job_id = heapq.heappop(tenant.growable)
                job = by_id[job_id]
                step = next_count(counts[job_id], workers[job_id])
                if step is not None and pool.fits(job, step - workers[job_id]):
                    grant(job, step, tenant)
                    return True
            return False

        queue = [(_weighted(pool, t), t.rank, t.name) for t in tenants.values()]
        heapq.heapify(queue)
        while queue:
            _, _, name = heapq.heappop(queue)
            tenant = tenants[name]
            if serve(tenant):
                heapq.heappush(queue, (_weighted(pool, tenant), tenant.rank, name))

        # Every job of a tenant ends at its tenant's share: worded once per tenant.
        endings: dict[str, str] = {}
        for tenant in tenants.values():
            share, resource = pool.share(tenant.used)
            endings[tenant.name] = (
                f"tenant {tenant.name!r} ends at dominant share "
                f"{share:.3f} of {resource} (weight {tenant.weight:g}, weighted "
                f"{share / tenant.weight:.3f})"
            )
        # ... and jobs of one tenant at one count share their whole reason.
        granted: dict[tuple[str, int], str] = {}
        out = []
        for job in jobs:
            count = workers.get(job.id, 0)
            reason = refused.get(job.id)
            if reason is None:
                reason = granted.get((job.tenant, count))
                if reason is None:
                    reason = f"DRF: {counted(count, 'worker')}; {endings[job.tenant]}"
                    granted[(job.tenant, count)] = reason
            out.append(ScalingResult(job_id=job.id, workers=count, ps=job.ps, reason=reason))
        return out


def _weighted(pool: ResourcePool, tenant: _Tenant) -> float:
    return pool.share(tenant.used)[0] / tenant.weight


def _needs(job: Job, workers: int) -> str:
    gpus, cpus, memory = demand(job, workers)
    return f"{counted(float(gpus), 'GPU')}, {counted(float(cpus), 'CPU')}, {memory:g} GB"


def _left(pool: ResourcePool) -> str:
    gpus, cpus, memory = (max(0.0, x) for x in pool.left)
    return f"{counted(float(gpus), 'GPU')}, {counted(float(cpus), 'CPU')}, {memory:g} GB"
