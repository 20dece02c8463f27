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

        # Jobs with an estimate first, by remaining time; then those without one. Two
        # sorts of tuples that open with a float (then submission time, snapshot
        # position and the job's index, so ties fall as a stable sort would leave
        # them): Python compares such keys much faster than ones opening with a flag.
        known: list[tuple[float, float, int, int]] = []
        unknown: list[tuple[float, int, int]] = []
        for i, job in enumerate(jobs):
            estimate = job.estimated_duration_s
            if estimate is None:
                unknown.append((job.submit_time, position.get(job.id, 0), i))
                continue
            # `Job.remaining_time_s()` at the requested count, inlined (the same
            # arithmetic, so the same floats): this runs for every job of every round.
            total = job.total_work
            if total is None:
                left = max(0.0, estimate - job.executed_time_s)
            else:
                left = estimate * (1.0 - min(1.0, job.work_done / total))
            known.append((left, job.submit_time, position.get(job.id, 0), i))
        known.sort()
        unknown.sort()
        ranked = [key[-1] for key in known]
        ranked += [key[-1] for key in unknown]
        return Ordering(
            job_ids=tuple([jobs[i].id for i in ranked]),
            preemptive=True,
            backfill=self.params.backfill,
        )
