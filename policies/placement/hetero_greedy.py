"""Heterogeneity-aware greedy placement: the fastest free GPUs per dollar, by the speed table.

The baseline the dual agent is compared with (Xing et al., KDD 2023, compare with
heterogeneity-aware heuristics; this one is ours): it knows each job's true speed
per GPU type (`Job.gpu_type_speed`, which the simulator fills from the measured
table of `shared/perf/gavel_throughput.csv`) and each machine's price, ranks the
machines that can take a worker by speed per dollar, and fills them in that order.
It knows nothing of machine-to-machine variation: that is what RWGP learns.

The plan (shared with :mod:`policies.placement.rwgp`): one GPU type when one has
room (a job spanning types runs at the slowest and pays for the dearest); within
it, the best-ranked machine that holds the whole job, unless filling machines in
rank order reaches a better
worst machine after the spread penalty (a synchronous job runs at its slowest
worker, and a job spread over machines pays for it in communication; Gavel's
measurements in `shared/perf/locality_slowdown.csv`). Among equally ranked
machines, the tightest fit first, leaving large holes for large jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.model import Job
from policies.protocols import Context, PlacementOutcome

MIN_PRICE = 0.01
"""Dollars per GPU-hour a free (unpriced) machine is taken to cost, so ratios stay finite."""


class HeteroGreedyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spread_penalty: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description=(
            "Speed kept by a job spread over several machines (ours: between Gavel's "
            "median spread-over-packed ratios of the measured families)."
        ),
    )


def ranked_plan(
    job: Job,
    workers: int,
    free: FreeCapacity,
    score: Mapping[str, float],
    spread_penalty: float,
    *,
    candidates: list[tuple[str, int]] | None = None,
) -> list[tuple[str, int]] | str:
    """(node, workers) picks by `score` (higher is better), or why the job does not fit.

    A job takes one GPU type when one has room: a synchronous job spanning types runs
    at its slowest type while paying for the dearer one's GPUs, which no per-machine
    score sees (Gavel gives a job one type for the same reason). Among the types with
    room, the plan with the best worst machine wins. Only when no type has room on its
    own are types mixed, by rank. `candidates` is `free.candidate_nodes(job)`, where
    the caller has it already.
    """
    if candidates is None:
        candidates = free.candidate_nodes(job)
    room = sum(fit for _, fit in candidates)
    if room < workers:
        return not_enough_room(job, workers, room)
    by_type: dict[str, list[tuple[str, int]]] = {}
    for node_id, fit in candidates:
        by_type.setdefault(free.node(node_id).gpu_type, []).append((node_id, fit))
    best: tuple[float, list[tuple[str, int]]] | None = None
    for same_type in by_type.values():
        if sum(fit for _, fit in same_type) < workers:
            continue
        plan = _plan(same_type, workers, free, score, spread_penalty)
        value = min(score[n] for n, _ in plan) + (math.log(spread_penalty) if len(plan) > 1 else 0)
        if best is None or value > best[0]:
            best = (value, plan)
    if best is not None:
        return best[1]
    return _plan(candidates, workers, free, score, spread_penalty)


def _plan(
    candidates: Sequence[tuple[str, int]],
    workers: int,
    free: FreeCapacity,
    score: Mapping[str, float],
    spread_penalty: float,
) -> list[tuple[str, int]]:
    """The best machine that holds the job, or the machines in rank order if better."""
    # By score, then tightest fit, then the candidates' order (the index breaks every tie,
    # so the candidate itself is never compared).
    keyed = [(-score[c[0]], free.free_count(c[0]), i, c) for i, c in enumerate(candidates)]
    first = min(keyed)[3]
    if first[1] >= workers:
        return [(first[0], workers)]  # the best-ranked machine holds it: the plan, unsorted
    ranked = [c for *_, c in sorted(keyed)]
    single = next((node_id for node_id, fit in ranked if fit >= workers), None)
    picks: list[tuple[str, int]] = []
    left = workers
    for node_id, fit in ranked:
        take = min(fit, left)
        picks.append((node_id, take))
        left -= take
        if left == 0:
            break
    if len(picks) == 1 or single is None:
        return picks
    spread_value = min(score[n] for n, _ in picks) + math.log(spread_penalty)
    return [(single, workers)] if score[single] >= spread_value else picks


class HeteroGreedy:
    name: ClassVar[str] = "hetero_greedy"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Fastest free GPUs per dollar by the true speed table."
    source: ClassVar[str] = (
        "Heterogeneity-aware greedy baseline (ours), as compared in Xing et al., KDD 2023."
    )
    Params: ClassVar[type[HeteroGreedyParams]] = HeteroGreedyParams
    settles: ClassVar[bool] = True

    def __init__(self, params: HeteroGreedyParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        candidates = free.candidate_nodes(job)
        speeds = job.gpu_type_speed
        # log speed − log price: the speed term once per GPU type (a cluster has few).
        by_type: dict[str, float] = {}
        score: dict[str, float] = {}
        for node_id, _ in candidates:
            node = free.node(node_id)
            gpu_type = node.gpu_type
            speed = by_type.get(gpu_type)
            if speed is None:
                speed = by_type[gpu_type] = math.log(max(speeds.get(gpu_type, 1.0), 1e-6))
            score[node_id] = speed - math.log(max(node.price_per_gpu_hour, MIN_PRICE))
        plan = ranked_plan(
            job, workers, free, score, self.params.spread_penalty, candidates=candidates
        )
        if isinstance(plan, str):
            return PlacementOutcome(reason=plan)
        return PlacementOutcome(assignments=assignments_for(free, job, plan))
