"""POST /v1/simulate: the simulator's metrics per profile, bounded, off the event loop."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from policies.model import Snapshot, decode
from simulator.cluster import cluster_from_json
from simulator.paths import clusters_dir, traces_dir
from simulator.runner import RunConfig, simulate, simulate_jobs
from simulator.state import start_state
from simulator.traces import COLUMNS, read_trace, trace_from_rows
from simulator.workload import WorkloadOptions

CLUSTER: dict[str, Any] = {
    "name": "two-nodes",
    "node_groups": [
        {
            "count": 2,
            "gpus": 4,
            "gpu_type": "V100",
            "gpu_memory_gb": 32,
            "cpus": 32,
            "memory_gb": 256,
            "rack_size": 2,
            "price_per_gpu_hour": 2.48,
        }
    ],
}
ROWS: list[dict[str, Any]] = [
    {"job_id": "long", "submit_time_s": 0, "num_gpus": 8, "duration_s": 3600},
    {"job_id": "mid", "submit_time_s": 10, "num_gpus": 8, "duration_s": 600, "user": "ann"},
    {"job_id": "short", "submit_time_s": 20, "num_gpus": 8, "duration_s": 60},
]


def settings_for(tmp_path: Path, **overrides: Any) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
        **overrides,
    )


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # One app (and one worker process, started once) for the module.
    with TestClient(create_app(settings_for(tmp_path_factory.mktemp("sim")))) as test_client:
        yield test_client


def test_simulate_answers_the_simulators_own_metrics_per_profile(client: TestClient) -> None:
    body = {"trace": ROWS, "cluster": CLUSTER, "profiles": ["fifo", "sjf"], "seed": 3}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["profile"] for r in results] == ["fifo", "sjf"]
    expected = simulate(
        trace_from_rows(ROWS),
        cluster_from_json(CLUSTER),
        ["fifo", "sjf"],
        RunConfig(seed=3),
    )
    for got, run in zip(results, expected, strict=True):
        timings = {
            "decision_ms_p50",
            "decision_ms_p99",
            "sim_wall_s",
            "decide_wall_s",
            "jobs_per_s",
            "decisions_per_s",
        }
        assert {k: v for k, v in got.items() if k not in timings | {"profile"}} == {
            k: v for k, v in run.result.metrics.items() if k not in timings
        }
        assert got["jobs"] == 3
        assert got["jobs_completed"] == 3
    # both wait for the long job; SJF then runs the short one first, FIFO the mid one
    assert results[1]["avg_jct_s"] < results[0]["avg_jct_s"]


def test_a_shared_trace_window_runs_as_rows(client: TestClient) -> None:
    rows = [
        {k: v for k, v in vars_of(job).items() if v not in (None, "")}
        for job in read_trace(traces_dir() / "philly.2w-2017-10-02.csv", 40)
    ]
    cluster = json.loads((clusters_dir() / "philly.json").read_text())
    response = client.post(
        "/v1/simulate", json={"trace": rows, "cluster": cluster, "profiles": ["tiresias"]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["jobs"] == 40


def vars_of(job: Any) -> dict[str, Any]:
    """A trace job as its row (the schema's columns but the wall-clock date)."""
    return {name: getattr(job, name) for name in COLUMNS if name != "submit_datetime"}


def test_more_rows_than_the_limit_is_a_422_naming_it(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path, simulate_max_jobs=2))) as small:
        response = small.post(
            "/v1/simulate", json={"trace": ROWS, "cluster": CLUSTER, "profiles": ["fifo"]}
        )
    assert response.status_code == 422
    problem = response.json()["problems"][0]
    assert problem["path"] == "trace"
    assert "ARBITER_SIMULATE_MAX_JOBS" in problem["message"]


def test_a_cluster_spec_of_more_nodes_than_the_limit_is_a_422_naming_it(
    client: TestClient,
) -> None:
    # A few bytes of spec can ask for a billion nodes: refused before any worker builds them.
    group = {**CLUSTER["node_groups"][0], "count": 1_000_000_000}
    huge = {**CLUSTER, "node_groups": [group]}

    response = client.post(
        "/v1/simulate", json={"trace": ROWS, "cluster": huge, "profiles": ["fifo"]}
    )

    assert response.status_code == 422
    assert response.json()["problems"] == [
        {
            "path": "cluster.node_groups",
            "message": "1,000,000,000 nodes; at most 20,000 (ARBITER_MAX_NODES)",
        }
    ]


def test_a_snapshot_of_more_nodes_than_the_limit_is_a_422_naming_it(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path, max_nodes=1))) as small:
        response = small.post(
            "/v1/simulate",
            json={"snapshot": state_snapshot(), "arrivals": ARRIVALS, "profiles": ["fifo"]},
        )

    assert response.status_code == 422
    assert response.json()["problems"] == [
        {"path": "snapshot.nodes", "message": "2 nodes; at most 1 (ARBITER_MAX_NODES)"}
    ]


def test_a_run_past_the_time_limit_stops_with_a_422_naming_it(tmp_path: Path) -> None:
    rows = [
        {"job_id": f"j{i}", "submit_time_s": i, "num_gpus": 1 + i % 8, "duration_s": 50 + i}
        for i in range(400)
    ]
    settings = settings_for(tmp_path, simulate_timeout_s=0.001)
    with TestClient(create_app(settings)) as hurried:
        response = hurried.post(
            "/v1/simulate", json={"trace": rows, "cluster": CLUSTER, "profiles": ["fifo"]}
        )
    assert response.status_code == 422
    assert "ARBITER_SIMULATE_TIMEOUT_S" in response.json()["detail"]


def test_a_traces_own_cluster_description_is_refused_naming_the_spec(
    client: TestClient,
) -> None:
    description = json.loads((traces_dir() / "philly.cluster.json").read_text())
    response = client.post(
        "/v1/simulate", json={"trace": ROWS, "cluster": description, "profiles": ["fifo"]}
    )
    assert response.status_code == 422
    problems = response.json()["problems"]
    assert len(problems) == 1
    assert problems[0]["path"] == "cluster"
    assert "shared/clusters/philly.json" in problems[0]["message"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"trace": [ROWS[1], ROWS[0]]}, "trace[1].submit_time_s"),
        ({"trace": [{**ROWS[0], "num_gpus": 0}]}, "trace[0].num_gpus"),
        ({"workload": {"model_mix": "no-such-model"}}, "workload"),
        ({"profiles": []}, "profiles"),
        ({"round_period_s": 0.001}, "round_period_s"),
    ],
)
def test_bad_input_is_a_422_at_its_path(
    client: TestClient, change: dict[str, Any], path: str
) -> None:
    body = {"trace": ROWS, "cluster": CLUSTER, "profiles": ["fifo"], **change}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == path


def test_an_unknown_profile_is_a_404(client: TestClient) -> None:
    response = client.post(
        "/v1/simulate", json={"trace": ROWS, "cluster": CLUSTER, "profiles": ["nope"]}
    )
    assert response.status_code == 404


def test_decisions_do_not_wait_behind_a_simulation(client: TestClient) -> None:
    rows = [
        {"job_id": f"j{i}", "submit_time_s": i * 5, "num_gpus": 1 + i % 4, "duration_s": 300}
        for i in range(300)
    ]
    body = {"trace": rows, "cluster": CLUSTER, "profiles": ["tiresias", "srtf"]}
    outcome: dict[str, Any] = {}

    def run() -> None:
        started = time.perf_counter()
        outcome["status"] = client.post("/v1/simulate", json=body).status_code
        outcome["seconds"] = time.perf_counter() - started

    simulation = threading.Thread(target=run)
    simulation.start()
    time.sleep(0.3)  # the simulation is under way in its worker process
    decided: list[int] = []
    while simulation.is_alive() and len(decided) < 20:
        decision = client.post(
            "/v1/decisions",
            json={
                "profile": "fifo",
                "snapshot": {"nodes": [{"id": "n", "gpu_type": "V100", "gpus": 4}]},
            },
        )
        decided.append(decision.status_code)
    simulation.join()
    assert outcome["status"] == 200
    assert decided, "the simulation ended before any decision was asked"
    assert set(decided) == {200}


def state_snapshot() -> dict[str, Any]:
    """Two nodes: `long` runs on n0 half done, `wide` waits for both nodes."""
    return {
        "cluster_id": "now",
        "now": 5000.0,
        "nodes": [
            {"id": "n0", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}},
            {"id": "n1", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}},
        ],
        "jobs": [
            {
                "id": "long",
                "state": "running",
                "workers": 4,
                "submit_time": 1000.0,
                "placement": [{"node_id": "n0", "gpu_indices": [0, 1, 2, 3]}],
                "estimated_duration_s": 3600,
                "total_work": 100,
                "work_done": 50,
            },
            {"id": "wide", "workers": 8, "submit_time": 4000.0, "estimated_duration_s": 600},
        ],
    }


ARRIVALS: list[dict[str, Any]] = [
    {"job_id": "next", "submit_time_s": 30, "num_gpus": 2, "duration_s": 60},
]


def test_a_snapshot_and_its_arrivals_run_from_the_clusters_state(client: TestClient) -> None:
    body = {"snapshot": state_snapshot(), "arrivals": ARRIVALS, "profiles": ["fifo", "sjf"]}
    response = client.post("/v1/simulate", json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    start = start_state(
        decode(orjson.dumps(state_snapshot()), Snapshot),
        trace_from_rows(ARRIVALS),
        WorkloadOptions(),
    )
    expected = simulate_jobs(
        start.jobs, start.cluster, ["fifo", "sjf"], RunConfig(), initial_placements=start.placements
    )
    timings = {"decision_ms_p50", "decision_ms_p99", "sim_wall_s", "decide_wall_s"}
    timings |= {"jobs_per_s", "decisions_per_s"}
    for got, run in zip(results, expected, strict=True):
        assert {k: v for k, v in got.items() if k not in timings | {"profile"}} == {
            k: v for k, v in run.result.metrics.items() if k not in timings
        }
        assert got["jobs"] == 3
        assert got["jobs_completed"] == 3


@pytest.mark.parametrize(
    ("body", "paths"),
    [
        ({"trace": ROWS, "cluster": CLUSTER, "snapshot": {}}, {"trace", "cluster"}),
        ({}, {"trace", "cluster"}),
        ({"trace": ROWS, "cluster": CLUSTER, "arrivals": ARRIVALS}, {"arrivals"}),
        ({"snapshot": {"nodes": []}, "cluster": CLUSTER}, {"cluster"}),
    ],
)
def test_a_request_takes_a_trace_on_a_cluster_or_a_snapshot_not_both(
    client: TestClient, body: dict[str, Any], paths: set[str]
) -> None:
    response = client.post("/v1/simulate", json={**body, "profiles": ["fifo"]})

    assert response.status_code == 422
    assert {p["path"] for p in response.json()["problems"]} == paths


def test_a_snapshot_job_without_an_estimate_is_a_422_naming_the_field(
    client: TestClient,
) -> None:
    snapshot = state_snapshot()
    del snapshot["jobs"][1]["estimated_duration_s"]

    response = client.post("/v1/simulate", json={"snapshot": snapshot, "profiles": ["fifo"]})

    assert response.status_code == 422
    (problem,) = response.json()["problems"]
    assert problem["path"] == "snapshot.jobs[1].estimated_duration_s"
    assert "required to simulate" in problem["message"]


def test_a_snapshot_lists_its_field_and_cross_field_problems_at_once(
    client: TestClient,
) -> None:
    snapshot = state_snapshot()
    snapshot["nodes"][1]["gpus"] = "four"
    snapshot["jobs"][1]["id"] = "long"
    body = {"snapshot": snapshot, "arrivals": [{**ARRIVALS[0], "num_gpus": 0}]}

    response = client.post("/v1/simulate", json={**body, "profiles": ["fifo"]})

    assert response.status_code == 422
    paths = {p["path"] for p in response.json()["problems"]}
    assert {"snapshot.nodes[1].gpus", "snapshot.jobs[1].id"} <= paths


def test_an_arrival_with_a_snapshot_jobs_id_is_a_422(client: TestClient) -> None:
    body = {"snapshot": state_snapshot(), "arrivals": [{**ARRIVALS[0], "job_id": "wide"}]}

    response = client.post("/v1/simulate", json={**body, "profiles": ["fifo"]})

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "arrivals[0].job_id"


def test_more_jobs_and_arrivals_than_the_limit_is_a_422_naming_it(tmp_path: Path) -> None:
    body = {"snapshot": state_snapshot(), "arrivals": ARRIVALS, "profiles": ["fifo"]}
    with TestClient(create_app(settings_for(tmp_path, simulate_max_jobs=2))) as small:
        response = small.post("/v1/simulate", json=body)
    assert response.status_code == 422
    problem = response.json()["problems"][0]
    assert problem["path"] == "snapshot.jobs"
    assert "3 jobs and arrivals; at most 2 (ARBITER_SIMULATE_MAX_JOBS)" in problem["message"]
