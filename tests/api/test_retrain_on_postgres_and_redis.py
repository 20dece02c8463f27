"""The retraining loop on real PostgreSQL and Redis, through the API and an RQ worker.

Decisions are logged by one replica, retraining is queued on Redis and run by
`arbiter worker --burst` (a process of its own, configured by the environment
as in production), and a second replica, started before the activation, swaps
to the new version without restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from rq import Queue

from app.main import create_app
from app.schemas import RetrainRequest
from app.services.retrain import RetrainService, RqRetrainQueue
from app.settings import Settings
from storage.db import create_engine_for, make_sessionmaker
from tests.api.retrain_helpers import (
    AUTH,
    OVER_TIME_BUDGET,
    TINY_BUDGET,
    TOKEN,
    finished_job,
    log_decisions,
    poll,
    scaling_version,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def queue_name(redis_url: str) -> Iterator[str]:
    """A retrain queue of this test's own, emptied and removed afterwards."""
    name = f"arbiter-test-retrain-{uuid.uuid4().hex[:12]}"
    yield name
    connection = redis.Redis.from_url(redis_url)
    try:
        Queue(name, connection=connection).delete(delete_jobs=True)
    finally:
        connection.close()


def _shared(database_url: str, redis_url: str, redis_prefix: str, queue: str) -> dict[str, str]:
    """What every replica of a test shares: the database, Redis and the retrain queue."""
    return {
        "database_url": database_url,
        "redis_url": redis_url,
        "redis_prefix": redis_prefix,
        "retrain_queue": queue,
    }


def _settings(tmp_path: Path, name: str, **shared: str) -> Settings:
    """A replica's settings: its own spill folder, the shared database, Redis and queue."""
    return Settings(
        database_url=shared["database_url"],
        redis_url=shared["redis_url"],
        redis_prefix=shared["redis_prefix"],
        retrain_queue=shared["retrain_queue"],
        admin_token=TOKEN,
        spill_dir=tmp_path / name / "spill",
        log_flush_interval_s=0.05,
        # Only the channel can bring the new version to the second replica in time.
        models_check_interval_s=3600.0,
    )


def _worker_environment(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "ARBITER_DATABASE_URL": settings.database_url,
        "ARBITER_REDIS_URL": str(settings.redis_url),
        "ARBITER_REDIS_PREFIX": settings.redis_prefix,
        "ARBITER_RETRAIN_QUEUE": settings.retrain_queue,
    }


def _job(client: TestClient, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = client.get(f"/admin/retrain/{job_id}", headers=AUTH).json()
    return job


def _run_worker(settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", "--burst"],
        cwd=REPO_ROOT,
        env=_worker_environment(settings),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_retrain_queued_through_the_api_is_run_by_a_worker_and_swapped_in_by_every_replica(
    tmp_path: Path,
    fresh_postgres_url: str,
    redis_url: str,
    redis_prefix: str,
    queue_name: str,
) -> None:
    shared = _shared(fresh_postgres_url, redis_url, redis_prefix, queue_name)
    first, second = _settings(tmp_path, "a", **shared), _settings(tmp_path, "b", **shared)
    with TestClient(create_app(first)) as replica_a, TestClient(create_app(second)) as replica_b:
        log_decisions(replica_a, "drf")
        before = scaling_version(replica_b)
        response = replica_a.post(
            "/admin/retrain",
            json={"policy": "dl2", "profile": "drf", "budget": TINY_BUDGET, "activate": "always"},
            headers=AUTH,
        )
        assert response.status_code == 202
        job_id = response.json()["id"]

        worker = _run_worker(first)

        assert worker.returncode == 0, worker.stdout + worker.stderr
        job = finished_job(replica_b, job_id)
        assert job["status"] == "succeeded", job["error"]
        version = job["version"]
        poll(
            lambda: True if scaling_version(replica_b) == f"1+{version}" else None,
            "the second replica to serve the new version",
        )
        assert scaling_version(replica_a) == f"1+{version}"
        models = replica_b.get("/admin/models", params={"policy": "dl2"}, headers=AUTH).json()

    assert before.startswith("1+shipped-")
    assert job["metrics"]["activated"] is True
    assert job["progress"] == {"stage": "storing", "fraction": 1.0}
    assert [(m["version"], m["active"]) for m in models] == [(version, True)]
    assert models[0]["metadata"]["parent"] == before.removeprefix("1+")
    # A replica started now finds the active version and its weights in Redis.
    third = _settings(tmp_path, "c", **shared)
    with TestClient(create_app(third)) as replica_c:
        ready = replica_c.get("/readyz").json()
        assert scaling_version(replica_c) == f"1+{version}"
    assert f"dl2: {version} (from cache)" in ready["components"]["models"]["detail"].split("; ")


def test_a_job_over_its_time_limit_is_failed_with_the_reason(
    tmp_path: Path,
    fresh_postgres_url: str,
    redis_url: str,
    redis_prefix: str,
    queue_name: str,
) -> None:
    settings = _settings(
        tmp_path, "a", **_shared(fresh_postgres_url, redis_url, redis_prefix, queue_name)
    )
    with TestClient(create_app(settings)) as client:
        log_decisions(client, "drf")
    engine = create_engine_for(fresh_postgres_url)
    sessions = make_sessionmaker(engine)
    # The limit, not the budget, bounds how long this test runs.
    queue = RqRetrainQueue(redis_url, queue_name, timeout_s=1)
    try:
        job = RetrainService(sessions, queue).start(
            RetrainRequest.model_validate({"policy": "dl2", "budget": OVER_TIME_BUDGET})
        )
    finally:
        queue.close()

    worker = _run_worker(settings)

    assert worker.returncode == 0, worker.stdout + worker.stderr
    with TestClient(create_app(settings)) as client:
        finished = finished_job(client, job.id)
    engine.dispose()
    assert finished["status"] == "failed"
    assert "RetrainTimeLimit: the job ran past its time limit of 1 s" in finished["error"]
    assert finished["version"] is None


def test_a_job_whose_work_horse_is_killed_is_failed_at_once_with_the_reason(
    tmp_path: Path,
    fresh_postgres_url: str,
    redis_url: str,
    redis_prefix: str,
    queue_name: str,
) -> None:
    settings = _settings(
        tmp_path, "a", **_shared(fresh_postgres_url, redis_url, redis_prefix, queue_name)
    )
    with TestClient(create_app(settings)) as client:
        log_decisions(client, "drf")
        job_id = client.post(
            "/admin/retrain", json={"policy": "dl2", "budget": OVER_TIME_BUDGET}, headers=AUTH
        ).json()["id"]

        worker = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--burst"],
            cwd=REPO_ROOT,
            env=_worker_environment(settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            poll(
                lambda: True if _job(client, job_id)["status"] == "running" else None,
                "the worker to start the job",
            )
            # The work horse is the worker's one child (RQ forks one per job).
            children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
            assert len(children) == 1, children
            os.kill(int(children[0]), signal.SIGKILL)
            output, _ = worker.communicate(timeout=120)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        # Failed by the worker, not 60 s later by the heartbeat timeout.
        job = _job(client, job_id)

    assert worker.returncode == 0, output
    assert job["status"] == "failed"
    assert "was killed (signal 9)" in job["error"], job["error"]
