"""OASiS scaling: each job runs the workers and parameter servers its committed schedule says.

In OASiS (Bao, Peng, Wu, Li, INFOCOM 2018, §IV) admission fixes a job's whole
schedule: how many workers and parameter servers it runs in every slot until it
completes. Scaling only reads that schedule for the current slot. The schedules
are the "oasis" policy state written by OASiS admission; a job admitted this
very round takes its schedule from the verdict's details (`ctx.admission`).

Where the schedule and the snapshot part ways, the snapshot wins:
- A running job whose schedule runs no workers now (it ended, or the job runs
  behind its plan) keeps what it holds: scaling never preempts a running job.
- A waiting job whose schedule starts later gets 0 workers (with the start in
  the reason); the engine then leaves it pending without blocking others.
- A job with no schedule (admitted by another policy, or state lost) runs as
  requested (a running one keeps what it holds), as the classic baseline would.
Schedules only hold counts a job accepts; if the job's bounds changed since,
its request is used instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from policies.common.oasis import STATE_KEY, Plan, load_state, plan_from_details
from policies.common.wording import counted
from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context, NoParams

# The reasons of a job without a committed schedule, worded once.
_UNPLANNED_RUNNING = (
    "OASiS: no committed schedule (admitted outside OASiS); keeps the workers it holds"
)
_UNPLANNED_WAITING = "OASiS: no committed schedule (admitted outside OASiS); runs as requested"


class OasisScaling:
    name: ClassVar[str] = "oasis"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "Run each job with the workers and parameter servers its OASiS schedule commits "
        "for the current slot."
    )
    source: ClassVar[str] = (
        "Bao, Peng, Wu, Li, OASiS, 'Online Job Scheduling in Distributed Machine Learning "
        "Clusters', INFOCOM 2018, §IV."
    )
    Params: ClassVar[type[NoParams]] = NoParams
    # Reads the schedules OASiS admission writes; the admission policy commits them.
    state_key: ClassVar[str] = STATE_KEY

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        state = load_state(ctx.state.get(STATE_KEY))
        plans: dict[str, Plan] = dict(state.jobs)
        slot_s = state.slot_s
        for job_id, verdict in ctx.admission.items():
            plan = plan_from_details(verdict.details) if verdict.admitted else None
            if plan is not None:
                plans.setdefault(job_id, plan)
                detail_slot = verdict.details.get("slot_s")
                if slot_s is None and isinstance(detail_slot, int | float):
                    slot_s = float(detail_slot)
        current = math.floor(ctx.now / slot_s) if slot_s else None
        return [self._one(job, plans.get(job.id), current, slot_s, ctx.now) for job in jobs]

    def _one(
        self, job: Job, plan: Plan | None, current: int | None, slot_s: float | None, now: float
    ) -> ScalingResult:
        running = job.state is JobState.RUNNING
        # What it holds counts only for a running job (the waiting ones, most of a busy
        # round's jobs, hold nothing): not worked out for the others.
        fallback = job.workers
        if running:
            held = job.placed_workers
            if job.accepts_workers(held):
                fallback = held
        keep = "keeps the workers it holds" if running else "runs as requested"
        if plan is None or current is None or slot_s is None:
            return ScalingResult(
                job_id=job.id,
                workers=fallback,
                ps=job.ps,
                reason=_UNPLANNED_RUNNING if running else _UNPLANNED_WAITING,
            )
        segment = plan.segment_at(current)
        if segment is not None and segment.workers > 0:
            if not job.accepts_workers(segment.workers):
                return ScalingResult(
                    job_id=job.id,
                    workers=fallback,
                    ps=job.ps,
                    reason=(
                        f"OASiS: its schedule's {counted(segment.workers, 'worker')} are "
                        f"outside the job's bounds now; {keep}"
                    ),
                )
            left = segment.until * slot_s - now
            return ScalingResult(
                job_id=job.id,
                workers=segment.workers,
                ps=segment.ps,
                reason=(
                    f"OASiS schedule: {counted(segment.workers, 'worker')}"
                    + (f" and {counted(segment.ps, 'parameter server')}" if segment.ps else "")
                    + f" in slot {current} (this layout for the next {left:g} s)"
                ),
            )
        start = plan.next_start(current)
        if running:
            # Behind its plan (or between plan runs): scaling never preempts.
            return ScalingResult(
                job_id=job.id,
                workers=fallback,
                ps=segment.ps if segment is not None and segment.ps else job.ps,
                reason="OASiS: its schedule runs no workers in this slot; it keeps what it holds",
            )
        if start is not None:
            return ScalingResult(
                job_id=job.id,
                workers=0,
                ps=0,
                reason=(
                    f"OASiS schedule starts it in slot {start}, in {start * slot_s - now:g} s, "
                    "when its resources cost less"
                ),
            )
        return ScalingResult(
            job_id=job.id,
            workers=job.workers,
            ps=job.ps,
            reason="OASiS: its committed schedule ran out before it started; as requested",
        )
