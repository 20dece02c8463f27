"""RELMAS retrains from the decision log on PostgreSQL: the dispatches the service answered
and the `inference` outcomes its caller reported rebuild the workload training runs on;
with none, the retraining says so and trains on the named scenarios."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from app.main import create_app
from app.settings import Settings
from policies.learned.relmas.shipped import shipped_model
from simulator.accelerator.cli import simulate
from simulator.accelerator.costs import load_costs
from simulator.accelerator.dispatchers import HttpDispatcher
from storage.db import create_engine_for, make_sessionmaker
from storage.records import DecisionRecord, FeedbackRecord
from storage.repositories import DecisionRepository, FeedbackRepository
from tests.dispatch.builders import request, snapshot
from training.registry import Candidate, Incumbent, logged_source
from training.relmas.logged import read_log
from training.relmas.trainer import RelmasBudget, RelmasTrainer

SYSTEM = "medium-mixed/edf/seed0"
TINY = RelmasBudget(
    updates=1,
    imitation_epochs=1,
    episodes_per_update=2,
    validation_episodes=1,
    held_out_episodes=1,
    episode_requests=12,
)


@pytest.fixture
def sessions(fresh_postgres_url: str) -> Iterator[sessionmaker[Session]]:
    engine = create_engine_for(fresh_postgres_url)
    try:
        yield make_sessionmaker(engine)
    finally:
        engine.dispose()


@pytest.fixture
def client(tmp_path: Path, fresh_postgres_url: str) -> Iterator[TestClient]:
    settings = Settings(
        database_url=fresh_postgres_url,
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _serve(client: TestClient, *, report_outcomes: bool, requests: int = 16) -> dict[str, Any]:
    """Serve one episode of `medium-mixed` under EDF through the service, as a caller would
    (and report its outcomes); wait until the log has written everything."""
    (row,) = simulate(
        ["medium-mixed"],
        ["edf"],
        [0],
        dispatcher_for=lambda name: HttpDispatcher("", name, client=client),
        max_requests=requests,
        report_outcomes=report_outcomes,
    )
    assert client.app.state.decision_log.flush(timeout_s=30.0)  # type: ignore[attr-defined]
    return row


def _logged(sessions: sessionmaker[Session]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    with sessions() as session:
        return list(DecisionRepository(session).dispatches_with_outcomes())


def _train(records: list[tuple[dict[str, Any], dict[str, Any]]]) -> Candidate:
    shipped = shipped_model()
    stages: list[str] = []
    candidate = RelmasTrainer().train(
        records,
        Incumbent(version=shipped.version, weights=None),
        TINY,
        seed=0,
        start="incumbent",
        on_progress=lambda stage, fraction: stages.append(stage),
    )
    assert stages[0] == "log"
    return candidate


def test_the_relmas_trainer_reads_dispatches_with_their_outcomes() -> None:
    assert logged_source(RelmasTrainer()) == "dispatches"


def test_a_retrain_starts_from_the_logged_dispatches_and_inference_outcomes(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    served = _serve(client, report_outcomes=True)
    records = _logged(sessions)

    assert len(records) == served["rounds"]
    assert all(snapshot["system_id"] == SYSTEM for snapshot, _ in records)
    joined = {rid: o for _, decision in records for rid, o in decision["outcomes"].items()}
    assert len(joined) == served["requests"] == 16
    assert sum(o["sla_met"] for o in joined.values()) == round(
        served["sla_satisfaction"] * served["requests"]
    )

    candidate = _train(records)
    metrics = candidate.metrics

    assert metrics["workload"] == "logged"
    assert metrics["records"] == len(records)
    assert metrics["logged_requests"] == metrics["logged_outcomes"] == 16
    assert metrics["logged_sla"] == round(served["sla_satisfaction"], 4)
    assert metrics["logged_system"] == SYSTEM
    assert metrics["logged_accelerators"] == "ws,ws,os,rs"
    # The tenants' SLA classes come back from the deadlines alone: 4x, 8x, 16x.
    for tenant, factor in (("interactive", 4), ("standard", 8), ("batch", 16)):
        assert f"{tenant}: share" in metrics["logged_tenants"]
        assert f"deadline x{factor:.2f}" in metrics["logged_tenants"]
    assert metrics["logged_load"] > 0
    assert metrics["logged_replays"] == 1
    assert metrics["logged_demonstration_rounds"] > 0
    # From the incumbent: its score, then after imitating the logged starts that met.
    assert {"validation_sla_start", "validation_sla_imitation"} <= set(metrics)
    assert 0.0 <= metrics["replayed_sla_incumbent"] <= 1.0
    assert metrics["checkpoint"] in {"start", "imitation", "update-1"}


def test_without_logged_feedback_the_retrain_says_so_and_uses_the_named_scenarios(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    nothing = _train(_logged(sessions))
    assert nothing.metrics["workload"] == "scenario defaults"
    assert "no dispatch logged" in nothing.metrics["workload_note"]
    assert nothing.metrics["records"] == 0

    _serve(client, report_outcomes=False, requests=6)
    no_outcomes = _train(_logged(sessions))
    assert no_outcomes.metrics["workload"] == "scenario defaults"
    assert "no `inference` feedback" in no_outcomes.metrics["workload_note"]
    assert no_outcomes.metrics["logged_outcomes"] == 0
    assert "replayed_sla_incumbent" not in no_outcomes.metrics
    assert "validation_sla_imitation" not in no_outcomes.metrics


def test_a_reused_request_id_gets_the_outcome_that_followed_its_own_arrival(
    sessions: sessionmaker[Session],
) -> None:
    """A caller whose ids restart: r0 arrives at 0 and again at 10; each outcome goes to the
    request it followed (by the caller's clock), not to the first r0 seen."""
    first = snapshot([request("r0", arrival=0.0, deadline=1.0)], now=0.0)
    second = snapshot([request("r0", arrival=10.0, deadline=11.0)], now=10.0)
    now = datetime.now(UTC)
    with sessions.begin() as session:
        DecisionRepository(session).add_many(
            DecisionRecord(
                decision_id=f"d{i}",
                cluster_id=s.system_id,
                profile="edf",
                created_at=now + timedelta(seconds=i),
                now=s.now,
                stages=["dispatch"],
                policies={},
                snapshot=s,
                decision=b'{"starts": []}',
                latency_ms=0.1,
            )
            for i, s in enumerate((first, second))
        )
        FeedbackRepository(session).add_many_ignoring_duplicates(
            FeedbackRecord(
                event_id=f"e{i}",
                kind="inference",
                cluster_id=first.system_id,
                payload={"request_id": "r0", "latency_ms": latency, "sla_met": met},
                occurred_at=at,
            )
            for i, (at, latency, met) in enumerate(((0.5, 500.0, True), (12.0, 2000.0, False)))
        )
    (_, early), (_, late) = _logged(sessions)
    assert early["outcomes"]["r0"]["sla_met"] is True
    assert late["outcomes"]["r0"]["sla_met"] is False
    workload = read_log(_logged(sessions), load_costs(), shipped_model().model.config.styles)
    assert [(r.arrival, r.met, r.latency_ms) for r in workload.requests] == [
        (0.0, True, 500.0),
        (10.0, False, 2000.0),
    ]
    assert workload.system == "default"
