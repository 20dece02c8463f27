"""Decision-log records to simulated episodes: jobs, windows, cluster, what is skipped."""

from __future__ import annotations

from typing import Any

import pytest

from policies.model import ScalingRule, Snapshot, convert
from simulator.perf import GENERIC
from training.dl2.logged import FINISHED, logged_episodes, simulated_family

NODES = [
    {"id": f"n{i}", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}} for i in range(2)
]


def job(job_id: str, submit_time: float, **fields: object) -> dict[str, Any]:
    return {"id": job_id, "submit_time": submit_time, "estimated_duration_s": 600.0, **fields}


def record(
    jobs: list[dict[str, Any]],
    *,
    nodes: list[dict[str, Any]] | None = None,
    cluster_id: str = "east",
    now: float = 0.0,
    finished: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A logged (snapshot, decision) pair as the log stores it: JSON, validated on the way in;
    `finished`: the `job_finished` payloads the repository joins to it, by job id."""
    snapshot = {"cluster_id": cluster_id, "now": now, "nodes": nodes or NODES, "jobs": jobs}
    convert(snapshot, Snapshot)
    decision: dict[str, Any] = {"decision_id": "d"}
    if finished is not None:
        decision[FINISHED] = finished
    return snapshot, decision


def finish(started_at: float | None, finished_at: float, **fields: object) -> dict[str, Any]:
    """A `job_finished` event's payload as the feedback log stores it."""
    return {"started_at": started_at, "finished_at": finished_at, "outcome": "completed", **fields}


def running(job_id: str, submit_time: float, gpus: int = 1, **fields: object) -> dict[str, Any]:
    """A job running on `gpus` GPUs of node n0 (one worker of one GPU asked unless `fields`)."""
    placement = [{"node_id": "n0", "gpu_indices": list(range(gpus))}]
    return job(job_id, submit_time, state="running", placement=placement, **fields)


def test_a_job_seen_in_many_snapshots_becomes_one_simulated_job_as_first_seen() -> None:
    first = job(
        "a",
        100.0,
        workers=2,
        min_workers=1,
        max_workers=8,
        scaling_rule="power_of_two",
        gpus_per_worker=2,
        ps=1,
        max_ps=3,
        tenant="vision",
        model="ResNet-50",
    )
    later = {**first, "workers": 4, "max_workers": 4, "estimated_duration_s": 9999.0}
    records = [record([first]), record([later, job("b", 160.0)])]

    found = logged_episodes(records, jobs_per_episode=2)

    assert found.jobs == 2
    (episode,) = found.episodes
    a, b = episode.job_specs()
    assert (a.id, b.id) == ("a", "b")
    assert (a.workers, a.min_workers, a.max_workers) == (2, 1, 8)
    assert a.scaling_rule is ScalingRule.POWER_OF_TWO
    assert (a.gpus_per_worker, a.ps, a.max_ps) == (2, 1, 3)
    assert (a.tenant, a.family) == ("vision", "resnet50")
    assert a.duration_s == a.estimate_s == 600.0
    assert (b.min_workers, b.max_workers, b.family) == (1, 1, GENERIC)


def test_each_window_of_jobs_is_rebased_to_start_at_time_zero() -> None:
    jobs = [job(f"j{i}", t) for i, t in enumerate([5000.0, 5100.0, 5400.0, 5460.0, 9000.0])]
    records = [record(jobs[:3]), record(jobs[2:])]

    found = logged_episodes(records, jobs_per_episode=2, seed=7)

    assert [[j.submit_time for j in e.job_specs()] for e in found.episodes] == [
        [0.0, 100.0],
        [0.0, 60.0],
    ]
    assert [[j.id for j in e.job_specs()] for e in found.episodes] == [["j0", "j1"], ["j2", "j3"]]
    assert [[j.index for j in e.job_specs()] for e in found.episodes] == [[0, 1], [0, 1]]
    assert [e.seed for e in found.episodes] == [7, 8]
    assert found.left_over == 1
    assert found.clusters == ("east",)


def test_jobs_without_any_logged_work_are_skipped_and_counted() -> None:
    no_work = {"id": "none", "submit_time": 10.0}
    late_estimate = {"id": "late", "submit_time": 20.0}
    records = [
        record([no_work, late_estimate, job("x", 30.0)]),
        record([no_work, {**late_estimate, "estimated_duration_s": 1200.0}, job("x", 30.0)]),
        record([job("y", 40.0, estimated_duration_s=None, total_work=900.0)]),
    ]

    found = logged_episodes(records, jobs_per_episode=3)

    assert (found.jobs, found.skipped) == (3, 1)
    (episode,) = found.episodes
    assert {j.id: j.duration_s for j in episode.job_specs()} == {
        "late": 1200.0,
        "x": 600.0,
        "y": 900.0,
    }


def test_the_duration_estimate_is_preferred_to_work_in_unknown_units() -> None:
    records = [record([job("a", 0.0, estimated_duration_s=300.0, total_work=50.0)])]

    (episode,) = logged_episodes(records, jobs_per_episode=1).episodes

    assert episode.job_specs()[0].duration_s == 300.0


def test_long_logged_jobs_are_capped_like_trace_windows() -> None:
    records = [record([job("a", 0.0, estimated_duration_s=86_400.0)])]

    (episode,) = logged_episodes(records, jobs_per_episode=1, max_duration_s=3600.0).episodes

    assert episode.job_specs()[0].duration_s == 3600.0


def test_the_cluster_is_the_latest_snapshots_training_gpu_nodes() -> None:
    old = [NODES[0]]
    latest = [
        *NODES,
        {"id": "big", "gpu_type": "A100", "gpus": 8, "topology": {"rack": "r1"}},
        {"id": "serve", "gpu_type": "T4", "gpus": 1, "pool": "inference"},
        {"id": "cpu", "gpu_type": "none", "gpus": 0},
    ]
    records = [record([job("a", 0.0)], nodes=old), record([job("b", 1.0)], nodes=latest)]

    (episode,) = logged_episodes(records, jobs_per_episode=2).episodes
    cluster = episode.cluster_spec()

    assert cluster.name == "east"
    assert [(g.gpu_type, g.count, g.gpus, g.rack_size) for g in cluster.node_groups] == [
        ("V100", 2, 4, 2),
        ("A100", 1, 8, 1),
    ]
    assert cluster.training_gpus() == 16


def test_clusters_are_kept_apart() -> None:
    other_nodes = [{"id": "m0", "gpu_type": "A100", "gpus": 8}]
    records = [
        record([job("a", 0.0), job("b", 5.0)]),
        record([job("a", 3.0), job("c", 4.0)], nodes=other_nodes, cluster_id="west"),
    ]

    found = logged_episodes(records, jobs_per_episode=2)

    assert found.clusters == ("east", "west")
    east, west = found.episodes
    assert [j.id for j in east.job_specs()] == ["a", "b"]
    assert [j.id for j in west.job_specs()] == ["a", "c"]
    assert west.cluster_spec().node_groups[0].gpu_type == "A100"


def test_jobs_of_a_cluster_without_gpu_nodes_are_skipped() -> None:
    records = [record([job("a", 0.0)], nodes=[{"id": "cpu", "gpu_type": "none", "gpus": 0}])]

    found = logged_episodes(records, jobs_per_episode=1)

    assert (found.episodes, found.jobs, found.skipped) == ((), 0, 1)


def test_snapshot_models_and_their_json_give_the_same_episodes() -> None:
    records = [record([job("a", 0.0), job("b", 10.0, max_workers=2)]), record([job("c", 20.0)])]
    as_models = [(convert(s, Snapshot), d) for s, d in records]

    assert logged_episodes(as_models, 3) == logged_episodes(records, 3)


@pytest.mark.parametrize(
    ("model", "family"),
    [("resnet50", "resnet50"), ("ResNet-18", "resnet18"), ("BERT", "bert"), ("my-llm", GENERIC)],
)
def test_logged_models_map_to_simulated_families_or_the_generic_one(
    model: str, family: str
) -> None:
    assert simulated_family(model) == family


def test_a_reported_finish_replaces_the_estimate_while_schedulers_still_see_the_estimate() -> None:
    records = [
        record([job("a", 100.0)]),
        record([running("a", 100.0)], finished={"a": finish(150.0, 1050.0)}),
        record([job("b", 200.0)]),
    ]

    found = logged_episodes(records, jobs_per_episode=2)

    (episode,) = found.episodes
    a, b = episode.job_specs()
    assert (a.duration_s, a.estimate_s) == (900.0, 600.0)
    assert (b.duration_s, b.estimate_s) == (600.0, 600.0)
    assert (found.measured, found.interrupted) == (1, 0)


@pytest.mark.parametrize("outcome", ["failed", "killed"], ids=["a failed job", "a killed job"])
def test_a_job_that_ended_without_completing_runs_as_long_as_it_held_its_gpus(
    outcome: str,
) -> None:
    records = [record([running("a", 0.0)], finished={"a": finish(10.0, 70.0, outcome=outcome)})]

    (episode,) = logged_episodes(records, jobs_per_episode=1).episodes

    assert episode.job_specs()[0].duration_s == 60.0


@pytest.mark.parametrize(
    "sightings",
    [
        [running("a", 0.0), job("a", 0.0), running("a", 0.0)],
        [running("a", 0.0), job("a", 0.0, state="suspended")],
        [running("a", 0.0, gpus=2)],
        [
            running("a", 0.0, min_workers=1, max_workers=4),
            running("a", 0.0, gpus=3, workers=1, min_workers=1, max_workers=4),
        ],
    ],
    ids=["preempted and resumed", "suspended", "on more GPUs than asked", "grown"],
)
def test_a_job_the_log_shows_preempted_or_resized_keeps_its_estimate(
    sightings: list[dict[str, Any]],
) -> None:
    records = [record([sighting]) for sighting in sightings]
    records.append(record([], finished={"a": finish(0.0, 5000.0)}))
    records[-1][0]["jobs"] = [sightings[-1]]

    found = logged_episodes(records, jobs_per_episode=1)

    (episode,) = found.episodes
    assert episode.job_specs()[0].duration_s == 600.0
    assert (found.measured, found.interrupted) == (0, 1)


def test_a_job_that_logged_no_work_is_simulated_from_its_measured_run() -> None:
    unknown = {
        "id": "u",
        "submit_time": 0.0,
        "state": "running",
        "placement": [{"node_id": "n0", "gpu_indices": [0]}],
    }
    records = [record([unknown], finished={"u": finish(5.0, 305.0)})]

    found = logged_episodes(records, jobs_per_episode=1)

    (episode,) = found.episodes
    spec = episode.job_specs()[0]
    assert (spec.duration_s, spec.estimate_s) == (300.0, 300.0)
    assert (found.jobs, found.skipped, found.measured) == (1, 0, 1)


@pytest.mark.parametrize(
    "event",
    [finish(None, 500.0), finish(500.0, 500.0), finish(900.0, 100.0), {"finished_at": "soon"}],
    ids=["no start", "no span", "ends before it starts", "not a number"],
)
def test_a_finish_that_measures_no_run_leaves_the_estimate(event: dict[str, Any]) -> None:
    records = [record([running("a", 0.0)], finished={"a": event})]

    found = logged_episodes(records, jobs_per_episode=1)

    assert found.episodes[0].job_specs()[0].duration_s == 600.0
    assert found.measured == 0
