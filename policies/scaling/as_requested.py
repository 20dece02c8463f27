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
    settles: ClassVar[bool] = True

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        out = []
        running = JobState.RUNNING
        for job in jobs:
            workers = job.workers
            # A running job keeps what it holds: rescaling it is not this policy's call.
            # A rigid job (no bounds, or bounds equal to its request) accepts its request
            # alone, whatever it holds, so only an elastic one needs its held workers
            # counted. A valid job has min_workers <= workers <= max_workers, so it is
            # elastic when either bound leaves the request.
            lo, hi = job.min_workers, job.max_workers
            if job.state is running and (
                (lo is not None and lo < workers) or (hi is not None and hi > workers)
            ):
                held = job.placed_workers
                if held == workers or job.accepts_workers(held):
                    workers = held
            out.append(
                ScalingResult(job_id=job.id, workers=workers, ps=job.ps, reason="as requested")
            )
        return out
