"""First-in, first-out ordering by submission time.

The baseline of every GPU-cluster scheduling paper (e.g. Tiresias, NSDI'19;
Gavel, OSDI'20). Strict by default: a job that does not fit blocks those
behind it, as in the classic baseline; `backfill` lets later jobs start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.model import Job, JobState
from policies.protocols import Context, Ordering


class FifoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backfill: bool = Field(
        default=False, description="Let later jobs start when the head of the queue does not fit."
    )


class Fifo:
    name: ClassVar[str] = "fifo"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "Serve jobs in submission order; running jobs first."
    source: ClassVar[str] = "Classic baseline; see Tiresias (Gu et al., NSDI 2019) §6."
    Params: ClassVar[type[FifoParams]] = FifoParams
    settles: ClassVar[bool] = True

    def __init__(self, params: FifoParams) -> None:
        self.params = params

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        # Running jobs keep their place ahead of the queue: FIFO never preempts.
        # Same-second submissions keep their snapshot order (a trace's row order).
        position = ctx.snapshot.job_positions
        running = JobState.RUNNING
        # Keys built once in a list and sorted by index: no key function call per job.
        keys = [(j.state is not running, j.submit_time, position.get(j.id, 0)) for j in jobs]
        ranked = sorted(range(len(keys)), key=keys.__getitem__)
        return Ordering(job_ids=tuple([jobs[i].id for i in ranked]), backfill=self.params.backfill)
