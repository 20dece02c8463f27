"""Aryl's elastic scaling (multiple-choice knapsack), loan-aware placement and the profiles."""

from __future__ import annotations

from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from policies.capacity import FreeCapacity
from policies.common.reclaim import run_reclaim
from policies.decision import JobStatus
from policies.model import JobState, Node, Pool, Snapshot
from policies.reclaim_models import ReclaimRequest
from policies.registry import build_registry
from policies.scaling.aryl_mckp import Item, solve_mckp
from tests.policies.builders import ctx, decide, gpus_by_node, job, node, running, snap, statuses
from tests.policies.checks import assert_valid_decision, assert_valid_reclaim
from tests.strategies import loaned_snapshots

REGISTRY = build_registry()


def lent(node_id: str, gpus: int = 4) -> Node:
    return node(node_id, gpus, pool=Pool.INFERENCE, loaned=True)


# -- the knapsack ------------------------------------------------------------------------------

# Integer values keep sums exact, so "optimal" and "lightest optimal" are well defined.
_ITEM = st.tuples(st.integers(0, 6), st.integers(-5, 30).map(float))
_CLASSES = st.lists(st.lists(_ITEM, min_size=1, max_size=4), max_size=5)


def _brute_force(classes: list[list[Item]], capacity: int) -> tuple[float, int] | None:
    """Best total value, and the least weight reaching it, over every choice; None if none fits."""
    best: tuple[float, int] | None = None
    for choice in product(*classes):
        weight = sum(w for w, _ in choice)
        value = sum(v for _, v in choice)
        if weight <= capacity and (best is None or (value, -weight) > (best[0], -best[1])):
            best = (value, weight)
    return best


@settings(max_examples=300, deadline=None)
@given(classes=_CLASSES, capacity=st.integers(0, 20))
def test_mckp_equals_brute_force_on_small_instances(
    classes: list[list[Item]], capacity: int
) -> None:
    expected = _brute_force(classes, capacity)

    chosen = solve_mckp(classes, capacity)

    if expected is None:
        assert chosen is None
        return
    assert chosen is not None
    assert len(chosen) == len(classes)
    picked = [items[i] for items, i in zip(classes, chosen, strict=True)]
    weight = sum(w for w, _ in picked)
    assert weight <= capacity
    assert sum(v for _, v in picked) == expected[0]
    assert weight == expected[1], "the lightest of the optimal choices"


def test_mckp_takes_the_whole_step_a_per_gpu_greedy_misses() -> None:
    # Per GPU, B's first worker (30) beats A's four-worker step (25 each); but with four
    # GPUs, A's step (100) is worth more than anything B can do with them (65).
    a: list[Item] = [(0, 0.0), (4, 100.0)]
    b: list[Item] = [(0, 0.0), (1, 30.0), (2, 50.0), (3, 60.0), (4, 65.0)]

    assert solve_mckp([a, b], 4) == [1, 0]
    assert solve_mckp([a, b], 5) == [1, 1]


# -- aryl scaling ------------------------------------------------------------------------------


def _scale(snapshot: Snapshot, **params: object) -> dict[str, int]:
    policy = REGISTRY.scaling("aryl", params)
    jobs = [j for j in snapshot.jobs if j.state is not JobState.PENDING or j.admitted]
    return {r.job_id: r.workers for r in policy.scale(ctx(snapshot), jobs)}


def test_aryl_gives_extra_workers_to_the_job_whose_remaining_time_drops_most() -> None:
    snapshot = snap(
        [node("t0", 6)],
        [
            # Same estimate; `scales` speeds up linearly, `flat` barely at all.
            running(
                "flat",
                {"t0": (0,)},
                min_workers=1,
                max_workers=4,
                estimated_duration_s=3600,
                speedup={1: 1.0, 2: 1.05, 3: 1.07, 4: 1.08},
            ),
            running(
                "scales", {"t0": (1,)}, min_workers=1, max_workers=4, estimated_duration_s=3600
            ),
        ],
    )

    workers = _scale(snapshot)

    assert workers["scales"] == 4
    assert workers["flat"] == 2  # the last free GPU still saves it a little


def test_aryl_starts_waiting_elastic_jobs_at_their_minimum_then_adds_extras() -> None:
    snapshot = snap(
        [node("t0", 4)],
        [
            job("first", workers=3, min_workers=1, max_workers=3, estimated_duration_s=600),
            job("second", workers=2, estimated_duration_s=600),
        ],
    )

    assert _scale(snapshot) == {"first": 2, "second": 2}
    # With the request as the base, the first job's three workers leave no room for the second.
    assert _scale(snapshot, base="requested") == {"first": 3, "second": 0}


def test_aryl_keeps_running_jobs_as_they_are_and_jobs_without_estimate_at_base() -> None:
    snapshot = snap(
        [node("t0", 8)],
        [
            running(
                "holds", {"t0": (0, 1, 2)}, min_workers=1, max_workers=8, estimated_duration_s=60
            ),
            job("unknown", workers=1, min_workers=1, max_workers=4),
        ],
    )

    workers = _scale(snapshot)

    assert workers == {"holds": 7, "unknown": 1}


# -- loan-aware placement ----------------------------------------------------------------------


def _free(snapshot: Snapshot) -> FreeCapacity:
    free = FreeCapacity.for_training(snapshot)
    for held in snapshot.jobs:
        if held.state is JobState.RUNNING:
            free.take_held([(held, held.placement)])
    return free


def _placed(snapshot: Snapshot, job_id: str, workers: int, **params: object) -> dict[str, int]:
    policy = REGISTRY.placement("loan_aware", params)
    subject = snapshot.jobs_by_id[job_id]
    outcome = policy.place(ctx(snapshot), subject, workers, _free(snapshot))
    return {a.node_id: len(a.gpu_indices) for a in outcome.assignments}


def test_loan_aware_puts_base_workers_in_the_training_pool_and_extras_on_loans() -> None:
    snapshot = snap(
        [lent("i0", 4), node("t0", 8)],
        [job("e", workers=2, min_workers=2, max_workers=6)],
    )

    assert _placed(snapshot, "e", 5) == {"t0": 2, "i0": 3}


def test_loan_aware_keeps_a_rigid_job_off_a_loaned_server_that_fits_it_best() -> None:
    # Best fit alone would pick i0 (two free GPUs, a perfect fit).
    snapshot = snap([lent("i0", 2), node("t0", 8)], [job("r", workers=2)])

    assert _placed(snapshot, "r", 2) == {"t0": 2}


def test_loan_aware_grows_a_running_job_onto_loaned_servers() -> None:
    snapshot = snap(
        [node("t0", 8), lent("i0", 4)],
        [running("e", {"t0": (0, 1)}, min_workers=2, max_workers=6)],
    )

    assert _placed(snapshot, "e", 3) == {"i0": 3}


def test_loan_aware_spills_extras_past_full_loans_and_bases_onto_loans_when_needed() -> None:
    snapshot = snap(
        [node("t0", 4), lent("i0", 2)],
        [job("big", workers=2, min_workers=2, max_workers=6), job("rigid", workers=5)],
    )

    assert _placed(snapshot, "big", 5) == {"t0": 3, "i0": 2}
    assert _placed(snapshot, "rigid", 5) == {"t0": 4, "i0": 1}


def test_loan_aware_without_loans_never_touches_a_loaned_server() -> None:
    snapshot = snap([node("t0", 2), lent("i0", 8)], [job("r", workers=4)])
    policy = REGISTRY.placement("loan_aware", {"use_loaned": False})

    outcome = policy.place(ctx(snapshot), snapshot.jobs[0], 4, _free(snapshot))

    assert not outcome.placed
    assert "loaned servers, which this profile does not use" in outcome.reason


# -- the profiles, end to end ------------------------------------------------------------------


def test_aryl_profile_grows_jobs_onto_loans_so_that_a_reclaim_only_shrinks_them() -> None:
    snapshot = snap(
        [node("t0", 4), lent("i0", 4), lent("i1", 4)],
        [
            job("e", workers=2, min_workers=2, max_workers=6, estimated_duration_s=3600),
            job("f", workers=2, min_workers=2, max_workers=4, estimated_duration_s=3600),
        ],
    )

    decision = decide(snapshot, "aryl")

    assert_valid_decision(snapshot, decision)
    assert statuses(decision) == {"e": JobStatus.STARTED, "f": JobStatus.STARTED}
    assert gpus_by_node(decision, "e")["t0"] == 2
    assert gpus_by_node(decision, "f")["t0"] == 2
    # Apply the decision, then give both loaned servers back: nobody is preempted.
    placed = {p.job_id: p.assignments for p in decision.placement}
    after = snap(
        list(snapshot.nodes),
        [replace(j, state=JobState.RUNNING, placement=placed[j.id]) for j in snapshot.jobs],
    )
    request = ReclaimRequest(count=2)
    result = run_reclaim(REGISTRY.reclaim("aryl"), after, request)
    assert_valid_reclaim(after, request, result)
    assert result.preempt == ()
    assert {e.job_id: e.workers for e in result.shrink} == {"e": 2, "f": 2}


def test_static_profile_leaves_loaned_servers_alone() -> None:
    snapshot = snap(
        [node("t0", 4), lent("i0", 8)],
        [job("a", workers=4, min_workers=2, max_workers=8), job("b", workers=4)],
    )

    decision = decide(snapshot, "static")

    assert gpus_by_node(decision, "a") == {"t0": 4}
    assert statuses(decision)["b"] is JobStatus.PENDING


@settings(max_examples=40, deadline=None)
@given(snapshot=loaned_snapshots())
def test_aryl_and_static_decisions_keep_the_invariants_on_loaned_clusters(
    snapshot: Snapshot,
) -> None:
    for profile in ("aryl", "static"):
        assert_valid_decision(snapshot, decide(snapshot, profile))


def _grown_and_waiting(min_workers: int, waiting_workers: int) -> Snapshot:
    """An elastic job grown onto a whole node, and a rigid job waiting behind it."""
    return snap(
        [node("t0", 8)],
        [
            running(
                "grown",
                {"t0": tuple(range(8))},
                min_workers=min_workers,
                max_workers=8,
                estimated_duration_s=600,
            ),
            job("waiting", workers=waiting_workers, estimated_duration_s=600, submit_time=10),
        ],
    )


def test_aryl_takes_extra_workers_back_from_running_jobs_for_a_waiting_jobs_base() -> None:
    # It steps down through the counts it accepts (2..8) until three GPUs are free.
    assert _scale(_grown_and_waiting(2, 3)) == {"grown": 5, "waiting": 3}


def test_aryl_shrinks_no_one_when_giving_back_every_extra_would_not_be_enough() -> None:
    assert _scale(_grown_and_waiting(4, 6)) == {"grown": 8, "waiting": 0}


def test_aryl_profile_shrinks_a_grown_job_and_starts_the_waiting_one_in_one_decision() -> None:
    decision = decide(_grown_and_waiting(2, 3), "aryl")

    placed = {p.job_id: sum(len(a.gpu_indices) for a in p.assignments) for p in decision.placement}
    assert placed == {"grown": 5, "waiting": 3}
    assert statuses(decision) == {"grown": JobStatus.RESIZED, "waiting": JobStatus.STARTED}
