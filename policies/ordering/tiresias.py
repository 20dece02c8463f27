"""Tiresias discretized two-dimensional least-attained-service (Gu et al., NSDI 2019, §3-4).

Tiresias ranks jobs by the GPU service they have had so far (GPUs × time, the
"two dimensions"), needing no duration estimate. To avoid the churn of
continuous LAS it discretizes priority into K queues: a job starts in the top
queue and is demoted to the next once its attained service passes that
queue's threshold; the lower a queue, the later its jobs are served. Within a
queue jobs go first come, first served (by submission time). It is preemptive,
and it starts every job that fits (backfill), as the authors' simulator does.

Defaults: two queues split at 3,250 GPU-seconds, the two-queue setting of the
authors' simulator (SymbioticLab/Tiresias, `simulator/jobs.py`, `queue_limit`);
pass more thresholds for more queues.

Starvation guard: Tiresias promotes a waiting job back to the top queue once
it has waited longer than STARVELIMIT times its execution time. The service is
stateless, so waiting is reckoned from the snapshot as
`now - submit_time - executed_time_s` (time in the system not spent running)
against `starvation_factor × executed_time_s`. The paper then resets the
promoted job's counter; without memory between rounds, the job here stays
promoted while the inequality holds, so a starving job is owed about
1 / (1 + factor) of wall-clock time. Jobs that never ran are in the top queue
anyway; a factor of 0 turns the guard off.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.decision import Stage
from policies.model import Job
from policies.protocols import Context, Ordering


class TiresiasParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    queue_thresholds_gpu_s: tuple[float, ...] = Field(
        default=(3250.0,),
        description=(
            "Attained GPU-seconds at which a job drops to the next queue, ascending; "
            "K thresholds make K + 1 queues."
        ),
    )
    starvation_factor: float = Field(
        default=10.0,
        ge=0,
        description=(
            "Promote a job to the top queue once its waiting time exceeds this many times "
            "its executed time (the paper's STARVELIMIT); 0 disables the guard."
        ),
    )
    backfill: bool = Field(
        default=True, description="Let later jobs start when a more urgent one does not fit."
    )

    @field_validator("queue_thresholds_gpu_s")
    @classmethod
    def _ascending(cls, thresholds: tuple[float, ...]) -> tuple[float, ...]:
        if any(t <= 0 for t in thresholds):
            raise ValueError("thresholds must be positive")
        if any(b <= a for a, b in pairwise(thresholds)):
            raise ValueError("thresholds must be strictly ascending")
        return thresholds


class Tiresias:
    name: ClassVar[str] = "tiresias"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = (
        "Discretized 2D-LAS: queues by attained GPU service, FIFO within, preemptive."
    )
    source: ClassVar[str] = "Gu et al., Tiresias, NSDI 2019, §3-4."
    Params: ClassVar[type[TiresiasParams]] = TiresiasParams

    def __init__(self, params: TiresiasParams) -> None:
        self.params = params

    def queue(self, ctx: Context, job: Job) -> int:
        """The job's queue, 0 (served first) to K."""
        if self.starving(ctx, job):
            return 0
        return bisect_right(self.params.queue_thresholds_gpu_s, job.attained_service_gpu_s)

    def starving(self, ctx: Context, job: Job) -> bool:
        factor = self.params.starvation_factor
        executed = job.executed_time_s
        if factor <= 0 or executed <= 0:
            return False
        waited = ctx.now - job.submit_time - executed
        return waited >= factor * executed

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        ranked = sorted(jobs, key=lambda j: (self.queue(ctx, j), j.submit_time, j.id))
        return Ordering(
            job_ids=tuple(j.id for j in ranked), preemptive=True, backfill=self.params.backfill
        )
