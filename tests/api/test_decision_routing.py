"""Where a decision runs: small stateless requests on the event loop, the rest on a thread.

The hop to a decision thread costs more than a small decision; a large snapshot or a
stateful profile (whose cluster lock a slow round may hold) must never run on the loop,
which `/healthz` shares (tests/api/test_health_under_load.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.decisions import DecisionService, ReadRequest
from app.settings import Settings
from policies.decision import Stage
from tests.api.conftest import small_snapshot

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORKER_THREAD = "AnyIO worker thread"


@pytest.fixture
def recorded(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[TestClient, list[str]]]:
    threads: list[str] = []
    with TestClient(create_app(settings)) as client:
        service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]
        _record_where_decisions_run(service, threads, monkeypatch)
        yield client, threads


def _record_where_decisions_run(
    service: DecisionService, threads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Note the thread of each decision: `answer` decides, whether the router calls it
    with a body it read itself or through `decide`."""
    answer = service.answer

    def recording(read: ReadRequest, body: bytes, caller: str | None = None) -> bytes:
        threads.append(threading.current_thread().name)
        return answer(read, body, caller)

    monkeypatch.setattr(service, "answer", recording)


def _post(client: TestClient, profile: str, snapshot: object, path: str = "/v1/decisions") -> None:
    response = client.post(path, json={"profile": profile, "snapshot": snapshot})
    assert response.status_code == 200, response.text


def test_a_small_stateless_decision_runs_on_the_event_loop(
    recorded: tuple[TestClient, list[str]],
) -> None:
    client, threads = recorded
    _post(client, "fifo", small_snapshot())
    _post(client, "fifo", small_snapshot(), "/v1/decisions/ordering")
    assert len(threads) == 2
    assert not any(name.startswith(WORKER_THREAD) for name in threads)


def test_a_stateful_profile_runs_on_a_decision_thread_however_small(
    recorded: tuple[TestClient, list[str]],
) -> None:
    client, threads = recorded
    _post(client, "oasis", small_snapshot())
    assert len(threads) == 1
    assert threads[0].startswith(WORKER_THREAD)


def test_a_small_body_is_read_once_on_the_event_loop_whatever_its_profile(
    recorded: tuple[TestClient, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, threads = recorded
    service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]
    reads: list[str] = []
    read = service.read

    def recording(body: bytes, stage: Stage | None = None) -> ReadRequest:
        reads.append(threading.current_thread().name)
        return read(body, stage)

    monkeypatch.setattr(service, "read", recording)
    _post(client, "oasis", small_snapshot())
    # Read once, on the loop; decided on a thread, as a stateful profile must be.
    assert len(reads) == 1
    assert not reads[0].startswith(WORKER_THREAD)
    assert len(threads) == 1
    assert threads[0].startswith(WORKER_THREAD)


def test_a_body_over_the_inline_limit_runs_on_a_decision_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        inline_max_bytes=256,
    )
    threads: list[str] = []
    with TestClient(create_app(settings)) as client:
        service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]
        _record_where_decisions_run(service, threads, monkeypatch)
        _post(client, "fifo", small_snapshot())
    assert len(threads) == 1
    assert threads[0].startswith(WORKER_THREAD)


def test_inline_and_threaded_answers_are_the_same_decision(tmp_path: Path) -> None:
    body = {"profile": "tiresias", "snapshot": orjson.loads((EXAMPLES / "small.json").read_bytes())}
    answers = []
    for inline in (65_536, 0):
        settings = Settings(
            database_url=f"sqlite:///{tmp_path / f'{inline}.db'}",
            redis_url=None,
            spill_dir=tmp_path / f"spill-{inline}",
            inline_max_bytes=inline,
        )
        with TestClient(create_app(settings)) as client:
            response = client.post("/v1/decisions", json=body)
            assert response.status_code == 200
            decision = response.json()
            decision.pop("decision_id")
            answers.append(decision)
    assert answers[0] == answers[1]


def test_errors_on_the_inline_path_keep_their_shape(client: TestClient) -> None:
    unknown = client.post("/v1/decisions", json={"profile": "nope", "snapshot": small_snapshot()})
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "not_found"
    broken = client.post(
        "/v1/decisions",
        content=b'{"profile": "fifo", "snapshot": {',
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 422
    assert broken.json()["error"] == "invalid_request"
    wrong_method = client.get("/v1/decisions")
    assert wrong_method.status_code == 405


def test_an_unexpected_error_in_a_decision_is_a_500_with_the_error_shape(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]

        def broken(read: ReadRequest, body: bytes, caller: str | None = None) -> bytes:
            raise RuntimeError("a bug")

        monkeypatch.setattr(service, "answer", broken)
        response = client.post(
            "/v1/decisions", json={"profile": "fifo", "snapshot": small_snapshot()}
        )
    assert response.status_code == 500
    assert response.json() == {
        "error": "internal_error",
        "detail": "unexpected RuntimeError",
        "problems": [],
    }
