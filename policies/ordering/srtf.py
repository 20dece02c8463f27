"""Shortest remaining time first, preemptive.

The preemptive form of SJF, a baseline of Tiresias (Gu et al., NSDI 2019, §6).
Jobs are ranked by
:meth:`Job.remaining_time_s` at their requested worker count; a job without an
estimate goes last. Ties go to the earlier submission, then the id.

Preemptive: a running job ranked below jobs that fill the cluster yields its
GPUs. Backfill is on by default because that is how SRTF is usually simulated:
the Tiresias authors' simulator (SymbioticLab/Tiresias, `simulator/run_sim.py`,
schedule `shortest`) re-ranks every round, walks the list and starts every job
that fits, skipping those that do not, rather than idling GPUs behind a job
that cannot start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.model import Job
from policies.protocols import Context, Ordering


class SrtfParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    backfill: bool = Field(
        default=True,
        description="Let later jobs start when a more urgent one does not fit (as simulators do).",
    )


class ShortestRemainingTimeFirst:
    name: ClassVar[str] = "srtf"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "Shortest estimated remaining time first; preemptive."
    source: ClassVar[str] = "Classic baseline; see Tiresias (Gu et al., NSDI 2019) §6."
    Params: ClassVar[type[SrtfParams]] = SrtfParams

    def __init__(self, params: SrtfParams) -> None:
        self.params = params

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        position = ctx.snapshot.job_positions

        remaining = [job.remaining_time_s() for job in jobs]
        # Keys built once in a list and sorted by index: no key function call per job.
        keys = [
            (
                left is None,
                left if left is not None else 0.0,
                job.submit_time,
                position.get(job.id, 0),
            )
            for left, job in zip(remaining, jobs, strict=True)
        ]
        ranked = sorted(range(len(keys)), key=keys.__getitem__)
        return Ordering(
            job_ids=tuple([jobs[i].id for i in ranked]),
            preemptive=True,
            backfill=self.params.backfill,
        )
