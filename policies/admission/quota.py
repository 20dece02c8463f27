"""Per-tenant GPU quota admission.

The admission control of shared clusters with per-team allocations (e.g. the
virtual clusters of Microsoft's Philly, Jeon et al., ATC 2019, §2; YARN's
capacity scheduler): a tenant may have at most `tenants[].gpu_quota` GPUs
committed at once. A job that would push its tenant past the quota waits
(DEFER, asked again next round); one that exceeds the whole quota even at its
minimum can never run and is rejected.

"Committed" counts the GPUs the tenant's running jobs hold (`ctx.gpus_by_tenant`),
the minimum of its jobs admitted in earlier rounds that wait (pending or
suspended: they will claim GPUs as soon as they start), and those admitted
earlier in this call. Counting the waiting ones is what keeps a tenant from
queueing unbounded admitted work round after round. A job is measured at its
minimum worker count, the least it runs with (its request, for rigid jobs), so
an elastic job is not refused for what it could do without.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies.common.wording import counted
from policies.decision import AdmissionResult, Stage, Verdict
from policies.model import Job, JobState
from policies.protocols import Context, NoParams


def minimum_gpus(job: Job) -> int:
    """GPUs of a job at the smallest worker count it accepts."""
    return job.allowed_worker_counts()[0] * job.gpus_per_worker


class TenantQuota:
    name: ClassVar[str] = "quota"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ADMISSION
    summary: ClassVar[str] = "Admit while a tenant's committed GPUs stay within its quota."
    source: ClassVar[str] = (
        "Per-tenant quotas of shared clusters (Philly virtual clusters, Jeon et al., ATC 2019, §2)."
    )
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        running = dict(ctx.gpus_by_tenant)
        waiting: dict[str, int] = {}
        for job in ctx.snapshot.jobs:
            if job.state is JobState.SUSPENDED or (job.state is JobState.PENDING and job.admitted):
                waiting[job.tenant] = waiting.get(job.tenant, 0) + minimum_gpus(job)
        admitted_now: dict[str, int] = {}
        out = []
        for job in jobs:
            spec = ctx.snapshot.tenants_by_id.get(job.tenant)
            need = minimum_gpus(job)
            if spec is None or spec.gpu_quota is None:
                out.append(
                    AdmissionResult(
                        job_id=job.id,
                        verdict=Verdict.ADMIT,
                        reason=f"tenant {job.tenant!r} has no GPU quota",
                    )
                )
                continue
            quota = spec.gpu_quota
            held = running.get(job.tenant, 0)
            queued = waiting.get(job.tenant, 0) + admitted_now.get(job.tenant, 0)
            committed = held + queued
            if need > quota:
                verdict = Verdict.REJECT
                reason = (
                    f"needs {counted(need, 'GPU')} at its minimum, more than tenant "
                    f"{job.tenant!r}'s whole quota of {quota}"
                )
            elif committed + need > quota:
                verdict = Verdict.DEFER
                reason = (
                    f"tenant {job.tenant!r} has {committed} of its {quota}-GPU quota committed "
                    f"({held} running, {queued} admitted and waiting); this job needs {need}"
                )
            else:
                verdict = Verdict.ADMIT
                admitted_now[job.tenant] = admitted_now.get(job.tenant, 0) + need
                reason = (
                    f"tenant {job.tenant!r} stays within quota: {committed} + {need} "
                    f"of {counted(quota, 'GPU')}"
                )
            out.append(AdmissionResult(job_id=job.id, verdict=verdict, reason=reason))
        return out
