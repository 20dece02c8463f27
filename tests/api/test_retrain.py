"""Retraining and model swaps on embedded defaults (SQLite, in-process cache).

Without Redis the service runs each retraining in a local process of its own;
replicas (here: the one process) learn of a new active version from the database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from policies.learned.dl2.shipped import shipped_bytes
from storage.db import create_engine_for, make_sessionmaker
from storage.repositories import ModelVersionRepository
from tests.api.retrain_helpers import (
    AUTH,
    TINY_BUDGET,
    finished_job,
    log_decisions,
    poll,
    scaling_version,
)


def test_retrain_without_redis_runs_in_a_local_process_and_the_service_swaps_to_it(
    client: TestClient,
) -> None:
    log_decisions(client)
    # The caller reports two of the four logged jobs finished; j1's event measures no run.
    events = [
        {"job_id": "j0", "started_at": 1000.0, "finished_at": 1450.0},
        {"job_id": "j1", "finished_at": 1800.0},
    ]
    feedback = {
        "events": [
            {"event_id": f"retrain:{e['job_id']}", "kind": "job_finished", "cluster_id": "retrain"}
            | e
            for e in events
        ]
    }
    assert client.post("/v1/feedback", json=feedback).status_code == 202
    assert client.app.state.decision_log.flush(timeout_s=30.0)  # type: ignore[attr-defined]
    before = scaling_version(client)

    response = client.post(
        "/admin/retrain",
        json={
            "policy": "dl2",
            "profile": "drf",
            "budget": TINY_BUDGET,
            "activate": "always",
            "seed": 1,
        },
        headers=AUTH,
    )

    assert response.status_code == 202
    started = response.json()
    assert response.headers["location"] == f"/admin/retrain/{started['id']}"
    assert started["status"] == "queued"
    job = finished_job(client, started["id"])
    assert job["status"] == "succeeded", job["error"]
    assert job["progress"] == {"stage": "storing", "fraction": 1.0}
    assert job["metrics"]["activated"] is True
    assert job["metrics"]["records"] == 3
    # Three decisions on four jobs fill no 8-job episode: RL played the shared traces.
    assert job["metrics"]["rl_episodes"] == "shared-traces"
    assert job["metrics"]["logged_jobs"] == 4
    assert job["metrics"]["logged_jobs_measured"] == 1  # j0 runs its 450 s when replayed
    assert job["metrics"]["logged_jobs_interrupted"] == 0
    assert job["started_at"] is not None
    assert job["finished_at"] is not None
    assert before.startswith("1+shipped-")
    version = job["version"]
    poll(
        lambda: True if scaling_version(client) == f"1+{version}" else None,
        "the service to serve the new version",
    )
    models = client.get("/admin/models", params={"policy": "dl2"}, headers=AUTH).json()
    policies = client.get("/v1/policies").json()
    assert [(m["version"], m["active"]) for m in models] == [(version, True)]
    assert next(p for p in policies if p["name"] == "dl2")["model_version"] == version
    meta = models[0]["metadata"]
    assert meta["parent"] == before.removeprefix("1+")
    assert meta["retrain_job"] == started["id"]
    assert meta["window"] == {"since": None, "until": None, "profile": "drf", "records": 3}
    assert meta["metrics"]["incumbent_version"] == meta["parent"]


def test_a_retrain_is_also_judged_on_the_clusters_newest_logged_jobs(
    client: TestClient,
) -> None:
    log_decisions(client)  # four jobs of one cluster: two windows of two

    response = client.post(
        "/admin/retrain",
        json={"policy": "dl2", "budget": {**TINY_BUDGET, "jobs": 2}, "activate": "if_better"},
        headers=AUTH,
    )

    job = finished_job(client, response.json()["id"])
    assert job["status"] == "succeeded", job["error"]
    metrics = job["metrics"]
    assert (metrics["logged_episodes"], metrics["log_verdict_episodes"]) == (2, 1)
    assert metrics["rl_episodes"] == "logged"
    both = metrics["improvement"] > 0 and metrics["log_verdict_improvement"] > 0
    assert metrics["candidate_wins"] is (
        both
        and metrics["candidate_fallbacks"] <= metrics["incumbent_fallbacks"]
        and metrics["log_verdict_candidate_fallbacks"] <= metrics["log_verdict_incumbent_fallbacks"]
    )
    assert metrics["activated"] is metrics["candidate_wins"]


def test_a_version_activated_without_a_message_is_picked_up_by_the_periodic_check(
    tmp_path: Path, settings: Settings
) -> None:
    quick = settings.model_copy(update={"models_check_interval_s": 0.1})
    with TestClient(create_app(quick)) as client:
        before = scaling_version(client)
        # Written straight to the database, as a process on another cache would:
        # no message reaches this service, only its periodic check can tell.
        engine = create_engine_for(settings.database_url)
        with make_sessionmaker(engine).begin() as session:
            ModelVersionRepository(session).add("dl2", "by-hand", shipped_bytes(), activate=True)
        engine.dispose()

        poll(
            lambda: True if scaling_version(client) == "1+by-hand" else None,
            "the periodic check to load the version",
        )
        ready = client.get("/readyz").json()

    assert before.startswith("1+shipped-")
    assert "dl2: by-hand (from database)" in ready["components"]["models"]["detail"].split("; ")


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"policy": "fifo"}, "policy"),
        ({"policy": "dl2", "budget": {"updates": -1}}, "budget.updates"),
        ({"policy": "dl2", "budget": {"held_out_episodes": 0}}, "budget.held_out_episodes"),
        ({"policy": "dl2", "activate": "sometimes"}, "activate"),
        ({"policy": "dl2", "window": {"since": "yesterday"}}, "window.since"),
        (
            {
                "policy": "dl2",
                "window": {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            },
            "window.until",
        ),
        ({"policy": "dl2", "steps": 3, "budget": {"updates": 5}}, "steps"),
        ({"policy": "dl2", "surprise": 1}, "surprise"),
    ],
)
def test_bad_retrain_requests_are_422_naming_the_field(
    client: TestClient, body: dict[str, Any], path: str
) -> None:
    log_decisions(client, count=1)

    response = client.post("/admin/retrain", json=body, headers=AUTH)

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == path


def test_a_window_with_no_logged_decision_is_422(client: TestClient) -> None:
    log_decisions(client, count=1)

    future = client.post(
        "/admin/retrain",
        json={"policy": "dl2", "window": {"since": "2999-01-01T00:00:00Z"}},
        headers=AUTH,
    )
    other_profile = client.post(
        "/admin/retrain", json={"policy": "dl2", "profile": "tiresias"}, headers=AUTH
    )

    for response in (future, other_profile):
        assert response.status_code == 422
        assert response.json()["problems"][0]["path"] == "window"
    assert "tiresias" in other_profile.json()["detail"]


def test_an_unknown_retrain_job_is_404(client: TestClient) -> None:
    response = client.get("/admin/retrain/no-such-job", headers=AUTH)

    assert response.status_code == 404
    assert "no-such-job" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path"), [("post", "/admin/retrain"), ("get", "/admin/retrain/any")]
)
def test_retrain_endpoints_refuse_missing_and_wrong_tokens(
    client: TestClient, method: str, path: str
) -> None:
    body = {"policy": "dl2"}
    missing = client.request(method, path, json=body)
    wrong = client.request(
        method, path, json=body, headers={"authorization": "Bearer not-the-right-token-at-all"}
    )

    assert missing.status_code == 401
    assert missing.json()["error"] == "unauthorized"
    assert wrong.status_code == 403
    assert wrong.json()["error"] == "forbidden"


def test_the_trainer_registry_lists_every_retrainable_policy_with_its_budget_schema(
    client: TestClient,
) -> None:
    listed = client.get("/admin/trainers", headers=AUTH).json()

    by_name = {trainer["name"]: trainer for trainer in listed}
    assert "dl2" in by_name
    for trainer in listed:
        fields = trainer["budget"]["properties"]
        # The fields every budget shares, so `steps` and the record cap mean one thing.
        assert {"updates", "held_out_episodes", "max_records"} <= set(fields)
        assert trainer["stages"]
    assert by_name["dl2"]["budget"]["properties"]["imitation_epochs"]["default"] == 20


def test_a_budget_field_another_policy_has_is_422_for_this_one(client: TestClient) -> None:
    log_decisions(client, count=1)

    response = client.post(
        "/admin/retrain", json={"policy": "dl2", "budget": {"no_such_field": 1}}, headers=AUTH
    )

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "budget.no_such_field"
