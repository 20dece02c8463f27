"""Optional caller tokens for /v1 (ARBITER_API_TOKENS): who asked is known and logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

from app.main import create_app
from app.settings import Settings
from storage.db import create_engine_for
from storage.models import Decision, FeedbackEvent
from tests.api.conftest import small_snapshot

PLANNER = "planner-token-of-enough-length"
NIGHTLY = "nightly-token-of-enough-length"


@pytest.fixture
def guarded(settings: Settings) -> Settings:
    return settings.model_copy(update={"api_tokens": {"planner": PLANNER, "nightly": NIGHTLY}})


def _decide(client: TestClient, token: str | None) -> int:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    body = {"profile": "fifo", "snapshot": small_snapshot()}
    status: int = client.post("/v1/decisions", json=body, headers=headers).status_code
    return status


def test_with_tokens_v1_asks_who_is_calling(guarded: Settings) -> None:
    with TestClient(create_app(guarded)) as client:
        missing = client.post("/v1/decisions", json={})
        assert (missing.status_code, missing.headers["www-authenticate"]) == (401, "Bearer")
        assert _decide(client, "not-anyone's-token-at-all") == 403
        assert _decide(client, PLANNER) == 200
        assert client.get("/healthz").status_code == 200  # probes need no token


def test_the_caller_is_logged_with_its_decisions_and_feedback(guarded: Settings) -> None:
    with TestClient(create_app(guarded)) as client:
        assert _decide(client, PLANNER) == 200
        event = {"event_id": "e-1", "kind": "job_finished", "job_id": "j", "finished_at": 1.0}
        accepted = client.post(
            "/v1/feedback", json={"events": [event]}, headers={"authorization": f"Bearer {NIGHTLY}"}
        )
        assert accepted.status_code == 202
        assert client.app.state.decision_log.flush(timeout_s=10)  # type: ignore[attr-defined]
    engine = create_engine_for(guarded.database_url)
    with engine.connect() as connection:
        assert list(connection.scalars(select(Decision.caller))) == ["planner"]
        assert list(connection.scalars(select(FeedbackEvent.caller))) == ["nightly"]
    engine.dispose()


def test_without_tokens_v1_is_open_and_names_no_caller(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        assert _decide(client, None) == 200
        assert client.app.state.decision_log.flush(timeout_s=10)  # type: ignore[attr-defined]
    engine = create_engine_for(settings.database_url)
    with engine.connect() as connection:
        assert list(connection.scalars(select(Decision.caller))) == [None]
    engine.dispose()


@pytest.mark.parametrize(
    "value",
    ["planner", "planner=short", "a=same-token-of-enough-length,b=same-token-of-enough-length"],
)
def test_unusable_token_settings_are_refused_at_start(value: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", api_tokens=value)
