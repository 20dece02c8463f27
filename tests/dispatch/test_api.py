"""POST /v1/dispatch: the example answered, every problem named by its JSON path, the
dispatch profiles listed, the answer logged."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.main import create_app
from app.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dispatch.json"
DISPATCH_PROFILES = {"fcfs", "edf", "llf", "eft-greedy", "prema", "relmas"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def example() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(EXAMPLE.read_text())
    return body


def paths(response: Any) -> list[str]:
    return [p["path"] for p in response.json()["problems"]]


@pytest.mark.parametrize("profile", sorted(DISPATCH_PROFILES))
def test_the_example_gets_one_entry_per_request_and_one_layer_per_idle_accelerator(
    client: TestClient, profile: str
) -> None:
    body = example()
    body["profile"] = profile
    response = client.post("/v1/dispatch", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    snapshot = body["snapshot"]
    assert [e["request_id"] for e in answer["requests"]] == [r["id"] for r in snapshot["requests"]]
    idle = {a["id"] for a in snapshot["accelerators"] if a.get("running") is None}
    used = [s["accelerator_id"] for s in answer["starts"]]
    assert len(used) == len(set(used))
    assert set(used) <= idle
    assert answer["profile"] == profile
    assert answer["policy"]["name"] == profile.replace("-", "_")
    assert answer["fallback"] is None


def test_validation_errors_name_their_json_paths(client: TestClient) -> None:
    body = example()
    snapshot = body["snapshot"]
    snapshot["requests"][0]["model"] = "no-such-model"
    snapshot["requests"][1]["next_layer"] = 10_000
    snapshot["accelerators"][0]["id"] = snapshot["accelerators"][1]["id"]
    response = client.post("/v1/dispatch", json=body)
    assert response.status_code == 422
    assert set(paths(response)) >= {
        "snapshot.requests[0].model",
        "snapshot.requests[1].next_layer",
        "snapshot.accelerators[1].id",
    }

    typed = example()
    typed["snapshot"]["dram_bandwidth_gbps"] = -1
    del typed["snapshot"]["requests"][2]["deadline"]
    response = client.post("/v1/dispatch", json=typed)
    assert response.status_code == 422
    assert {"snapshot.dram_bandwidth_gbps", "snapshot.requests[2].deadline"} <= set(paths(response))
    assert response.json()["error"] == "invalid_request"


def test_a_running_layer_must_be_its_requests_next_layer(client: TestClient) -> None:
    body = example()
    snapshot = body["snapshot"]
    index, running = next(
        (i, a["running"]) for i, a in enumerate(snapshot["accelerators"]) if a.get("running")
    )
    running["layer"] += 1
    response = client.post("/v1/dispatch", json=body)
    assert response.status_code == 422
    assert paths(response) == [f"snapshot.accelerators[{index}].running.layer"]


def test_unknown_profile_is_404_and_dispatch_profiles_are_listed(client: TestClient) -> None:
    body = example()
    body["profile"] = "nope"
    assert client.post("/v1/dispatch", json=body).status_code == 404
    listed = {p["name"]: p for p in client.get("/v1/profiles").json()}
    assert set(listed) >= DISPATCH_PROFILES
    assert listed["relmas"]["stages"]["dispatch"]["name"] == "relmas"
    assert listed["relmas"]["fallback"]["dispatch"]["name"] == "edf"
    policies = {(p["stage"], p["name"]) for p in client.get("/v1/policies").json()}
    assert {
        ("dispatch", n) for n in ("fcfs", "edf", "llf", "eft_greedy", "prema", "relmas")
    } <= policies


def test_too_many_requests_is_a_422_naming_the_limit(settings: Settings) -> None:
    limited = settings.model_copy(update={"max_requests": 3})
    with TestClient(create_app(limited)) as client:
        response = client.post("/v1/dispatch", json=example())
    assert response.status_code == 422
    assert paths(response) == ["snapshot.requests"]
    assert "ARBITER_MAX_REQUESTS" in response.json()["problems"][0]["message"]


def test_dispatches_are_logged_like_decisions(client: TestClient, settings: Settings) -> None:
    response = client.post("/v1/dispatch", json=example())
    decision_id = response.json()["decision_id"]
    engine = create_engine(settings.database_url)
    row = None
    for _ in range(100):
        with engine.connect() as connection:
            row = connection.execute(
                text("SELECT profile, stages FROM decisions WHERE decision_id = :id"),
                {"id": decision_id},
            ).first()
        if row is not None:
            break
        time.sleep(0.05)
    engine.dispose()
    assert row is not None
    assert row.profile == "relmas"
    assert "dispatch" in str(row.stages)
