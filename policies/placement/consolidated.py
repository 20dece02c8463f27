"""Consolidated, topology-aware best-fit placement.

Packs a job onto as few nodes as possible, then within one rack, and on a
single node picks the one with the fewest free GPUs that still fits (best fit),
leaving large holes for large jobs. Consolidation matters because spreading a
job's workers slows its gradient exchange (Gavel's measurements in
`shared/perf/locality_slowdown.csv`; Tiresias, NSDI 2019, §4.2 on skewed
models; Gandiva, OSDI 2018, on locality).

With `gather_spread_jobs`, a running job spread over several nodes that one node
could hold is moved onto the best-fit node once one has room: Gandiva's migration
for locality, here for the jobs a preemptive order resumed over several nodes
because no single node was free when they resumed (docs/results.md, section
`tiresias`, shows what it changes).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from operator import itemgetter
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.model import Assignment, Job
from policies.protocols import Context, PlacementOutcome

LISTED_CANDIDATES = 100
"""A job with CPU or memory needs is placed from the list of candidate nodes
(:func:`picks_from_list`) when at most this many nodes have the GPUs of one of its workers
free, and from the fits of every node as arrays (:func:`picks_from_fits`) when more do.
The picks are the same; the list's cost grows with the candidates, the arrays' with every
node but from a fixed cost per call of some tens of microseconds, and the two cross at
about a hundred candidates (`python -m evidence.bench_placement_paths`)."""


class ConsolidatedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    split_jobs_that_fit_one_node: bool = Field(
        default=True,
        description=(
            "When no single node has room for a job that would fit on one, spread it over "
            "several (true), or let it wait for one node (false: as the Tiresias and Gavel "
            "simulators place, and the way to compare with them under the ideal model, "
            "where spreading costs nothing)."
        ),
    )
    gather_spread_jobs: bool = Field(
        default=False,
        description=(
            "Move a running job spread over several nodes onto one node once a node has "
            "room for all of it, after every other job of the round has been placed (a "
            "migration: the job restarts from its checkpoint there). For preemptive "
            "orders, which resume jobs wherever there is room at the time."
        ),
    )


class Consolidated:
    name: ClassVar[str] = "consolidated"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Fewest nodes, then same rack; best fit on one node."
    source: ClassVar[str] = (
        "Tiresias (Gu et al., NSDI 2019) §4.2; Gandiva (Xiao et al., OSDI 2018)."
    )
    Params: ClassVar[type[ConsolidatedParams]] = ConsolidatedParams
    settles: ClassVar[bool] = True
    # A job that fits one node by its GPUs alone goes on the best fit by GPU count
    # (`place`, first branch): the engine may commit it without asking.
    fits_fullest: ClassVar[bool] = True

    def __init__(self, params: ConsolidatedParams) -> None:
        self.params = params

    @property
    def gathers(self) -> bool:
        return self.params.gather_spread_jobs

    def gather(self, ctx: Context, job: Job, free: FreeCapacity) -> PlacementOutcome:
        """The best-fit node that holds all of `job` (its own GPUs counted free), if any."""
        if not self.params.gather_spread_jobs:
            return PlacementOutcome()
        gpw = job.gpus_per_worker
        need = job.placed_gpus
        node = best_single_node(job, need // gpw, free)
        if node is None:
            return PlacementOutcome()
        return PlacementOutcome(
            assignments=(Assignment(node_id=node, gpu_indices=free.lowest_free_gpus(node, need)),)
        )

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        need = workers * job.gpus_per_worker
        # Most jobs fit one node and any node with room takes them: `best_single_node` is
        # then the best fit by GPU count, asked of the capacity directly (the rule that
        # `fits_fullest` declares).
        fit = free.fullest_fit(job, need)
        if fit is not None:
            return PlacementOutcome(assignments=fit)
        by_gpus_alone = free.fits_by_gpus_alone(job)
        single = None if by_gpus_alone else best_single_node(job, workers, free)
        if single is not None:
            gpus = free.lowest_free_gpus(single, need)
            return PlacementOutcome(assignments=(Assignment(node_id=single, gpu_indices=gpus),))
        if not self.params.split_jobs_that_fit_one_node and need <= free.max_gpus_per_node:
            return PlacementOutcome(
                reason=f"waits for one node with {need} free GPUs (it is never split across nodes)"
            )
        if by_gpus_alone:
            room = free.room(job)
            if room < workers:
                return PlacementOutcome(reason=not_enough_room(job, workers, room))
            picks = fewest_nodes_by_counts(job.gpus_per_worker, workers, free)
            return PlacementOutcome(assignments=assignments_for(free, job, picks))
        # Few nodes with room (a small or a busy cluster): their list costs less than the
        # vector operations' start-up.
        listed = free.count_with_free(job.gpus_per_worker) <= LISTED_CANDIDATES
        room, picks = (picks_from_list if listed else picks_from_fits)(job, workers, free)
        if room < workers:
            return PlacementOutcome(reason=not_enough_room(job, workers, room))
        return PlacementOutcome(assignments=assignments_for(free, job, picks))


Spread = tuple[int, list[tuple[str, int]]]
"""The workers of a job that fit in all, and (node, workers) picks for the asked count
(none when it does not fit): :func:`picks_from_list` and :func:`picks_from_fits` give the
same."""


def picks_from_list(job: Job, workers: int, free: FreeCapacity) -> Spread:
    """:data:`Spread` from the list of candidate nodes (:func:`fewest_nodes`)."""
    candidates = free.candidate_nodes(job)
    room = sum(map(_fit, candidates))
    return room, fewest_nodes(candidates, workers, free) if room >= workers else []


def picks_from_fits(job: Job, workers: int, free: FreeCapacity) -> Spread:
    """:data:`Spread` from the fits of every node as arrays (:func:`fewest_nodes_by_fits`)."""
    fits = free.fits(job)
    room = int(fits[fits > 0].sum())
    return room, fewest_nodes_by_fits(job, workers, free, fits) if room >= workers else []


def best_single_node(
    job: Job, workers: int, free: FreeCapacity, allowed: Callable[[str], bool] | None = None
) -> str | None:
    """The node with the fewest free GPUs that still takes all `workers` (among `allowed`)."""
    need = workers * job.gpus_per_worker
    if allowed is None and free.fits_by_gpus_alone(job):
        # Without CPU or memory needs, any node of a bucket fits: the first one is the answer.
        return free.first_fullest(need)
    buckets = free.nodes_by_free()
    for count in range(need, len(buckets)):
        for node_id in buckets[count]:
            if (allowed is None or allowed(node_id)) and free.workers_fitting(
                node_id, job
            ) >= workers:
                return node_id
    return None


def fewest_nodes(
    candidates: list[tuple[str, int]], workers: int, free: FreeCapacity
) -> list[tuple[str, int]]:
    """(node, workers) picks over as few of `candidates` as possible, within one rack if that
    costs no extra node; `candidates` are (node, workers that fit) and hold `workers` in all.
    """
    # The greedy's node count alone, from the fits: its picks are worked out only for
    # the winner (a rack's few nodes, or all candidates when no rack matches).
    fewest = _greedy_count(candidates, workers)
    # Grouped with a plain look-up per candidate: this runs over hundreds of nodes for
    # every job that needs more than one.
    rack_of = free.racks_by_node
    racks: dict[str, list[tuple[str, int]]] = {}
    for candidate in candidates:
        rack = rack_of[candidate[0]]
        members = racks.get(rack)
        if members is None:
            racks[rack] = [candidate]
        else:
            members.append(candidate)
    for rack in sorted(racks):
        members = racks[rack]
        if not rack or sum(map(_fit, members)) < workers:
            continue
        if _greedy_count(members, workers) <= fewest:
            # The first rack (by name) that costs no extra node: no rack needs fewer
            # nodes than the whole cluster (see fewest_nodes_by_counts).
            return _greedy(members, workers)
    return _greedy(candidates, workers)


def fewest_nodes_by_fits(
    job: Job, workers: int, free: FreeCapacity, fits: npt.NDArray[np.int64]
) -> list[tuple[str, int]]:
    """:func:`fewest_nodes` over every node that takes a worker of `job`, from `fits`
    (:meth:`FreeCapacity.fits`) instead of a list of candidates.

    The same picks: the node counts, global and per rack, depend only on the fits, so
    they come from sorted arrays, and the candidates (in their order: most free GPUs
    first, then insertion order) are listed only for the rack that wins, from its own
    buckets, which keep its nodes in the same relative order. On a cluster of thousands
    of nodes this replaces a list, a grouping and a sort of every candidate per job.
    """
    usable = fits > 0
    fewest = _needed(fits[usable], workers)
    # The first rack (by name) that holds the job on no more nodes than the whole
    # cluster needs: as in fewest_nodes, no rack can need fewer. A rack needs at most
    # `fewest` nodes exactly when its `fewest` largest fits hold the job (the greedy
    # takes the largest first), so every rack is judged at once: its row of fits,
    # padded with zeros, sorted, and the last `fewest` summed.
    positions, named = free.rack_positions()
    in_racks = np.append(fits, 0)[positions]
    np.maximum(in_racks, 0, out=in_racks)
    in_racks.sort(axis=1)
    largest = in_racks[:, max(in_racks.shape[1] - fewest, 0) :].sum(axis=1)
    holding = np.flatnonzero((largest >= workers) & named)
    chosen = free.racks()[int(holding[0])] if holding.size else None
    if chosen is None:
        return _greedy(free.candidate_nodes(job), workers)
    position = free.position
    members = [
        (node_id, fit)
        for bucket in reversed(free.nodes_by_free(chosen)[job.gpus_per_worker :])
        for node_id in bucket
        if (fit := int(fits[position(node_id)])) > 0
    ]
    return _greedy(members, workers)


def _needed(fits: npt.NDArray[np.int64], workers: int) -> int:
    """How many nodes :func:`_greedy` picks from nodes with these (positive) fits: the
    fewest largest that hold `workers`, all of them if they never do (as _greedy_count)."""
    held = np.cumsum(np.sort(fits)[::-1])
    return min(int(np.searchsorted(held, workers)) + 1, len(held))


def fewest_nodes_by_counts(
    gpus_per_worker: int, workers: int, free: FreeCapacity
) -> list[tuple[str, int]]:
    """:func:`fewest_nodes` for a job whose fit on a node is its free GPUs alone.

    The same picks, worked out from the free-GPU buckets (globally and per rack)
    instead of a list of every candidate node: a node with `c` free GPUs takes
    `c // gpus_per_worker` workers, and the buckets hold nodes in the candidates'
    order (most free GPUs first, then insertion order), so the greedy's node count
    and picks follow from bucket sizes and the first nodes of a few buckets.
    """
    global_count = free.nodes_needed(gpus_per_worker, workers)
    assert global_count is not None, "the caller checked that the job fits"
    # As in fewest_nodes: the first rack (by name) that costs no extra node. No rack needs
    # fewer nodes than the whole cluster (the greedy, largest first, uses the fewest
    # nodes, and a rack's nodes are some of the cluster's), so none can do better; asked
    # of the capacity, which scans hundreds of racks in compiled code.
    chosen = free.first_rack_holding(gpus_per_worker, workers, global_count)
    return _greedy_by_counts(free.nodes_by_free(chosen), gpus_per_worker, workers)


def _greedy_by_counts(
    buckets: list[dict[str, None]], gpw: int, workers: int
) -> list[tuple[str, int]]:
    """:func:`_greedy` over buckets: whole nodes, most free first; the remainder goes to the
    last node (in candidate order) that still takes it, i.e. the last of the smallest
    non-empty bucket that does."""
    picked: list[tuple[str, int]] = []
    left = workers
    for count in range(len(buckets) - 1, gpw - 1, -1):
        fit = count // gpw
        for node_id in buckets[count]:
            if fit >= left:
                smallest = next(c for c in range(left * gpw, count + 1) if buckets[c])
                tight = next(reversed(buckets[smallest]))
                picked.append((tight, left))
                return picked
            picked.append((node_id, fit))
            left -= fit
    return picked


def _greedy(candidates: list[tuple[str, int]], workers: int) -> list[tuple[str, int]]:
    """Fewest nodes: largest first; the last piece goes to the tightest node that fits it."""
    # Most workers first; equal ones keep their candidate order (the sort is stable,
    # reversed or not).
    ranked = sorted(candidates, key=_fit, reverse=True)
    picked: list[tuple[str, int]] = []
    left = workers
    i = 0
    while left > 0 and i < len(ranked):
        node_id, fit = ranked[i]
        if fit >= left:
            # Best fit for the remainder: the last node (fewest free) that still takes it.
            tight = ranked[bisect_right(ranked, -left, key=_negative_fit) - 1]
            picked.append((tight[0], left))
            left = 0
        else:
            picked.append((node_id, fit))
            left -= fit
        i += 1
    return picked


def _greedy_count(candidates: list[tuple[str, int]], workers: int) -> int:
    """How many nodes :func:`_greedy` picks: the fewest largest fits that hold `workers`
    (all of them if they never do), counted on the fits alone."""
    left = workers
    count = 0
    for fit in sorted(map(_fit, candidates), reverse=True):
        if left <= 0:
            break
        count += 1
        left -= fit
    return count


_fit = itemgetter(1)


def _negative_fit(candidate: tuple[str, int]) -> int:
    return -candidate[1]
