"""Shadow mode: a second profile decides beside the served one, logged, never answering."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.main import create_app
from app.settings import Settings
from storage.db import create_engine_for, make_sessionmaker
from storage.models import Decision
from tests.api.retrain_helpers import elastic_snapshot


def _logged(settings: Settings, decision_id: str) -> Decision:
    engine = create_engine_for(settings.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            query = select(Decision).where(Decision.decision_id == decision_id)
            return session.scalars(query).one()
    finally:
        engine.dispose()


def _serve(settings: Settings, profile: str) -> dict[str, Any]:
    """One decision; leaving the client drains the shadow thread and the log."""
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/v1/decisions", json={"profile": profile, "snapshot": elastic_snapshot()}
        )
    assert response.status_code == 200
    decision: dict[str, Any] = response.json()
    return decision


def test_a_shadowed_profile_logs_the_shadow_decision_beside_the_served_one(
    settings: Settings,
) -> None:
    shadowed = settings.model_copy(update={"shadow": {"drf": "dl2"}})

    served = _serve(shadowed, "drf")
    row = _logged(settings, served["decision_id"])

    assert served["policies"]["scaling"]["name"] == "drf"
    assert row.decision["scaling"] == served["scaling"]
    assert row.shadow is not None
    assert row.shadow["profile"] == "dl2"
    assert row.shadow["policies"]["scaling"]["name"] == "dl2"
    assert row.shadow["decision"]["profile"] == "dl2"
    assert {s["job_id"] for s in row.shadow["decision"]["scaling"]} == {"j0", "j1", "j2", "j3"}
    assert row.shadow["latency_ms"] >= 0
    assert row.shadow["fallback"] is None


def test_a_failing_shadow_is_logged_and_never_touches_the_answer(settings: Settings) -> None:
    pinned_to_nothing = settings.model_copy(update={"shadow": {"drf": "dl2@no-such-version"}})

    served = _serve(pinned_to_nothing, "drf")
    row = _logged(settings, served["decision_id"])

    assert served["policies"]["scaling"]["name"] == "drf"
    assert row.shadow is not None
    assert row.shadow["profile"] == "dl2"
    assert "'no-such-version' of 'dl2' not found" in row.shadow["error"]


def test_profiles_without_a_shadow_log_none(settings: Settings) -> None:
    shadowed = settings.model_copy(update={"shadow": {"drf": "dl2"}})

    served = _serve(shadowed, "fifo")

    assert _logged(settings, served["decision_id"]).shadow is None


def test_a_shadow_naming_an_unknown_profile_is_refused_at_start(settings: Settings) -> None:
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        create_app(settings.model_copy(update={"shadow": {"drf": "nope"}}))


@pytest.mark.parametrize("text", ["drf", "drf=", "=dl2", "drf=dl2@", "drf=a b", "a=b,a=c"])
def test_malformed_shadow_settings_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="ARBITER_SHADOW"):
        Settings(shadow=text)


def test_shadow_settings_parse_served_shadow_and_version() -> None:
    parsed = Settings(shadow="drf=dl2, fifo=dl2@20261121-1")

    assert parsed.shadow == {"drf": "dl2", "fifo": "dl2@20261121-1"}
