"""The snapshot's cross-field check finds every GPU held twice, out of range or on an unknown
node, naming the job that holds it, whatever the order and shape of the placements."""

from __future__ import annotations

import random

import pytest

from policies.model import Assignment, Job, JobState, Node, Snapshot, snapshot_problems


def _reference(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The placement problems, worked out GPU by GPU: who holds each GPU of each node,
    in job order, the later holder written over the earlier one."""
    nodes = snapshot.nodes_by_id
    holders: dict[str, dict[int, str]] = {}
    out: list[tuple[str, str]] = []
    for i, job in enumerate(snapshot.jobs):
        gpw = job.gpus_per_worker
        running = job.state is JobState.RUNNING
        if running and not job.placement:
            out.append((f"jobs[{i}].placement", "a running job needs a placement"))
        if not job.placement:
            continue
        if not running:
            out.append((f"jobs[{i}].placement", f"a {job.state.value} job cannot hold GPUs"))
        placed = sum(len(a.gpu_indices) for a in job.placement)
        if placed % gpw:
            out.append(
                (
                    f"jobs[{i}].placement",
                    f"{placed} GPUs placed is not a multiple of gpus_per_worker {gpw}",
                )
            )
        for k, a in enumerate(job.placement):
            if len(a.gpu_indices) % gpw:
                out.append(
                    (
                        f"jobs[{i}].placement[{k}].gpu_indices",
                        f"{len(a.gpu_indices)} GPUs on one node is not whole workers of {gpw} GPUs",
                    )
                )
            on = nodes.get(a.node_id)
            if on is None:
                out.append((f"jobs[{i}].placement[{k}].node_id", f"unknown node {a.node_id!r}"))
                continue
            held = holders.setdefault(on.id, {})
            for g, gpu in enumerate(a.gpu_indices):
                path = f"jobs[{i}].placement[{k}].gpu_indices[{g}]"
                if not 0 <= gpu < on.gpus:
                    out.append((path, f"node {on.id!r} has GPUs 0..{on.gpus - 1}, not {gpu}"))
                    continue
                if gpu in held:
                    out.append(
                        (path, f"GPU {gpu} of node {on.id!r} is already used by job {held[gpu]!r}")
                    )
                held[gpu] = job.id
    return out


def _random_snapshot(rng: random.Random) -> Snapshot:
    """Nodes of 1 to 16 GPUs; jobs (mostly running) holding random GPUs: within range
    and free most of the time, else overlapping, repeated, negative, past the node's
    last GPU, on a node that does not exist, or held by a job that is not running."""
    nodes = tuple(
        Node(id=f"n{n}", gpu_type="V100", gpus=rng.choice((1, 2, 4, 8, 8, 16)))
        for n in range(rng.randint(1, 6))
    )
    free = {n.id: list(range(n.gpus)) for n in nodes}
    # Some snapshots place carefully (a fault is rare, so most nodes are checked a long
    # while before one turns up), others carelessly.
    careless = rng.choice((0.02, 0.1, 0.5))
    jobs = []
    for j in range(rng.randint(1, 30)):
        gpw = rng.choice((1, 1, 1, 2, 4))
        placement = []
        for _ in range(rng.choice((0, 1, 1, 1, 2, 3))):
            node = rng.choice(nodes)
            count = rng.randint(1, max(1, node.gpus // 2))
            if rng.random() > careless and len(free[node.id]) >= count:
                indices = free[node.id][:count]
                del free[node.id][:count]
            else:
                indices = rng.sample(range(node.gpus), min(count, node.gpus))
            if rng.random() < careless:
                indices.append(rng.choice((-1, node.gpus, node.gpus + 3)))
            if rng.random() < careless / 4:
                indices = [node.gpus]  # just past its last GPU, alone
            if rng.random() < careless / 2:
                indices.append(indices[0])
            rng.shuffle(indices)
            node_id = node.id if rng.random() > careless / 2 else "elsewhere"
            placement.append(Assignment(node_id=node_id, gpu_indices=tuple(indices)))
        state = JobState.RUNNING if rng.random() < 0.9 else JobState.PENDING
        jobs.append(
            Job(
                id=f"j{j}",
                state=state,
                gpus_per_worker=gpw,
                workers=1,
                placement=tuple(placement),
            )
        )
    return Snapshot(nodes=nodes, jobs=tuple(jobs))


def _placement_problems(snapshot: Snapshot) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in snapshot_problems(snapshot) if ".placement" in p.path]


@pytest.mark.parametrize("seed", range(300))
def test_placement_problems_match_a_gpu_by_gpu_walk(seed: int) -> None:
    snapshot = _random_snapshot(random.Random(seed))

    assert _placement_problems(snapshot) == _reference(snapshot)


def test_a_gpu_held_by_two_jobs_names_the_earlier_one_and_a_third_the_second() -> None:
    node = Node(id="n0", gpu_type="V100", gpus=8)
    jobs = tuple(
        Job(
            id=name,
            state=JobState.RUNNING,
            workers=len(gpus),
            placement=(Assignment(node_id="n0", gpu_indices=gpus),),
        )
        for name, gpus in (("a", (0, 1)), ("b", (1, 2)), ("c", (2, 1)))
    )

    problems = _placement_problems(Snapshot(nodes=(node,), jobs=jobs))

    assert problems == [
        ("jobs[1].placement[0].gpu_indices[0]", "GPU 1 of node 'n0' is already used by job 'a'"),
        ("jobs[2].placement[0].gpu_indices[0]", "GPU 2 of node 'n0' is already used by job 'b'"),
        ("jobs[2].placement[0].gpu_indices[1]", "GPU 1 of node 'n0' is already used by job 'b'"),
    ]


def test_a_gpu_index_far_past_the_node_is_reported_as_out_of_range() -> None:
    node = Node(id="n0", gpu_type="V100", gpus=8)
    far = Job(
        id="far",
        state=JobState.RUNNING,
        workers=2,
        placement=(Assignment(node_id="n0", gpu_indices=(0, 10**12)),),
    )

    problems = _placement_problems(Snapshot(nodes=(node,), jobs=(far,)))

    assert problems == [
        ("jobs[0].placement[0].gpu_indices[1]", "node 'n0' has GPUs 0..7, not 1000000000000")
    ]


@pytest.mark.parametrize("seed", range(20))
def test_the_check_leaves_each_jobs_position_as_the_snapshot_computes_it(seed: int) -> None:
    # The check keeps each job's index as it goes, for the orderings' tie-break; it
    # must be what `job_positions` computes, duplicates (the last index) included.
    snapshot = _random_snapshot(random.Random(seed))
    rng = random.Random(seed)
    jobs = list(snapshot.jobs)
    for _ in range(rng.randrange(3)):
        jobs.insert(rng.randrange(len(jobs) + 1), rng.choice(jobs))  # a repeated id
    checked = Snapshot(nodes=snapshot.nodes, jobs=tuple(jobs))
    unchecked = Snapshot(nodes=snapshot.nodes, jobs=tuple(jobs))

    snapshot_problems(checked)

    assert "job_positions" in checked.__dict__
    assert list(checked.job_positions.items()) == list(unchecked.job_positions.items())
