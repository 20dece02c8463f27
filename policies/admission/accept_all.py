"""Accept-all admission: every job is admitted on arrival.

The implicit admission policy of most cluster schedulers (e.g. the Tiresias and
Gavel simulators), where queueing rather than rejection absorbs overload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies.decision import AdmissionResult, Stage, Verdict
from policies.model import Job
from policies.protocols import Context, NoParams


class AcceptAll:
    name: ClassVar[str] = "accept_all"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ADMISSION
    summary: ClassVar[str] = "Admit every job."
    source: ClassVar[str] = "Common baseline (no admission control)."
    Params: ClassVar[type[NoParams]] = NoParams
    settles: ClassVar[bool] = True

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        return [
            AdmissionResult(
                job_id=j.id, verdict=Verdict.ADMIT, reason="accept-all admits every job"
            )
            for j in jobs
        ]
