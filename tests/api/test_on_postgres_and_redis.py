"""The service end to end on real PostgreSQL and Redis, including their outages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.main import create_app
from app.settings import Settings
from storage.db import normalize_database_url
from tests.api.conftest import small_snapshot
from tests.servers import ThrowawayPostgres, ThrowawayRedis

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _settings(tmp_path: Path, database_url: str, redis_url: str | None) -> Settings:
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
        log_buffer=20,
    )


def _decision_ids_in(database_url: str, ids: list[str]) -> set[str]:
    engine = create_engine(normalize_database_url(database_url))
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT decision_id FROM decisions WHERE decision_id = ANY(:ids)"),
                {"ids": ids},
            ).scalars()
            return set(rows)
    finally:
        engine.dispose()


def _flush(client: TestClient) -> None:
    assert client.app.state.decision_log.flush(timeout_s=30.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("profile", ["fifo", "tiresias", "drf"])
def test_example_snapshot_decisions_land_in_postgres(
    tmp_path: Path, fresh_postgres_url: str, redis_url: str, profile: str
) -> None:
    snapshot: dict[str, Any] = json.loads((EXAMPLES / "small.json").read_text())
    with TestClient(create_app(_settings(tmp_path, fresh_postgres_url, redis_url))) as client:
        ready = client.get("/readyz").json()
        decision = client.post(
            "/v1/decisions", json={"profile": profile, "snapshot": snapshot}
        ).json()
        _flush(client)

    assert ready["components"]["cache"] == {"ok": True, "detail": "redis"}
    assert ready["components"]["database"]["ok"] is True
    engine = create_engine(normalize_database_url(fresh_postgres_url))
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT profile, snapshot->>'cluster_id', decision->'ordering' "
                "FROM decisions WHERE decision_id = :id"
            ),
            {"id": decision["decision_id"]},
        ).one()
    engine.dispose()
    assert row[0] == profile
    assert row[1] == snapshot["cluster_id"]
    assert row[2] == decision["ordering"]


def test_decisions_posted_during_a_database_outage_are_all_logged(
    tmp_path: Path, throwaway_postgres: ThrowawayPostgres
) -> None:
    settings = _settings(tmp_path, throwaway_postgres.url, None)
    body = {"profile": "fifo", "snapshot": small_snapshot()}
    ids: list[str] = []
    with TestClient(create_app(settings)) as client:
        for _ in range(5):
            ids.append(client.post("/v1/decisions", json=body).json()["decision_id"])
        _flush(client)
        throwaway_postgres.stop()
        during = [client.post("/v1/decisions", json=body) for _ in range(60)]
        degraded = client.get("/readyz").json()
        throwaway_postgres.start()
        _flush(client)

    ids += [r.json()["decision_id"] for r in during]
    assert all(r.status_code == 200 for r in during)
    assert degraded["status"] == "degraded"
    assert degraded["components"]["database"]["ok"] is False
    assert _decision_ids_in(throwaway_postgres.url, ids) == set(ids)


def test_a_redis_outage_degrades_readiness_but_never_fails_a_decision(
    tmp_path: Path, throwaway_redis: ThrowawayRedis
) -> None:
    settings = _settings(tmp_path, f"sqlite:///{tmp_path / 'arbiter.db'}", throwaway_redis.url)
    body = {"profile": "tiresias", "snapshot": small_snapshot()}
    with TestClient(create_app(settings)) as client:
        before = client.get("/readyz").json()
        throwaway_redis.kill()
        decision = client.post("/v1/decisions", json=body)
        during = client.get("/readyz").json()

    assert before["components"]["cache"]["ok"] is True
    assert decision.status_code == 200
    assert during["status"] == "degraded"
    assert during["components"]["cache"]["ok"] is False
