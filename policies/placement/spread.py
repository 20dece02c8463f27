"""Spread placement: one worker per node first, across as many nodes as possible.

The classic load-balancing baseline that topology-aware placement is compared
with: deal a job's workers out round-robin over the nodes that can take one,
nodes with the most free GPUs first, so that per-node load stays even. It is
the opposite of consolidation and pays for it in communication (see
`consolidated`, and Tiresias, Gu et al., NSDI 2019, §4.2); that contrast is
what it is for.

All or none: if the nodes cannot hold every worker, nothing is placed.
"""

from __future__ import annotations

from typing import ClassVar

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.model import Job
from policies.protocols import Context, NoParams, PlacementOutcome


class Spread:
    name: ClassVar[str] = "spread"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Round-robin one worker per node, emptiest nodes first."
    source: ClassVar[str] = "Classic load-balancing baseline (the opposite of consolidation)."
    Params: ClassVar[type[NoParams]] = NoParams
    settles: ClassVar[bool] = True

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        candidates = _emptiest_candidates(free, job, workers)
        room = sum(fit for _, fit in candidates)
        if room < workers:
            return PlacementOutcome(reason=not_enough_room(job, workers, room))
        given = [0] * len(candidates)
        active = list(range(len(candidates)))
        left = workers
        # Each pass gives one worker to every node that still has room, so the
        # cost is O(workers + nodes) rather than a pass per worker.
        while left > 0:
            still: list[int] = []
            for i in active:
                if left == 0:
                    break
                given[i] += 1
                left -= 1
                if given[i] < candidates[i][1]:
                    still.append(i)
            active = still
        picks = [(node_id, n) for (node_id, _), n in zip(candidates, given, strict=True) if n]
        return PlacementOutcome(assignments=assignments_for(free, job, picks))


def _emptiest_candidates(free: FreeCapacity, job: Job, workers: int) -> list[tuple[str, int]]:
    """(node, workers that fit), most free GPUs first.

    Nodes with equal free GPUs come in the order free capacity keeps them (snapshot
    order until jobs come and go; deterministic either way): sorting each bucket
    would cost more than the rest of the placement on a large cluster. Round-robin
    only ever reaches the first `workers` nodes that take a worker, so the walk
    stops there instead of scoring every node.
    """
    out: list[tuple[str, int]] = []
    for count in range(free.max_gpus_per_node, job.gpus_per_worker - 1, -1):
        for node_id in free.nodes_with_free(count):
            fit = free.workers_fitting(node_id, job)
            if fit > 0:
                out.append((node_id, fit))
                if len(out) == workers:
                    return out
    return out
