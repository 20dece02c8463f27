"""A what-if run from a cluster's current state (simulator.state): the running jobs keep
their GPUs from the first instant, the waiting ones wait, arrivals come after."""

from __future__ import annotations

import pytest

from policies.model import Assignment, Job, JobState, Node, Snapshot, Topology
from simulator.deciders import EngineDecider
from simulator.runner import RunConfig, build_simulation
from simulator.state import StateError, start_state
from simulator.traces import trace_from_rows
from simulator.workload import WorkloadOptions

IDEAL = RunConfig(perf_mode="ideal", seed=1)


def snapshot() -> Snapshot:
    nodes = (
        Node(id="a", gpu_type="V100", gpus=4, topology=Topology(rack="r0")),
        Node(id="down", gpu_type="V100", gpus=4, healthy=False),
        Node(id="b", gpu_type="V100", gpus=4, topology=Topology(rack="r0")),
    )
    jobs = (
        Job(
            id="half-done",
            state=JobState.RUNNING,
            workers=2,
            placement=(Assignment(node_id="b", gpu_indices=(2, 3)),),
            estimated_duration_s=1000.0,
            total_work=10.0,
            work_done=5.0,
        ),
        Job(id="waiting", workers=4, estimated_duration_s=100.0),
    )
    return Snapshot(cluster_id="c", now=9000.0, nodes=nodes, jobs=jobs)


def test_the_cluster_is_the_nodes_that_take_training_work() -> None:
    start = start_state(snapshot(), [], WorkloadOptions())

    (group,) = start.cluster.node_groups
    assert (group.count, group.gpus, group.rack_size) == (2, 4, 2)


def test_a_running_job_holds_its_gpus_when_the_run_begins() -> None:
    start = start_state(snapshot(), [], WorkloadOptions())
    sim = build_simulation(start.jobs, start.cluster, IDEAL, start.placements)

    first = sim.reset()

    assert first is not None
    job = first.jobs_by_id["half-done"]
    assert job.state is JobState.RUNNING
    built_b = start.cluster.build_nodes()[1].id  # `b` is the second node kept
    assert job.placement == (Assignment(node_id=built_b, gpu_indices=(2, 3)),)
    assert first.jobs_by_id["waiting"].state is JobState.PENDING


def test_work_left_is_the_estimate_less_the_progress() -> None:
    start = start_state(snapshot(), [], WorkloadOptions())

    assert [(j.id, j.duration_s, j.submit_time) for j in start.jobs] == [
        ("half-done", 500.0, 0.0),
        ("waiting", 100.0, 0.0),
    ]


def test_a_running_job_finishes_when_its_work_left_is_done() -> None:
    start = start_state(snapshot(), [], WorkloadOptions())
    sim = build_simulation(start.jobs, start.cluster, IDEAL, start.placements)

    result = sim.run(EngineDecider.named("fifo"))

    records = {r.job_id: r for r in result.jobs}
    assert records["half-done"].first_start_s == 0.0
    assert records["half-done"].finish_s == 500.0
    assert records["half-done"].restarts == 0


def test_arrivals_come_after_the_snapshots_jobs_counted_from_its_instant() -> None:
    rows = [{"job_id": "later", "submit_time_s": 60, "num_gpus": 1, "duration_s": 30}]

    start = start_state(snapshot(), trace_from_rows(rows), WorkloadOptions())

    assert [(j.index, j.id, j.submit_time) for j in start.jobs][-1] == (2, "later", 60.0)


def test_a_job_without_an_estimate_cannot_be_simulated() -> None:
    base = snapshot()
    jobs = (base.jobs[0], Job(id="unknown-length", workers=1))
    broken = Snapshot(cluster_id="c", nodes=base.nodes, jobs=jobs)

    with pytest.raises(StateError) as refused:
        start_state(broken, [], WorkloadOptions())

    assert [p for p, _ in refused.value.problems] == ["snapshot.jobs[1].estimated_duration_s"]
