"""The compiled quick paths of FreeCapacity (policies/_capacity.pyx) against its full check.

`take` commits most placements through quick checks (one node on its lowest free GPUs,
or several distinct nodes so), and `take_fullest_fit` finds and takes the best fit by GPU
count in one call; anything else goes through `_take_checked`, which checks every GPU
and says what is wrong. Both must leave the same capacity behind and refuse the same
placements with the same words, so a capacity that only ever takes the checked path is
the reference here.
"""

from __future__ import annotations

import random

import pytest

from policies.capacity import CapacityError, FreeCapacity
from policies.model import Assignment, Job
from tests.policies.builders import job, node, running, snap


def state(free: FreeCapacity) -> object:
    """Everything a take changes, buckets in their order."""
    racks = None
    if free._by_rack is not None:
        racks = (
            {rack: [list(b) for b in buckets] for rack, buckets in free._by_rack[0].items()},
            dict(free._by_rack[1]),
        )
    return (
        {node_id: list(gpus) for node_id, gpus in free._free.items()},
        [list(bucket) for bucket in free._buckets],
        racks,
        free._free_n.tolist(),
        free.total_free,
        free._cpus_a.tolist(),
        free._mem_a.tolist(),
    )


def first_of_fullest(free: FreeCapacity, need: int) -> str | None:
    """The best fit by GPU count, walked over the buckets."""
    for bucket in free.nodes_by_free()[max(need, 0) :]:
        if bucket:
            return next(iter(bucket))
    return None


def placement_for(rng: random.Random, free: FreeCapacity) -> tuple[Assignment, ...]:
    """A placement that is right most of the time and wrong in every way now and then."""
    open_nodes = [n for n in free.node_ids() if free.free_count(n)]
    picks = rng.sample(open_nodes, min(len(open_nodes), rng.randint(1, 3)))
    out = []
    for node_id in picks:
        gpus = list(free.free_gpus(node_id))
        count = rng.randint(1, len(gpus))
        roll = rng.random()
        if roll < 0.6:
            chosen = tuple(gpus[:count])  # the lowest free: the quick path
        elif roll < 0.8:
            chosen = tuple(sorted(rng.sample(gpus, count)))
        elif roll < 0.9:
            chosen = tuple(sorted(rng.sample(range(free.node(node_id).gpus), count)))  # busy?
        else:
            chosen = (gpus[0], gpus[0]) if len(gpus) > 1 else (gpus[0],)  # repeated index?
        out.append(Assignment(node_id=node_id, gpu_indices=chosen))
    if out and rng.random() < 0.05:
        out.append(out[0])  # a node twice
    return tuple(out)


@pytest.mark.parametrize("seed", range(40))
def test_quick_takes_leave_what_the_full_check_leaves(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [
        node(
            f"n{i:02d}",
            gpus=rng.choice([2, 4, 8]),
            gpu_memory_gb=rng.choice([16.0, 32.0]),
            cpus=rng.choice([8, 32]),
            memory_gb=rng.choice([64.0, 256.0]),
            topology={"rack": rng.choice(["", "r0", "r1"])},
        )
        for i in range(rng.randint(2, 12))
    ]
    hogs = [
        running(f"h{i}", {n.id: tuple(range(rng.randint(1, n.gpus)))})
        for i, n in enumerate(nodes)
        if rng.random() < 0.4
    ]
    snapshot = snap(nodes, hogs)
    quick, checked = FreeCapacity.for_training(snapshot), FreeCapacity.for_training(snapshot)
    if rng.random() < 0.5:
        for free in (quick, checked):
            free.free_gpus_by_rack  # noqa: B018 - racks' buckets kept in step from here
    held: list[tuple[Job, tuple[Assignment, ...]]] = [(h, h.placement) for h in hogs]
    for free in (quick, checked):
        free.take_held(held)
    for step in range(60):
        assert state(quick) == state(checked)
        for need in range(-1, quick.max_gpus_per_node + 2):
            assert quick.first_fullest(need) == first_of_fullest(quick, need)
        if held and rng.random() < 0.25:
            gone, placement = held.pop(rng.randrange(len(held)))
            for free in (quick, checked):
                free.release(gone, placement)
            continue
        if not any(quick.free_count(n) for n in quick.node_ids()):
            continue
        gpus_per_worker = rng.choice([1, 1, 2])
        probe = job(
            f"p{step}",
            gpus_per_worker=gpus_per_worker,
            gpu_memory_gb=rng.choice([8.0, 16.0, 24.0]),
            cpus_per_worker=rng.choice([0, 0, 2, 12]),
            memory_gb_per_worker=rng.choice([0.0, 0.0, 16.0]),
        )
        # The best fit by GPU count of a job that fits by its GPUs alone, found and taken.
        need = gpus_per_worker * rng.randint(1, 3)
        best = first_of_fullest(quick, need) if quick.fits_by_gpus_alone(probe) else None
        fit = quick.fullest_fit(probe, need)
        assert fit == (
            None
            if best is None
            else (Assignment(node_id=best, gpu_indices=tuple(quick.free_gpus(best))[:need]),)
        )
        if fit is not None and rng.random() < 0.4:
            assert quick.take_fullest_fit(probe, need) == fit
            checked._take_checked(probe, fit)
            held.append((probe, fit))
            continue
        placement = placement_for(rng, quick)
        errors = []
        for take in (quick.take, checked._take_checked):
            try:
                take(probe, placement)
                errors.append("")
            except CapacityError as error:
                errors.append(str(error))
        assert errors[0] == errors[1]
        if not errors[0]:
            held.append((probe, placement))
    assert state(quick) == state(checked)


@pytest.mark.parametrize("gpus_per_worker", [1, 2, 3, 8])
def test_room_by_gpus_counts_whole_workers_of_every_bucket(gpus_per_worker: int) -> None:
    nodes = [node(f"n{i}", gpus=8) for i in range(6)]
    hogs = [running(f"h{i}", {f"n{i}": tuple(range(i + 1))}) for i in range(5)]
    free = FreeCapacity.for_training(snap(nodes, hogs))
    free.take_held([(h, h.placement) for h in hogs])
    expected = sum(free.free_count(n) // gpus_per_worker for n in free.node_ids())
    assert free._room_by_gpus(gpus_per_worker) == expected
    assert free.room_at_most(job("probe", gpus_per_worker=gpus_per_worker)) == expected
