"""A decision runs off the event loop: `/healthz` answers while one is in flight.

A real uvicorn server on a loopback port (in a thread of this process) gets a real slow
decision, `oasis` on `examples/large.json`, posted from one thread; once the service has
started on it, another thread asks for `/healthz`. The decision is held where it runs
until `/healthz` has answered (at most `HOLD_S`), so the check is an order that does not
depend on the machine's speed: `/healthz` answers before the decision has been computed.
With decisions on the event loop, holding one holds the loop: `/healthz` can only answer
after the hold and the decision, and the test fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from policies.decision import Stage
from tests.servers import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HOLD_S = 10.0


@dataclass(frozen=True)
class LiveServer:
    url: str
    app: FastAPI


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    app = create_app(settings)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class DecisionProbe:
    """Set when the service starts on a decision (its body read); the decision then waits
    for `release` (at most `HOLD_S`) and records when it has been computed."""

    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    finished_at: list[float] = field(default_factory=list)


def hold_decisions(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> DecisionProbe:
    probe = DecisionProbe()
    service = app.state.services.decisions
    decide: Callable[[bytes, Stage | None, str | None], bytes] = service.decide

    def held_decide(body: bytes, stage: Stage | None = None, caller: str | None = None) -> bytes:
        probe.started.set()
        probe.release.wait(timeout=HOLD_S)
        try:
            return decide(body, stage, caller)
        finally:
            probe.finished_at.append(time.perf_counter())

    monkeypatch.setattr(service, "decide", held_decide)
    return probe


def test_healthz_answers_while_a_decision_is_in_flight(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = hold_decisions(live_server.app, monkeypatch)
    snapshot = orjson.loads((EXAMPLES / "large.json").read_bytes())
    body = orjson.dumps({"profile": "oasis", "snapshot": snapshot})
    decision_status: list[int] = []

    def post_decision() -> None:
        response = httpx.post(
            f"{live_server.url}/v1/decisions",
            content=body,
            headers={"content-type": "application/json"},
            timeout=120,
        )
        decision_status.append(response.status_code)

    poster = threading.Thread(target=post_decision, name="decision-client")
    poster.start()
    assert probe.started.wait(timeout=60), "the decision never started"
    health = httpx.get(f"{live_server.url}/healthz", timeout=120)
    health_answered_at = time.perf_counter()
    probe.release.set()
    poster.join(timeout=120)

    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    assert decision_status == [200]
    # The server runs in this process, so both instants are on one clock.
    assert health_answered_at < probe.finished_at[0], "/healthz waited for the decision"
