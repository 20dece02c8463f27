"""Every learned policy of the trainer registry retrains end to end on PostgreSQL and Redis.

The same path for each: `POST /admin/retrain` with a tiny budget of the policy's own
schema, the job queued on Redis, run by `arbiter worker --burst`, the version stored
in PostgreSQL, activated, and served by the replica.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from rq import Queue

from app.main import create_app
from simulator.accelerator.cli import simulate
from simulator.accelerator.dispatchers import HttpDispatcher
from tests.api.retrain_helpers import AUTH, TINY_BUDGET, finished_job, log_decisions
from tests.api.test_retrain_on_postgres_and_redis import _run_worker, _settings
from training.registry import trainers

TINY_BUDGETS: dict[str, dict[str, Any]] = {
    "dl2": TINY_BUDGET,
    "dl2-srtf": TINY_BUDGET,
    "dual-agent": {
        "updates": 1,
        "epochs": 1,
        "jobs": 8,
        "held_out_episodes": 1,
        "gp_fit_episodes": 1,
        "gp_fit_steps": 2,
        "attitude_fit_passes": 1,
        "attitude_fit_episodes": 1,
        "attitude_fit_repetitions": 1,
    },
    "relmas": {
        "updates": 1,
        "imitation_episodes": 1,
        "imitation_epochs": 1,
        "episodes_per_update": 1,
        "validation_episodes": 1,
        "held_out_episodes": 1,
        "episode_requests": 12,
    },
}
"""Seconds of training per learned policy; a new trainer adds its own here."""


def test_every_registered_trainer_has_a_tiny_budget_here() -> None:
    assert set(trainers().names()) == set(TINY_BUDGETS)


@pytest.fixture
def queue_name(redis_url: str) -> Iterator[str]:
    name = f"arbiter-test-registry-{uuid.uuid4().hex[:12]}"
    yield name
    connection = redis.Redis.from_url(redis_url)
    try:
        Queue(name, connection=connection).delete(delete_jobs=True)
    finally:
        connection.close()


@pytest.mark.parametrize("policy", sorted(TINY_BUDGETS))
def test_a_tiny_retrain_of_each_learned_policy_runs_end_to_end(  # noqa: PLR0917 - fixtures
    policy: str,
    tmp_path: Path,
    fresh_postgres_url: str,
    redis_url: str,
    redis_prefix: str,
    queue_name: str,
) -> None:
    settings = _settings(
        tmp_path,
        "a",
        database_url=fresh_postgres_url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        retrain_queue=queue_name,
    )
    with TestClient(create_app(settings)) as client:
        log_decisions(client, "drf")
        if policy == "relmas":  # what RELMAS learns from: dispatches and their outcomes
            simulate(
                ["heavy-mixed"],
                ["edf"],
                [0],
                dispatcher_for=lambda name: HttpDispatcher("", name, client=client),
                max_requests=8,
                report_outcomes=True,
            )
            assert client.app.state.decision_log.flush(timeout_s=30.0)  # type: ignore[attr-defined]
        response = client.post(
            "/admin/retrain",
            json={"policy": policy, "budget": TINY_BUDGETS[policy], "activate": "always"},
            headers=AUTH,
        )
        assert response.status_code == 202, response.text

        worker = _run_worker(settings)

        assert worker.returncode == 0, worker.stdout + worker.stderr
        job = finished_job(client, response.json()["id"])
        models = client.get("/admin/models", params={"policy": policy}, headers=AUTH).json()

    assert job["status"] == "succeeded", job["error"]
    assert job["params"]["budget"]["updates"] == 1
    assert [(m["version"], m["active"]) for m in models] == [(job["version"], True)]
    assert models[0]["metadata"]["budget"] == job["params"]["budget"]
    if policy == "relmas":
        assert job["metrics"]["workload"] == "logged"
        assert job["metrics"]["logged_outcomes"] == 8
