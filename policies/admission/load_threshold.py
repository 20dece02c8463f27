"""Load-threshold admission: admit while committed GPU demand stays below a multiple of capacity.

The load-based admission control of Blox (Agarwal et al., EuroSys 2024;
`admission_control/load_based_accept.py` in msr-fiddle/blox): new jobs are
admitted in submission order while the GPUs that running and admitted-but-
waiting jobs need, divided by the schedulable training GPUs, stays under
`threshold`; above it they wait outside (DEFER) rather than lengthen the queue.
A threshold above 1 lets a queue form (1.5 by default: half a cluster's worth
of work may wait), below 1 keeps headroom. The check is made before each job
is counted, as in Blox, so a job larger than the headroom still gets in while
the load is under the threshold and is never deferred for ever by its size.

Jobs are measured at their minimum worker count (their request, for rigid
jobs). A job is rejected only if it is larger than the training side of the
cluster at full health (training-pool and loaned nodes, healthy or not): an
unhealthy node is expected back, so its absence alone makes a job wait, not fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.admission.quota import minimum_gpus
from policies.common.wording import counted
from policies.decision import AdmissionResult, Stage, Verdict
from policies.model import Job, JobState, Pool
from policies.protocols import Context


class LoadThresholdParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    threshold: float = Field(
        default=1.5,
        gt=0,
        description=(
            "Admit while committed GPUs / schedulable training GPUs is below this "
            "(committed: running jobs' GPUs plus admitted waiting jobs' minimum)."
        ),
    )


class LoadThreshold:
    name: ClassVar[str] = "load_threshold"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ADMISSION
    summary: ClassVar[str] = "Defer new jobs while committed GPU demand exceeds a load threshold."
    source: ClassVar[str] = "Blox (Agarwal et al., EuroSys 2024), load-based admission control."
    Params: ClassVar[type[LoadThresholdParams]] = LoadThresholdParams

    def __init__(self, params: LoadThresholdParams) -> None:
        self.params = params

    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        snapshot = ctx.snapshot
        capacity = ctx.capacity_gpus
        full_size = sum(n.gpus for n in snapshot.nodes if n.pool is Pool.TRAINING or n.loaned)
        committed = 0
        for job in snapshot.jobs:
            if job.state is JobState.RUNNING:
                committed += job.placed_gpus
            elif job.state is JobState.SUSPENDED or job.admitted:
                committed += minimum_gpus(job)
        threshold = self.params.threshold
        out = []
        for job in jobs:
            need = minimum_gpus(job)
            if need > full_size:
                verdict = Verdict.REJECT
                reason = (
                    f"needs {counted(need, 'GPU')} at its minimum; the training side of the "
                    f"cluster has {full_size}"
                )
            elif capacity == 0:
                verdict = Verdict.DEFER
                reason = "no training GPU is schedulable now"
            elif committed >= threshold * capacity:
                verdict = Verdict.DEFER
                reason = (
                    f"load is {committed} committed / {capacity} schedulable GPUs = "
                    f"{committed / capacity:.2f}, at or above the threshold {threshold:g}"
                )
            else:
                verdict = Verdict.ADMIT
                reason = (
                    f"load is {committed} committed / {capacity} schedulable GPUs = "
                    f"{committed / capacity:.2f}, under the threshold {threshold:g}; "
                    f"this job adds {need}"
                )
                committed += need
            out.append(AdmissionResult(job_id=job.id, verdict=verdict, reason=reason))
        return out
