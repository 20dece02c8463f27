"""First-fit placement: nodes in snapshot order, as many workers on each as fit.

The simplest bin-packing heuristic and a common placement baseline. Nodes are
taken in the order the snapshot lists them, so the caller's order (racks,
preference) is respected as is and the result is easy to predict.

All or none: if the nodes cannot hold every worker, nothing is placed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.model import Job
from policies.protocols import Context, NoParams, PlacementOutcome


class FirstFit:
    name: ClassVar[str] = "first_fit"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Fill nodes in snapshot order until every worker is placed."
    source: ClassVar[str] = "Classic first-fit bin packing (simulator baselines)."
    Params: ClassVar[type[NoParams]] = NoParams
    settles: ClassVar[bool] = True

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        return fill_in_order(free, job, workers, free.node_ids())


def fill_in_order(
    free: FreeCapacity, job: Job, workers: int, node_ids: Iterable[str]
) -> PlacementOutcome:
    """Take as many workers as fit on each node in turn; all `workers` or none.

    Stops at the first node that completes the job, and skips nodes without a
    worker's worth of free GPUs before asking the dearer CPU and memory questions,
    so a placement on a large, busy cluster does not cost a full scan per job.
    """
    picks: list[tuple[str, int]] = []
    left = workers
    for node_id in node_ids:
        if free.free_count(node_id) < job.gpus_per_worker:
            continue
        take = min(free.workers_fitting(node_id, job), left)
        if take:
            picks.append((node_id, take))
            left -= take
            if left == 0:
                return PlacementOutcome(assignments=assignments_for(free, job, picks))
    return PlacementOutcome(reason=not_enough_room(job, workers, workers - left))
