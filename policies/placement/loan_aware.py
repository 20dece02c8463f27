"""Loan-aware placement: base workers in the training pool, extra workers on loaned servers.

Aryl (Li et al. 2022; Lyra, EuroSys 2023) lends idle inference servers to
training and must give them back, at short notice, when inference traffic
returns. Where a job's workers sit decides what that costs: a job that loses a
worker it cannot run without is preempted, while one that loses only workers
above its minimum merely shrinks. So this placement puts a job's *base*
workers (up to its smallest accepted count) consolidated in the training pool,
and its *extra* workers (what elastic scaling added above that) on loaned
servers first; a reclaim then finds servers it can take back by shrinking jobs
rather than killing them (`reclaim/aryl`).

- Base workers: consolidated best fit (`placement/consolidated`) over the
  training pool; only if it lacks room, over every node, loaned ones included
  (a job whose base must sit on a loaned server risks preemption wherever on
  it, so it may as well stay consolidated).
- Extra workers: consolidated over the loaned servers if they have room,
  otherwise filling the loaned servers and putting the rest on other nodes.
  A running job that grows is given only extra workers, unless it holds fewer
  than its base.
- `use_loaned = false` never places anything on loaned servers: the `static`
  baseline of a cluster whose inference servers are never lent.

All or none: if the nodes it may use cannot hold every worker, nothing is placed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.model import Job, JobState
from policies.placement.consolidated import best_single_node, fewest_nodes
from policies.protocols import Context, PlacementOutcome

Picks = dict[str, int]  # node id → workers placed there


class LoanAwareParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    use_loaned: bool = Field(
        default=True,
        description=(
            "Place training work on loaned inference servers at all; false keeps it in the "
            "training pool (the `static` baseline: inference servers never lent)."
        ),
    )


class LoanAware:
    name: ClassVar[str] = "loan_aware"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = (
        "Base workers consolidated in the training pool, extra workers on loaned servers first."
    )
    source: ClassVar[str] = (
        "Li et al., Aryl: An Elastic Cluster Scheduler for Deep Learning, 2022 (Lyra, "
        "EuroSys 2023), capacity loaning."
    )
    Params: ClassVar[type[LoanAwareParams]] = LoanAwareParams
    settles: ClassVar[bool] = True

    def __init__(self, params: LoanAwareParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        def in_training_pool(node_id: str) -> bool:
            return not free.node(node_id).loaned

        def on_loan(node_id: str) -> bool:
            return free.node(node_id).loaned

        base = min(workers, _base_missing(job))
        extra = workers - base
        picks: Picks = {}
        if base:
            found, room = _pick(job, base, free, in_training_pool, picks)
            if found is None and self.params.use_loaned:
                found, room = _pick(job, base, free, None, picks)
            if found is None:
                return self._refusal(job, workers, room)
            picks = found
        if extra:
            if self.params.use_loaned:
                found, _ = _pick(job, extra, free, on_loan, picks)
                if found is None:
                    found, room = _spill(job, extra, free, picks)
            else:
                found, room = _pick(job, extra, free, in_training_pool, picks)
            if found is None:
                return self._refusal(job, workers, base + room)
            picks = found
        return PlacementOutcome(assignments=assignments_for(free, job, list(picks.items())))

    def _refusal(self, job: Job, workers: int, room: int) -> PlacementOutcome:
        reason = not_enough_room(job, workers, room)
        if not self.params.use_loaned:
            reason += " outside loaned servers, which this profile does not use"
        return PlacementOutcome(reason=reason)


def _base_missing(job: Job) -> int:
    """Workers the job still needs to reach its smallest accepted count (its base)."""
    held = job.placed_workers if job.state is JobState.RUNNING else 0
    return max(0, job.allowed_worker_counts()[0] - held)


def _room_left(
    job: Job, free: FreeCapacity, allowed: Callable[[str], bool] | None, picks: Picks
) -> list[tuple[str, int]]:
    """(node, workers that still fit) among `allowed`, after the workers already in `picks`.

    Every limit is per worker (GPUs, CPUs, memory), so a node that fits f workers
    fits f - k once k of them are picked.
    """
    out = []
    for node_id, fit in free.candidate_nodes(job):
        if allowed is not None and not allowed(node_id):
            continue
        left = fit - picks.get(node_id, 0)
        if left > 0:
            out.append((node_id, left))
    return out


def _pick(
    job: Job,
    workers: int,
    free: FreeCapacity,
    allowed: Callable[[str], bool] | None,
    picks: Picks,
) -> tuple[Picks | None, int]:
    """`picks` plus `workers` more, consolidated among `allowed`, and the room there.

    The picks are None when the room (in workers) is too small; the room is then exact,
    for the refusal's reason.
    """
    if not picks:
        # The bucket walk finds a single node without scoring every node.
        single = best_single_node(job, workers, free, allowed)
        if single is not None:
            return {single: workers}, workers
    candidates = _room_left(job, free, allowed, picks)
    room = sum(fit for _, fit in candidates)
    if room < workers:
        return None, room
    return _merged(picks, fewest_nodes(candidates, workers, free)), room


def _spill(job: Job, workers: int, free: FreeCapacity, picks: Picks) -> tuple[Picks | None, int]:
    """Fill the loaned servers, then place what is left anywhere else, and the room for it."""
    on_loaned = _room_left(job, free, lambda n: free.node(n).loaned, picks)
    loaned_room = sum(fit for _, fit in on_loaned)
    merged = _merged(picks, on_loaned)
    rest = _room_left(job, free, lambda n: not free.node(n).loaned, merged)
    room = loaned_room + sum(fit for _, fit in rest)
    if room < workers:
        return None, room
    return _merged(merged, fewest_nodes(rest, workers - loaned_room, free)), room


def _merged(picks: Picks, more: list[tuple[str, int]]) -> Picks:
    out = dict(picks)
    for node_id, workers in more:
        out[node_id] = out.get(node_id, 0) + workers
    return out
