"""Fewest-jobs reclaiming: return the loaned servers that host the fewest training jobs.

A classic baseline for Aryl's reclaiming (Li et al. 2022): rank the loaned
servers once by how many running jobs have workers on them, fewest first (then
fewest busy GPUs, then snapshot order), and return the first ones. It neither
tells an elastic job's extra workers, which only shrink it, from workers whose
loss preempts a job, nor notices that a job preempted for one server frees its
others; both are what Aryl adds.
"""

from __future__ import annotations

from typing import ClassVar

from policies.decision import Stage
from policies.protocols import Context, NoParams
from policies.reclaim.impact import ReclaimLedger, reclaim_named, shortfall
from policies.reclaim_models import ReclaimRequest, ReclaimResult


class FewestJobs:
    name: ClassVar[str] = "fewest_jobs"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.RECLAIM
    summary: ClassVar[str] = "Return the loaned servers hosting the fewest jobs, ranked once."
    source: ClassVar[str] = "Classic baseline for Aryl's reclaiming (Li et al., 2022)."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        if request.node_ids is not None:
            return reclaim_named(ctx.snapshot, request.node_ids)
        count = request.count or 0
        ledger = ReclaimLedger(ctx.snapshot)
        ranked = sorted(
            ledger.loaned,
            key=lambda n: (ledger.hosted_jobs(n), ledger.busy_gpus(n), ledger.position(n)),
        )
        reasons: dict[str, str] = {}
        for node_id in ranked[:count]:
            hosted, busy = ledger.hosted_jobs(node_id), ledger.busy_gpus(node_id)
            impact = ledger.give_back(node_id)
            reasons[node_id] = (
                f"hosts {hosted} job{'' if hosted == 1 else 's'} on {busy} busy GPUs, among "
                f"the fewest of the {len(ranked)} loaned servers; {impact.describe()}"
            )
        return ledger.result(reasons, shortfall(count, len(ledger.loaned)))
