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
            workers = job.workers
            # A running job keeps what it holds: rescaling it is not this policy's call.
            # A rigid job (no bounds given) accepts its request alone, so only a job with
            # bounds needs its held workers counted.
            if job.state is running and (
                job.min_workers is not None or job.max_workers is not None
            ):
                held = job.placed_workers
                if held == workers or job.accepts_workers(held):
                    workers = held
            out.append(
                ScalingResult(job_id=job.id, workers=workers, ps=job.ps, reason="as requested")
            )
        return out
