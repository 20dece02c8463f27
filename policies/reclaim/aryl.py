"""Aryl's server reclaiming: least server preemption cost, greedily (Li et al. 2022).

Aryl ("Aryl: An Elastic Cluster Scheduler for Deep Learning", Li, Xu, Zhu, Liu,
Guo, Wang, 2022; published as Lyra, EuroSys 2023) lends idle inference servers
to training and takes them back when inference traffic returns. Choosing which
loaned servers to return so that the fewest training jobs are preempted is a
set-cover-like problem; the paper's heuristic gives each server a *preemption
cost* and returns the cheapest one, again and again, recomputing the costs
after each pick, until enough servers are back (the paper's section on capacity
loaning, "server preemption cost").

A server's preemption cost here is the number of jobs that returning it would
newly preempt (:mod:`policies.reclaim.impact`):
- a job already preempted for an earlier pick costs nothing more, so its other
  servers become cheap once it is gone, which is why costs are recomputed;
- a job that can run on at its remaining servers with a count it accepts only
  shrinks, at no cost, so a server hosting only elastic jobs' extra workers is
  free (Aryl places those extra workers on loaned servers for this reason, see
  `placement/loan_aware`);
- the cost of a job on several servers can rise as the picks eat into its
  slack: the first server it loses may only shrink it, the second preempt it.

Ties, in order: fewer GPUs held by the jobs preempted (less work to restart),
fewer GPUs taken from shrinking jobs, then snapshot order. With
`protect_non_preemptible`, a job marked non-preemptible counts before any
number of others: inference still takes its servers back when it must (the
request is never refused), but only as the last resort.

Each step looks at every remaining loaned server, so a reclaim of k servers
out of L loaned costs O(k · L · jobs per server).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.protocols import Context
from policies.reclaim.impact import ReclaimLedger, ServerImpact, reclaim_named, shortfall
from policies.reclaim_models import ReclaimRequest, ReclaimResult


class ArylReclaimParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    protect_non_preemptible: bool = Field(
        default=True,
        description=(
            "Rank servers first by the non-preemptible jobs they would preempt, so such "
            "jobs are preempted only when no other choice returns enough servers."
        ),
    )


class ArylReclaim:
    name: ClassVar[str] = "aryl"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.RECLAIM
    summary: ClassVar[str] = (
        "Return the loaned server of least preemption cost, recomputed after every pick."
    )
    source: ClassVar[str] = (
        "Li et al., Aryl: An Elastic Cluster Scheduler for Deep Learning, 2022 (Lyra, "
        "EuroSys 2023), capacity loaning: server reclaiming."
    )
    Params: ClassVar[type[ArylReclaimParams]] = ArylReclaimParams

    def __init__(self, params: ArylReclaimParams) -> None:
        self.params = params

    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        if request.node_ids is not None:
            return reclaim_named(ctx.snapshot, request.node_ids)
        count = request.count or 0
        ledger = ReclaimLedger(ctx.snapshot)
        candidates = list(ledger.loaned)
        reasons: dict[str, str] = {}
        for pick in range(1, min(count, len(candidates)) + 1):
            impacts = [ledger.impact(node_id) for node_id in candidates]
            best = min(impacts, key=lambda i: self._rank(i, ledger))
            ledger.give_back(best.node_id)
            candidates.remove(best.node_id)
            reasons[best.node_id] = (
                f"Aryl pick {pick}: least preemption cost of the {len(impacts)} loaned "
                f"servers left; {best.describe()}"
            )
        return ledger.result(reasons, shortfall(count, len(ledger.loaned)))

    def _rank(
        self, impact: ServerImpact, ledger: ReclaimLedger
    ) -> tuple[int, float, int, int, int]:
        protected = impact.non_preemptible if self.params.protect_non_preemptible else 0
        return (
            protected,
            impact.cost,
            impact.preempted_gpus,
            impact.shrunk_gpus,
            ledger.position(impact.node_id),
        )
