"""Shortest job first by estimated duration, non-preemptive.

The SJF baseline of GPU-cluster scheduling papers (e.g. Tiresias, Gu et al.,
NSDI 2019, §6, which compares against SJF as the clairvoyant reference for
jobs with known durations). Jobs are ranked by `estimated_duration_s`; a job
without an estimate goes after every job with one, since SJF has nothing to
rank it by. Ties go to the earlier submission, then the id, so the order is
total and the same on every replica.

Running jobs come first and are never preempted: SJF is non-preemptive (its
preemptive form is SRTF). Strict by default, as in the classic baseline: a job
that does not fit blocks those behind it; `backfill` lets later jobs start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.model import Job, JobState
from policies.protocols import Context, Ordering


class SjfParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backfill: bool = Field(
        default=False, description="Let later jobs start when the head of the queue does not fit."
    )


class ShortestJobFirst:
    name: ClassVar[str] = "sjf"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "Shortest estimated duration first; running jobs first, no preemption."
    source: ClassVar[str] = "Classic baseline; see Tiresias (Gu et al., NSDI 2019) §6."
    Params: ClassVar[type[SjfParams]] = SjfParams
    settles: ClassVar[bool] = True

    def __init__(self, params: SjfParams) -> None:
        self.params = params

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        position = ctx.snapshot.job_positions

        running = JobState.RUNNING
        # Keys built once in a list and sorted by index: no key function call per job.
        keys = [
            (
                job.state is not running,
                job.estimated_duration_s is None,
                job.estimated_duration_s if job.estimated_duration_s is not None else 0.0,
                job.submit_time,
                position.get(job.id, 0),
            )
            for job in jobs
        ]
        ranked = sorted(range(len(keys)), key=keys.__getitem__)
        return Ordering(job_ids=tuple([jobs[i].id for i in ranked]), backfill=self.params.backfill)
