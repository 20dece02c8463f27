"""Volcano's extender plugin verbs, on payloads of the plugin's own shapes.

Volcano's scheduler types carry no JSON tags, so a session's keys are Go field names
(`UID`, `Resreq`, `ScalarResources`, `MinAvailable`, ...); GPUs count in thousandths.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings

PENDING, RUNNING = 1, 32


def resource(gpus: int) -> dict[str, Any]:
    return {
        "MilliCPU": 4000,
        "Memory": 16 * 2**30,
        "ScalarResources": {"nvidia.com/gpu": gpus * 1000},
    }


def task(job: str, index: int, gpus: int, node: str = "", status: int = PENDING) -> dict[str, Any]:
    return {
        "UID": f"{job}-{index}",
        "Job": job,
        "Name": f"{job}-{index}",
        "Namespace": "ml",
        "Resreq": resource(gpus),
        "InitResreq": resource(gpus),
        "NodeName": node,
        "Status": status,
        "Priority": 0,
        "Preemptable": True,
    }


def job(
    uid: str, tasks: list[dict[str, Any]], queue: str = "research", min_available: int = 0
) -> dict[str, Any]:
    return {
        "UID": uid,
        "Name": uid.rsplit("/", maxsplit=1)[-1],
        "Namespace": "ml",
        "Queue": queue,
        "Priority": 0,
        "MinAvailable": min_available or len(tasks),
        "Tasks": {t["UID"]: t for t in tasks},
        "CreationTimestamp": "2026-11-24T03:00:00Z",
    }


def node(name: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    allocatable = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"}
    return {
        "Name": name,
        "Node": {
            "metadata": {"name": name, "labels": labels or {}},
            "status": {
                "allocatable": allocatable,
                "capacity": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        "Allocatable": resource(gpus),
        "Capability": resource(gpus),
    }


def session(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Jobs": {j["UID"]: j for j in jobs},
        "Nodes": {n["Name"]: n for n in nodes},
        "Queues": {
            "research": {"UID": "research", "Name": "research", "Weight": 1},
            "prod": {"UID": "prod", "Name": "prod", "Weight": 3},
        },
        "NamespaceInfo": {},
        "RevocableNodes": {},
    }


def app_with(tmp_path: Path, profile: str = "fifo-backfill") -> TestClient:
    return TestClient(
        create_app(
            Settings(
                database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
                redis_url=None,
                spill_dir=tmp_path / "spill",
                log_flush_interval_s=0.05,
                volcano_profile=profile,
            )
        )
    )


@pytest.fixture
def volcano(tmp_path: Path) -> Iterator[TestClient]:
    with app_with(tmp_path) as client:
        yield client


NODES = [node("n0", 4), node("n1", 4)]
GANG = job("ml/gang", [task("ml/gang", i, 4) for i in range(2)])
TOO_BIG = job("ml/big", [task("ml/big", i, 4) for i in range(3)])


def post(client: TestClient, verb: str, body: Any) -> Any:
    response = client.post(f"/volcano/{verb}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_session_is_planned_once_and_predicates_follow_the_plan(volcano: TestClient) -> None:
    assert post(volcano, "onSessionOpen", session([GANG], NODES)) == {}
    first = task("ml/gang", 0, 4)
    for name in ("n0", "n1"):
        assert post(volcano, "predicate", {"task": first, "node": node(name, 4)}) == {
            "status": "",
            "code": 0,
        }
    scores = post(volcano, "prioritize", {"task": first, "nodes": NODES})
    assert scores == {"nodeScore": {"n0": 100.0, "n1": 100.0}, "errorMessage": ""}


def test_a_gang_that_cannot_fit_whole_fails_every_node_with_the_reason(
    volcano: TestClient,
) -> None:
    post(volcano, "onSessionOpen", session([TOO_BIG], NODES))
    answer = post(volcano, "predicate", {"task": task("ml/big", 0, 4), "node": node("n0", 4)})
    assert answer["code"] == 2  # Unschedulable
    assert "ml/big" in answer["status"]
    assert "nowhere" in answer["status"]


def test_job_enqueueable_is_the_profiles_admission(tmp_path: Path) -> None:
    """Load-threshold (Blox) admits while committed GPUs are under 1.5x capacity: with 8
    of 8 running, the first waiting job gets in (1.0), the next waits (2.0); accept-all
    enqueues both."""
    hog = job("ml/hog", [task("ml/hog", i, 4, f"n{i}", RUNNING) for i in range(2)])
    late = job("ml/late", [task("ml/late", i, 4) for i in range(2)])
    for profile, verdict in (("fifo-backfill", 1), ("load-threshold", -1)):
        with app_with(tmp_path / profile, profile) as client:
            post(client, "onSessionOpen", session([hog, GANG, late], NODES))
            assert post(client, "jobEnqueueable", {"job": GANG}) == {"status": 1}, profile
            assert post(client, "jobEnqueueable", {"job": late}) == {"status": verdict}, profile
            # a job the session did not hold: Arbiter abstains
            assert post(client, "jobEnqueueable", {"job": TOO_BIG}) == {"status": 0}


def test_job_ready_waits_for_every_planned_worker(volcano: TestClient) -> None:
    post(volcano, "onSessionOpen", session([GANG], NODES))
    half = job("ml/gang", [task("ml/gang", 0, 4, "n0", RUNNING), task("ml/gang", 1, 4)])
    assert post(volcano, "jobReady", {"job": half}) == {"status": False}
    whole = job(
        "ml/gang", [task("ml/gang", 0, 4, "n0", RUNNING), task("ml/gang", 1, 4, "n1", RUNNING)]
    )
    assert post(volcano, "jobReady", {"job": whole}) == {"status": True}


def with_estimate(entry: dict[str, Any], seconds: int) -> dict[str, Any]:
    """A task whose pod carries Arbiter's duration estimate (Volcano has none of its own)."""
    annotations = {"arbiter.io/estimated-duration-s": str(seconds)}
    return {**entry, "Pod": {"metadata": {"name": entry["Name"], "annotations": annotations}}}


def test_preemptable_names_the_tasks_of_the_jobs_the_profile_preempts(tmp_path: Path) -> None:
    long_task = with_estimate(task("ml/long", 0, 4, "n0", RUNNING), 100_000)
    short_task = with_estimate(task("ml/short", 0, 4), 60)
    sessions = session(
        [job("ml/long", [long_task]), job("ml/short", [short_task])], [node("n0", 4)]
    )
    # SRTF preempts the long job for the short one; FIFO never preempts.
    for profile, victims in (("srtf", [long_task]), ("fifo", [])):
        with app_with(tmp_path / profile, profile) as client:
            post(client, "onSessionOpen", sessions)
            answer = post(client, "preemptable", {"evictor": short_task, "evictees": [long_task]})
            assert answer == {"status": 1 if victims else -1, "victims": victims}, profile


def test_reclaimable_returns_the_loaned_server_that_costs_least(tmp_path: Path) -> None:
    loaned = {"arbiter.io/pool": "inference", "arbiter.io/loaned": "true"}
    nodes = [node("t0", 4), node("i0", 4, loaned), node("i1", 4, loaned)]
    elastic = job(
        "ml/elastic",
        [task("ml/elastic", 0, 4, "t0", RUNNING), task("ml/elastic", 1, 4, "i0", RUNNING)],
        min_available=1,
    )
    rigid = job("ml/rigid", [task("ml/rigid", 0, 4, "i1", RUNNING)])
    with app_with(tmp_path, "aryl") as client:
        post(client, "onSessionOpen", session([elastic, rigid], nodes))
        evictees = [task("ml/elastic", 1, 4, "i0", RUNNING), task("ml/rigid", 0, 4, "i1", RUNNING)]
        answer = post(
            client, "reclaimable", {"evictor": task("serve/s", 0, 4), "evictees": evictees}
        )
        assert answer["status"] == 1
        assert [v["UID"] for v in answer["victims"]] == ["ml/elastic-1"]
        # victims come back as the scheduler sent them
        assert answer["victims"][0] == evictees[0]


def test_queue_overused_compares_gpus_held_with_the_weights_share(volcano: TestClient) -> None:
    holding = job(
        "ml/hog",
        [task("ml/hog", 0, 4, "n0", RUNNING), task("ml/hog", 1, 4, "n1", RUNNING)],
        queue="research",
    )
    post(volcano, "onSessionOpen", session([holding], NODES))
    # research has weight 1 of 4: a quarter of 8 GPUs, and holds all 8
    assert post(volcano, "queueOverused", {"queue": {"Name": "research", "Weight": 1}}) == {
        "overused": True
    }
    assert post(volcano, "queueOverused", {"queue": {"Name": "prod", "Weight": 3}}) == {
        "overused": False
    }


def test_without_a_session_verbs_abstain_or_pass(volcano: TestClient) -> None:
    assert post(volcano, "onSessionClose", {}) == {}
    first = task("ml/gang", 0, 4)
    assert post(volcano, "predicate", {"task": first, "node": node("n0", 4)})["code"] == 0
    assert post(volcano, "jobEnqueueable", {"job": GANG}) == {"status": 0}
    assert post(volcano, "preemptable", {"evictor": first, "evictees": []})["status"] == 0


@pytest.mark.parametrize(
    ("verb", "body", "path"),
    [
        ("onSessionOpen", b'{"Jobs": []}', "Jobs"),
        ("predicate", b'{"task": {"UID": 1}}', "task.UID"),
        ("predicate", b'{"task": {}}', "node"),
        ("prioritize", b'{"nodes": []}', "task"),
        ("prioritize", b"not json", "body"),
    ],
)
def test_unreadable_payloads_are_a_422_naming_the_field(
    volcano: TestClient, verb: str, body: bytes, path: str
) -> None:
    response = volcano.post(
        f"/volcano/{verb}", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
    assert [p["path"] for p in response.json()["problems"]] == [path]


def test_the_spec_requires_what_the_per_task_verbs_need(volcano: TestClient) -> None:
    schemas = volcano.get("/openapi.json").json()["components"]["schemas"]

    assert set(schemas["PredicateRequest"]["required"]) == {"task", "node"}
    assert schemas["PrioritizeRequest"]["required"] == ["task"]


@pytest.mark.parametrize("verb", ["preemptable", "reclaimable"])
def test_an_evictee_that_is_not_a_task_is_a_422_naming_it(volcano: TestClient, verb: str) -> None:
    # Found by `make fuzz`: with a session open, `[null]` as evictees was a server error.
    post(volcano, "onSessionOpen", session([GANG], NODES))
    response = volcano.post(
        f"/volcano/{verb}", json={"evictor": task("ml/gang", 0, 4), "evictees": [None]}
    )

    assert response.status_code == 422, response.text
    assert "evictees[0]" in response.json()["detail"]
