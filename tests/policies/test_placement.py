"""Behaviour of the placement policies on small hand-made clusters."""

from __future__ import annotations

import random

import pytest

from policies.capacity import FreeCapacity
from policies.model import Assignment, Job, JobState, Node, Snapshot, decode_snapshot, encode
from policies.placement import consolidated
from policies.placement.consolidated import (
    fewest_nodes,
    fewest_nodes_by_counts,
    fewest_nodes_by_fits,
)
from policies.protocols import PlacementOutcome
from policies.registry import build_registry
from tests.policies.builders import ctx, job, node, running, snap

REGISTRY = build_registry()


def place(
    policy: str, snapshot: Snapshot, job_id: str, workers: int | None = None, seed: int = 0
) -> PlacementOutcome:
    """Place a pending job of the snapshot on what its running jobs leave free."""
    free = FreeCapacity.for_training(snapshot)
    for held in snapshot.jobs:
        if held.state is JobState.RUNNING:
            free.take_held([(held, held.placement)])
    placing: Job = snapshot.jobs_by_id[job_id]
    count = placing.workers if workers is None else workers
    return REGISTRY.placement(policy).place(ctx(snapshot, seed), placing, count, free)


def gpus_on(outcome: PlacementOutcome) -> dict[str, int]:
    return {a.node_id: len(a.gpu_indices) for a in outcome.assignments}


def test_consolidated_best_fit_packs_onto_one_node_when_it_can() -> None:
    snapshot = snap(
        [node("roomy"), node("tight", gpus=4), node("half", gpus=4)],
        [running("busy", {"tight": (0, 1)}), job("pair", workers=2)],
    )
    outcome = place("consolidated", snapshot, "pair")
    assert gpus_on(outcome) == {"tight": 2}
    assert outcome.assignments[0].gpu_indices == (2, 3)


def test_consolidated_splits_a_job_that_fits_one_node_only_when_allowed() -> None:
    snapshot = snap(
        [node("a", gpus=4), node("b", gpus=4)],
        [running("x", {"a": (0, 1)}), running("y", {"b": (0, 1)}), job("four", workers=4)],
    )
    free = FreeCapacity.for_training(snapshot)
    free.take_held((j, j.placement) for j in snapshot.jobs if j.state is JobState.RUNNING)
    whole = REGISTRY.placement("consolidated", {"split_jobs_that_fit_one_node": False})
    four = snapshot.jobs_by_id["four"]

    assert gpus_on(place("consolidated", snapshot, "four")) == {"a": 2, "b": 2}
    kept_whole = whole.place(ctx(snapshot), four, 4, free)
    assert kept_whole.assignments == ()
    assert (
        kept_whole.reason == "waits for one node with 4 free GPUs (it is never split across nodes)"
    )


def test_consolidated_prefers_one_rack() -> None:
    # Fewest nodes is two either way; the pair inside rack r0 beats the pair
    # that greedy largest-first would pick across racks (r1's six plus two more).
    snapshot = snap(
        [
            node("a0", gpus=4, topology={"rack": "r0"}),
            node("a1", gpus=4, topology={"rack": "r0"}),
            node("b0", gpus=8, topology={"rack": "r1"}),
        ],
        [running("busy", {"b0": (0, 1)}), job("eight", workers=8)],
    )
    outcome = place("consolidated", snapshot, "eight")
    assert gpus_on(outcome) == {"a0": 4, "a1": 4}


def test_spread_uses_one_worker_per_node() -> None:
    snapshot = snap([node(f"n{i}") for i in range(4)], [job("four", workers=4)])
    assert gpus_on(place("spread", snapshot, "four")) == {"n0": 1, "n1": 1, "n2": 1, "n3": 1}


def test_spread_deals_extra_workers_round_robin() -> None:
    snapshot = snap([node("n0"), node("n1")], [job("five", workers=5, gpus_per_worker=1)])
    assert gpus_on(place("spread", snapshot, "five")) == {"n0": 3, "n1": 2}


def test_spread_prefers_nodes_with_the_most_free_gpus() -> None:
    snapshot = snap(
        [node("busy"), node("empty"), node("half")],
        [
            running("a", {"busy": (0, 1, 2, 3, 4, 5)}),
            running("b", {"half": (0, 1, 2, 3)}),
            job("two", workers=2),
        ],
    )
    assert gpus_on(place("spread", snapshot, "two")) == {"empty": 1, "half": 1}


def test_spread_stops_at_a_node_without_room_left() -> None:
    snapshot = snap(
        [node("big"), node("small", gpus=1)],
        [job("four", workers=4)],
    )
    assert gpus_on(place("spread", snapshot, "four")) == {"big": 3, "small": 1}


def test_first_fit_follows_node_order() -> None:
    snapshot = snap(
        [node("first"), node("second"), node("third")],
        [running("a", {"first": (0, 1, 2, 3, 4, 5)}), job("four", workers=4)],
    )
    # Consolidation would put all four on "second"; first fit fills "first" first.
    assert gpus_on(place("first_fit", snapshot, "four")) == {"first": 2, "second": 2}


def test_random_placement_is_deterministic_for_a_seed() -> None:
    snapshot = snap([node(f"n{i}", gpus=1) for i in range(16)], [job("three", workers=3)])
    first = place("random", snapshot, "three", seed=5)
    assert first.placed
    assert place("random", snapshot, "three", seed=5) == first
    other_seeds = {tuple(gpus_on(place("random", snapshot, "three", seed=s))) for s in range(8)}
    assert len(other_seeds) > 1, "the seed should change the draw"


def test_random_placement_differs_between_jobs_with_the_same_seed() -> None:
    jobs = [job(f"job{i}", workers=2) for i in range(8)]
    snapshot = snap([node(f"n{i}", gpus=1) for i in range(16)], jobs)
    draws = {tuple(gpus_on(place("random", snapshot, j.id, seed=1))) for j in jobs}
    assert len(draws) > 1


def test_random_placement_parameter_seed_shifts_the_stream() -> None:
    snapshot = snap([node(f"n{i}", gpus=1) for i in range(16)], [job("two", workers=2)])
    free = FreeCapacity.for_training(snapshot)
    two = snapshot.jobs_by_id["two"]
    draws = {
        tuple(gpus_on(REGISTRY.placement("random", {"seed": s}).place(ctx(snapshot), two, 2, free)))
        for s in range(8)
    }
    assert len(draws) > 1


@pytest.mark.parametrize("policy", ["consolidated", "spread", "first_fit", "random"])
def test_placement_says_why_it_cannot_place(policy: str) -> None:
    snapshot = snap(
        [node("n0", gpu_memory_gb=16), node("n1", gpu_memory_gb=80, gpus=2)],
        [job("hungry", workers=4, gpu_memory_gb=40)],
    )
    outcome = place(policy, snapshot, "hungry")
    assert not outcome.placed
    assert "needs 4 workers" in outcome.reason
    assert "room for 2" in outcome.reason


@pytest.mark.parametrize("policy", ["consolidated", "spread", "first_fit", "random"])
def test_placement_respects_cpu_and_memory_per_node(policy: str) -> None:
    snapshot = snap(
        [node("n0", cpus=4, memory_gb=64), node("n1", cpus=4, memory_gb=64)],
        [job("cpu-bound", workers=4, cpus_per_worker=2, memory_gb_per_worker=32)],
    )
    outcome = place(policy, snapshot, "cpu-bound")
    assert gpus_on(outcome) == {"n0": 2, "n1": 2}


@pytest.mark.parametrize("policy", ["consolidated", "spread", "first_fit", "random"])
def test_placement_gives_whole_workers_per_node(policy: str) -> None:
    snapshot = snap(
        [node("n0", gpus=6), node("n1", gpus=6)],
        [job("wide", workers=3, gpus_per_worker=4)],
    )
    outcome = place(policy, snapshot, "wide", workers=2)
    assert sorted(gpus_on(outcome).values()) == [4, 4]


def test_capacity_of_one_snapshot_starts_full_each_decision_whatever_the_last_took() -> None:
    nodes = [node("n0", gpus=4), node("n1", gpus=2, healthy=False), node("n2"), node("n3")]
    snapshot = snap(nodes, [])
    first = FreeCapacity.for_training(snapshot)
    # Every way of taking and giving back, each on a node untouched before it (the
    # lowest GPUs, other GPUs, GPUs already held, a release): none may reach the
    # starting capacity that later decisions of the same nodes share.
    first.take(job("a", workers=3), [Assignment(node_id="n0", gpu_indices=(0, 1, 2))])
    first.take(job("b"), [Assignment(node_id="n2", gpu_indices=(2,))])
    first.take_held([(job("c"), [Assignment(node_id="n3", gpu_indices=(0,))])])
    first.release(job("a", workers=3), [Assignment(node_id="n0", gpu_indices=(1,))])
    assert first.free_gpus("n0") == (1, 3)
    assert first.free_gpus("n2") == (0, 1, 3, 4, 5, 6, 7)
    assert first.free_gpus("n3") == (1, 2, 3, 4, 5, 6, 7)
    again = FreeCapacity.for_training(snapshot)
    assert again.free_gpus("n0") == (0, 1, 2, 3)
    assert again.free_gpus("n2") == again.free_gpus("n3") == tuple(range(8))
    assert again.total_free == 20
    assert again.node_ids() == ["n0", "n2", "n3"]  # the unhealthy node is not training's


def test_capacity_of_the_same_nodes_decoded_again_starts_from_the_same_full_layout() -> None:
    # What a service sees: each request decodes new Node objects, equal to the last's.
    raw = encode(snap([node("n0", gpus=4), node("n1", memory_gb=0.0)], []))
    first = FreeCapacity.for_training(decode_snapshot(raw))
    first.take(job("a", workers=3), [Assignment(node_id="n0", gpu_indices=(0, 1, 2))])
    again = FreeCapacity.for_training(decode_snapshot(raw))
    assert again._layout is first._layout
    assert again.free_gpus("n0") == (0, 1, 2, 3)
    assert again.total_free == 12
    # A value that reads equal but is not the same (the sign of a zero) is its own layout.
    other = FreeCapacity.for_training(
        decode_snapshot(raw.replace(b'"memory_gb":0.0', b'"memory_gb":-0.0'))
    )
    assert other._layout is not first._layout


def test_capacity_counts_the_gpus_cpus_and_memory_running_jobs_hold() -> None:
    a = running("a", {"n0": (0, 1)}, cpus_per_worker=4, memory_gb_per_worker=10)
    b = running("b", {"n0": (2,), "n1": (0,)}, cpus_per_worker=2)
    snapshot = snap([node("n0", gpus=4, cpus=16, memory_gb=64), node("n1", gpus=2)], [a, b])
    free = FreeCapacity.for_training(snapshot)
    free.take_held([(a, a.placement), (b, b.placement)])
    assert free.free_gpus("n0") == (3,)
    assert free.free_gpus("n1") == (1,)
    assert free.total_free == 2
    assert free.free_cpus("n0") == 16 - 2 * 4 - 2
    assert free.free_memory_gb("n0") == 64 - 2 * 10
    assert list(free.nodes_with_free(1)) == ["n0", "n1"]


def test_held_nodes_join_their_bucket_in_the_order_the_running_jobs_first_touch_them() -> None:
    # Placement reads each bucket in insertion order, so the order in which running jobs
    # are counted is part of every later decision: nodes a job touches join their new
    # bucket in the order they are first met, the untouched ones keep snapshot order.
    nodes = [node(f"n{i}", gpus=4, topology={"rack": f"r{i % 2}"}) for i in range(6)]
    c = running("c", {"n4": (0, 1, 2, 3)})  # fills n4
    a = running("a", {"n3": (0,), "n1": (1,)})
    b = running("b", {"n1": (0,), "n5": (3,), "n0": (2, 3)})
    free = FreeCapacity.for_training(snap(nodes, [a, b, c]))
    free.take_held([(c, c.placement), (a, a.placement), (b, b.placement)])
    assert [list(bucket) for bucket in free.nodes_by_free()] == [
        ["n4"],
        [],
        ["n1", "n0"],
        ["n3", "n5"],
        ["n2"],
    ]
    assert [list(bucket) for bucket in free.nodes_by_free("r1")] == [
        [],
        [],
        ["n1"],
        ["n3", "n5"],
        [],
    ]
    assert free.free_gpus("n1") == (2, 3)
    assert free.free_gpus("n4") == ()
    assert free.free_gpus_by_rack == {"r0": 12 - 6, "r1": 12 - 4}
    assert free.total_free == 24 - 10
    assert free.fits(job("one")).tolist() == [2, 2, 4, 3, 0, 3]


@pytest.mark.parametrize("cpus_per_worker", [(0.0, 1.5, 6.0), (0.0, 2.0, 6.0)])
def test_capacity_room_and_candidates_agree_with_each_node_through_takes_and_releases(
    cpus_per_worker: tuple[float, ...],
) -> None:
    # Room and the candidate list read per-node arrays kept beside the per-node dicts;
    # after any mix of holds, takes and releases they must say what asking every node
    # one by one (workers_fitting) says, and each rack's free count what its nodes hold.
    # Whole CPU needs keep the free CPUs whole (divided as integers throughout); a
    # fractional one makes them fractional from its first take on.
    rng = random.Random(7)
    nodes = [
        node(
            f"n{i}",
            gpus=rng.choice((4, 8)),
            cpus=rng.choice((8, 16, 32)),
            memory_gb=rng.choice((32.0, 64.0, 128.0)),
            gpu_memory_gb=rng.choice((16.0, 32.0)),
            topology={"rack": f"r{i % 3}"},
        )
        for i in range(12)
    ]
    # A running job that overcommits a node's CPUs: room there must not go negative.
    hog = running("hog", {"n0": (0,)}, cpus_per_worker=64.0)
    free = FreeCapacity.for_training(snap(nodes, [hog]))
    free.take_held([(hog, hog.placement)])
    shapes = [
        {"gpus_per_worker": g, "cpus_per_worker": c, "memory_gb_per_worker": m, "gpu_memory_gb": gm}
        for g in (1, 2, 4)
        for c in cpus_per_worker
        for m in (0.0, 10.0)
        for gm in (0.0, 24.0)
    ]
    held: list[tuple[Job, tuple[Assignment, ...]]] = []
    for step in range(300):
        shape = rng.choice(shapes)
        probe = job(f"p{step}", **shape)
        fits = {n: free.workers_fitting(n, probe) for n in free.node_ids()}
        assert free.room(probe) == sum(f for f in fits.values() if f > 0)
        candidates = free.candidate_nodes(probe)
        assert dict(candidates) == {n: f for n, f in fits.items() if f > 0}
        assert [free.free_count(n) for n, _ in candidates] == sorted(
            (free.free_count(n) for n, _ in candidates), reverse=True
        )
        for rack in free.racks():
            members = [n for n in free.node_ids() if free.rack_of(n) == rack]
            assert free.rack_free_gpus(rack) == sum(free.free_count(n) for n in members)
        if held and rng.random() < 0.3:
            gone, placement = held.pop(rng.randrange(len(held)))
            free.release(gone, placement)
        elif candidates:
            node_id, fit = rng.choice(candidates)
            workers = rng.randint(1, fit)
            gpus = list(free.free_gpus(node_id))
            # Not always the lowest indices: both ways of taking must keep the arrays right.
            picked = tuple(sorted(rng.sample(gpus, workers * probe.gpus_per_worker)))
            placement = (Assignment(node_id=node_id, gpu_indices=picked),)
            free.take(probe, placement)
            held.append((probe, placement))


@pytest.mark.parametrize("seed", range(20))
def test_rack_buckets_worked_out_late_match_those_kept_from_the_start(seed: int) -> None:
    # A decision works out each rack's buckets only when a placement first asks for
    # them; from then on they are kept in step with every move. Asked at the end of a
    # mix of holds, takes (lowest GPUs and others) and releases, they must be what
    # keeping them all along gives: the same nodes in the same order, the same counts.
    rng = random.Random(seed)
    nodes = [
        node(f"n{i:02d}", gpus=rng.choice([4, 8]), topology={"rack": rng.choice(["", "r0", "r1"])})
        for i in range(rng.randint(3, 16))
    ]
    hogs = [
        running(f"h{i}", {n.id: tuple(range(rng.randint(1, n.gpus)))})
        for i, n in enumerate(nodes)
        if rng.random() < 0.5
    ]
    snapshot = snap(nodes, hogs)
    early, late = FreeCapacity.for_training(snapshot), FreeCapacity.for_training(snapshot)
    for rack in early.racks():
        early.nodes_by_free(rack)  # asked before anything moves: kept in step from here
    held: list[tuple[Job, tuple[Assignment, ...]]] = [(h, h.placement) for h in hogs]
    for free in (early, late):
        free.take_held(held)
    for step in range(40):
        if held and rng.random() < 0.3:
            gone, placement = held.pop(rng.randrange(len(held)))
            for free in (early, late):
                free.release(gone, placement)
            continue
        open_nodes = [n for n in early.node_ids() if early.free_count(n)]
        if not open_nodes:
            continue
        node_id = rng.choice(open_nodes)
        gpus = list(early.free_gpus(node_id))
        picked = tuple(sorted(rng.sample(gpus, rng.randint(1, len(gpus)))))
        probe = job(f"p{step}", workers=len(picked))
        placement = (Assignment(node_id=node_id, gpu_indices=picked),)
        for free in (early, late):
            free.take(probe, placement)
        held.append((probe, placement))
    assert late.free_gpus_by_rack == early.free_gpus_by_rack
    for rack in early.racks():
        assert [list(b) for b in late.nodes_by_free(rack)] == [
            list(b) for b in early.nodes_by_free(rack)
        ]
        assert late.rack_free_gpus(rack) == sum(
            late.free_count(n) for n in late.node_ids() if late.rack_of(n) == rack
        )


@pytest.mark.parametrize("gpus", [0, 1, 3, 8, 9])
def test_nodes_with_free_gpus_are_counted_from_the_buckets(gpus: int) -> None:
    nodes = [node(f"n{i}", gpus=8) for i in range(6)]
    hogs = [running(f"h{i}", {f"n{i}": tuple(range(i + 1))}) for i in range(5)]
    free = FreeCapacity.for_training(snap(nodes, hogs))
    free.take_held([(h, h.placement) for h in hogs])
    expected = sum(1 for n in free.node_ids() if free.free_count(n) >= gpus)
    assert free.count_with_free(gpus) == expected


def _random_racked_nodes(rng: random.Random) -> list[Node]:
    """4 to 24 nodes of varied GPUs, CPUs and memory, in racks or in none."""
    return [
        node(
            f"n{i:02d}",
            gpus=rng.choice([4, 8, 8]),
            cpus=rng.choice([16, 32, 64]),
            memory_gb=rng.choice([128, 256]),
            topology={"rack": rng.choice(["", "r0", "r1", "r1", "r2"])},
        )
        for i in range(rng.randint(4, 24))
    ]


@pytest.mark.parametrize("seed", range(60))
def test_fewest_nodes_from_fits_picks_what_the_candidate_list_picks(seed: int) -> None:
    # Jobs with CPU or memory needs are placed from the fits of every node at once
    # (fewest_nodes_by_fits); the picks must be those of the list-based form, ties and
    # rack choice included, on clusters with racks, rackless nodes and partly used nodes.
    rng = random.Random(seed)
    nodes = _random_racked_nodes(rng)
    free = FreeCapacity.for_training(snap(nodes, []))
    hog = job("hog", cpus_per_worker=1, memory_gb_per_worker=12)
    for n in nodes:
        used = rng.choice([0, 0, 1, 2, 4, n.gpus])
        if used:
            free.take(hog, [Assignment(node_id=n.id, gpu_indices=tuple(range(used)))])
    needy = job(
        "needy",
        gpus_per_worker=rng.choice([1, 2]),
        cpus_per_worker=rng.choice([4, 8, 8, 16]),
        memory_gb_per_worker=rng.choice([0, 16]),
    )
    candidates = free.candidate_nodes(needy)
    room = sum(fit for _, fit in candidates)
    if room == 0:
        return
    workers = rng.randint(1, room)
    assert fewest_nodes_by_fits(needy, workers, free, free.fits(needy)) == fewest_nodes(
        candidates, workers, free
    )


@pytest.mark.parametrize("seed", range(60))
def test_fewest_nodes_from_free_gpu_counts_picks_what_the_candidate_list_picks(seed: int) -> None:
    # Jobs that fit by their GPUs alone are spread from the free-GPU buckets and the first
    # rack that holds them on the cluster's fewest nodes (fewest_nodes_by_counts, the rack
    # asked of the compiled capacity); the picks must be those of the list-based form.
    rng = random.Random(seed)
    nodes = _random_racked_nodes(rng)
    free = FreeCapacity.for_training(snap(nodes, []))
    hog = job("hog")
    for n in nodes:
        used = rng.choice([0, 0, 1, 2, 3, 4, n.gpus])
        if used:
            free.take(hog, [Assignment(node_id=n.id, gpu_indices=tuple(range(used)))])
    alone = job("alone", gpus_per_worker=rng.choice([1, 2, 4]))
    candidates = free.candidate_nodes(alone)
    room = sum(fit for _, fit in candidates)
    for workers in range(1, room + 1):
        assert fewest_nodes_by_counts(alone.gpus_per_worker, workers, free) == fewest_nodes(
            candidates, workers, free
        ), workers


@pytest.mark.parametrize("seed", range(30))
def test_consolidated_places_a_needy_job_alike_from_the_list_and_from_the_arrays(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With few nodes that have room (LISTED_CANDIDATES), a job with CPU or memory needs is
    # placed from the list of candidates, with more from the fits as arrays: the outcome
    # (picks, or the reason it waits, with its room) must not depend on which.
    rng = random.Random(seed)
    nodes = _random_racked_nodes(rng)
    held = [
        running(f"r{i}", {n.id: tuple(range(rng.choice([1, 2, n.gpus])))})
        for i, n in enumerate(nodes)
        if rng.random() < 0.5
    ]
    needy = job(
        "needy",
        gpus_per_worker=rng.choice([1, 2]),
        cpus_per_worker=rng.choice([2, 8]),
        memory_gb_per_worker=rng.choice([0, 16]),
        workers=1,
    )
    snapshot = snap(nodes, [*held, needy])
    for workers in range(1, 2 + sum(n.gpus for n in nodes)):
        listed = place("consolidated", snapshot, "needy", workers)
        monkeypatch.setattr(consolidated, "LISTED_CANDIDATES", -1)
        from_arrays = place("consolidated", snapshot, "needy", workers)
        monkeypatch.undo()
        assert encode(listed) == encode(from_arrays), workers
