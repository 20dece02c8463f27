"""An app on a throwaway SQLite file and the in-process cache, driven through its lifespan."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings


def small_snapshot() -> dict[str, Any]:
    return {
        "cluster_id": "test",
        "now": 1000.0,
        "nodes": [
            {"id": "n0", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}},
            {"id": "n1", "gpu_type": "V100", "gpus": 4, "topology": {"rack": "r0"}},
        ],
        "jobs": [
            {
                "id": "running",
                "state": "running",
                "workers": 2,
                "submit_time": 10.0,
                "placement": [{"node_id": "n0", "gpu_indices": [0, 1]}],
                "estimated_duration_s": 5000,
            },
            {"id": "big", "workers": 4, "submit_time": 20.0, "estimated_duration_s": 100},
            {"id": "small", "workers": 1, "submit_time": 30.0, "estimated_duration_s": 50},
        ],
    }


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        admin_token="a-test-token-of-enough-length",
        spill_dir=tmp_path / "spill",
        max_body_bytes=64 * 1024,
        log_flush_interval_s=0.05,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client
