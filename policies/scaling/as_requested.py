"""As-requested scaling: every job runs with the worker count it asked for.

What non-elastic schedulers do (FIFO, SJF, Tiresias baselines): the user's
request is the allocation; parameter servers likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context, NoParams


class AsRequested:
    name: ClassVar[str] = "as_requested"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = "Run each job with the workers it requested."
    source: ClassVar[str] = "Classic baseline (rigid jobs)."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        out = []
        running = JobState.RUNNING
        for job in jobs:
            # A running job keeps what it holds: rescaling it is not this policy's call.
            workers = job.placed_workers if job.state is running else job.workers
            if workers != job.workers and not job.accepts_workers(workers):
                workers = job.workers
            out.append(
                ScalingResult(job_id=job.id, workers=workers, ps=job.ps, reason="as requested")
            )
        return out
