"""What the retraining and model-swap tests share: snapshots DRF can grow, tiny budgets, polls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi.testclient import TestClient

TOKEN = "a-test-token-of-enough-length"
AUTH = {"authorization": f"Bearer {TOKEN}"}

TINY_BUDGET = {
    "imitation_epochs": 1,
    "updates": 1,
    "episodes_per_update": 1,
    "jobs": 8,
    "validation_episodes": 0,
    "held_out_episodes": 1,
}

# Minutes of work: a job with this budget is still training when a short time limit
# stops it, whatever the machine's speed (a tiny budget finished within one second once
# the simulator got fast enough).
OVER_TIME_BUDGET = {**TINY_BUDGET, "updates": 500, "episodes_per_update": 8, "jobs": 200}
"""Seconds of training: enough to run every stage once."""

T = TypeVar("T")


def elastic_snapshot(cluster_id: str = "retrain", now: float = 1000.0) -> dict[str, Any]:
    """Four elastic jobs on eight GPUs: DRF grows them, so the decision teaches DL2 something."""
    return {
        "cluster_id": cluster_id,
        "now": now,
        "nodes": [
            {"id": f"n{i}", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}}
            for i in range(2)
        ],
        "jobs": [
            {
                "id": f"j{i}",
                "workers": 1,
                "min_workers": 1,
                "max_workers": 4,
                "submit_time": 10.0 * i,
                "estimated_duration_s": 600 + 100 * i,
            }
            for i in range(4)
        ],
    }


def log_decisions(client: TestClient, profile: str = "drf", count: int = 3) -> None:
    """Serve `count` decisions and wait until the log has written them."""
    for i in range(count):
        body = {"profile": profile, "snapshot": elastic_snapshot(now=1000.0 + i)}
        assert client.post("/v1/decisions", json=body).status_code == 200
    assert client.app.state.decision_log.flush(timeout_s=30.0)  # type: ignore[attr-defined]


def poll(check: Callable[[], T | None], what: str, deadline_s: float = 120.0) -> T:
    """`check()` until it returns something; fail naming `what` after a generous deadline."""
    give_up = time.monotonic() + deadline_s
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > give_up:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def scaling_version(client: TestClient) -> str:
    """The version the `dl2` profile's scaling policy answers with now (`1+<model>`)."""
    body = {"profile": "dl2", "snapshot": elastic_snapshot(cluster_id="probe")}
    decision = client.post("/v1/decisions", json=body).json()
    version: str = decision["policies"]["scaling"]["version"]
    return version


def finished_job(client: TestClient, job_id: str, deadline_s: float = 300.0) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"/admin/retrain/{job_id}", headers=AUTH).json()
        return job if job["status"] in {"succeeded", "failed"} else None

    return poll(check, f"retrain job {job_id} to finish", deadline_s)
