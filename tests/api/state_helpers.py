"""What the tests of per-cluster policy state share: an app on each cache, a one-job
snapshot OASiS commits a schedule for, a throughput observation, a log that keeps what
it is given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.decisions import DecisionService
from app.settings import Settings
from policies.model import ThroughputObservation
from storage.records import DecisionRecord, FeedbackRecord

CACHES = ["memory", "redis"]
"""The two caches policy state lives in: in process, and a real Redis."""

SLOT_S = 1800.0  # OASiS's slot


def app_on_cache(
    request: pytest.FixtureRequest, tmp_path: Path, **settings: Any
) -> Iterator[TestClient]:
    """The app on a throwaway SQLite file and the cache `request.param` names (the
    session's Redis under a prefix of the test's own), driven through its lifespan."""
    redis_url: str | None = None
    redis_prefix = "arbiter:"
    if request.param == "redis":
        redis_url = request.getfixturevalue("redis_url")
        redis_prefix = request.getfixturevalue("redis_prefix")
    chosen = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
        **settings,
    )
    with TestClient(create_app(chosen)) as test_client:
        assert decision_service(test_client).cache.backend == request.param
        yield test_client


def decision_service(client: TestClient) -> DecisionService:
    service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]
    return service


def one_job_snapshot(cluster_id: str, node_id: str = "n1") -> dict[str, Any]:
    """One 4-GPU node and one job OASiS admits with a committed schedule: a second
    decision of the same cluster finds it "already committed" while the state lasts."""
    return {
        "cluster_id": cluster_id,
        "now": 10 * SLOT_S,
        "nodes": [{"id": node_id, "gpu_type": "V100", "gpus": 4}],
        "jobs": [
            {
                "id": "train",
                "submit_time": 10 * SLOT_S,
                "workers": 2,
                "estimated_duration_s": 2 * SLOT_S,
                "utility": {"kind": "step", "value": 10.0, "deadline_s": 6 * SLOT_S},
            }
        ],
    }


def throughput_event(event_id: str, cluster_id: str, samples_per_s: float = 60.0) -> dict[str, Any]:
    """A `throughput` feedback event of a ResNet-50 job on node n1, at `samples_per_s` of
    the 100 its table expects there (0.6 by default): one observation for the GP."""
    return {
        "event_id": event_id,
        "kind": "throughput",
        "cluster_id": cluster_id,
        "job_id": "j",
        "node_id": "n1",
        "model": "resnet50",
        "samples_per_s": samples_per_s,
        "expected_samples_per_s": 100.0,
    }


def seen(speed: float = 0.6) -> ThroughputObservation:
    """A ResNet-50 job's speed on node n1, relative to its table speed there."""
    return ThroughputObservation(node_id="n1", job_id="j", model="resnet50", relative_speed=speed)


class KeptLog:
    """The records a service submits, kept in order (a service built without the app)."""

    def __init__(self) -> None:
        self.decisions: list[DecisionRecord] = []
        self.feedback: list[FeedbackRecord] = []

    def submit_decision(self, record: DecisionRecord) -> None:
        self.decisions.append(record)

    def submit_feedback(self, record: FeedbackRecord) -> None:
        self.feedback.append(record)
