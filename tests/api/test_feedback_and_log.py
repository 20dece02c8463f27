"""Feedback intake and the decision log behind the API (SQLite; PostgreSQL in storage tests)."""

from __future__ import annotations

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.settings import Settings
from storage.compression import load_json_document
from tests.api.conftest import small_snapshot


def _flush(client: TestClient) -> None:
    assert client.app.state.decision_log.flush(timeout_s=10.0)  # type: ignore[attr-defined]


def test_decisions_are_logged_with_snapshot_and_versions(
    client: TestClient, settings: Settings
) -> None:
    decision = client.post(
        "/v1/decisions", json={"profile": "tiresias", "snapshot": small_snapshot()}
    ).json()
    _flush(client)

    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT profile, cluster_id FROM decisions WHERE decision_id = :id"),
            {"id": decision["decision_id"]},
        ).one()
    engine.dispose()
    assert tuple(row) == ("tiresias", "test")


def test_the_log_keeps_the_snapshot_as_the_caller_sent_it(
    client: TestClient, settings: Settings
) -> None:
    sent = orjson.dumps({"profile": "fifo", "seed": 3, "snapshot": small_snapshot()})
    decision = client.post(
        "/v1/decisions", content=sent, headers={"content-type": "application/json"}
    ).json()
    _flush(client)

    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT snapshot FROM decisions WHERE decision_id = :id"),
            {"id": decision["decision_id"]},
        ).scalar_one()
    engine.dispose()
    # Stored compressed on SQLite (storage/compression.py), the same document once read.
    assert load_json_document(stored) == small_snapshot()


def test_feedback_is_accepted_and_idempotent_by_event_id(
    client: TestClient, settings: Settings
) -> None:
    event = {
        "event_id": "evt-1",
        "kind": "job_finished",
        "cluster_id": "test",
        "job_id": "big",
        "started_at": 100.0,
        "finished_at": 900.0,
    }
    first = client.post("/v1/feedback", json={"events": [event]})
    second = client.post("/v1/feedback", json={"events": [event]})
    _flush(client)

    assert first.status_code == 202
    assert first.json() == {"accepted": 1}
    assert second.status_code == 202
    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM feedback_events WHERE event_id = 'evt-1'")
        ).scalar_one()
    engine.dispose()
    assert count == 1


def test_feedback_of_unknown_kind_is_422_with_path(client: TestClient) -> None:
    response = client.post(
        "/v1/feedback", json={"events": [{"event_id": "e", "kind": "mood", "job_id": "j"}]}
    )

    assert response.status_code == 422
    assert response.json()["problems"] == [
        {
            "path": "events[0].kind",
            "message": "'mood' is not one of inference, job_finished, throughput",
        }
    ]


def test_feedback_without_a_kind_is_422_naming_the_kind(client: TestClient) -> None:
    event = {"event_id": "e", "job_id": "j", "finished_at": 10.0}

    response = client.post("/v1/feedback", json={"events": [event]})

    assert response.status_code == 422
    assert response.json()["problems"] == [
        {
            "path": "events[0].kind",
            "message": "required: one of inference, job_finished, throughput",
        }
    ]


def test_the_spec_lists_each_feedback_events_kind_as_required(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]

    for name, tag in (
        ("JobFinished", "job_finished"),
        ("ThroughputObserved", "throughput"),
        ("InferenceOutcome", "inference"),
    ):
        assert "kind" in schemas[name]["required"]
        assert schemas[name]["properties"]["kind"]["const"] == tag


def test_empty_feedback_is_422(client: TestClient) -> None:
    response = client.post("/v1/feedback", json={"events": []})

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "events"


def test_a_worker_count_no_cluster_has_is_refused_at_once(client: TestClient) -> None:
    # Once accepted (202), this event stopped every later write of the decision log.
    poison = {
        "event_id": "poison-1",
        "kind": "throughput",
        "job_id": "j1",
        "samples_per_s": 1,
        "workers": 100000000000000000000,
    }

    response = client.post("/v1/feedback", json={"events": [poison]})

    assert response.status_code == 422
    paths = [p["path"] for p in response.json()["problems"]]
    assert "events[0].workers" in paths


def test_feedback_times_must_be_finite(client: TestClient) -> None:
    body = b'{"events": [{"event_id": "e-inf", "kind": "job_finished", "job_id": "j1", '
    body += b'"finished_at": 1e400}]}'

    response = client.post(
        "/v1/feedback", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 422
    assert [p["path"] for p in response.json()["problems"]] == ["events[0].finished_at"]


@pytest.mark.parametrize(
    ("times", "path", "says"),
    [
        ({"started_at": 500.0, "finished_at": 400.0}, "finished_at", "before started_at 500"),
        ({"submitted_at": 100.0, "finished_at": 50.0}, "finished_at", "before submitted_at 100"),
        ({"submitted_at": 100.0, "started_at": 90.0, "finished_at": 200.0}, "started_at", "90"),
    ],
    ids=["ends before it starts", "ends before it is submitted", "starts before it is submitted"],
)
def test_a_finished_job_whose_times_are_out_of_order_is_refused_naming_the_time(
    client: TestClient, times: dict[str, float], path: str, says: str
) -> None:
    good = {"event_id": "ok", "kind": "job_finished", "job_id": "j0", "finished_at": 10.0}
    bad = {"event_id": "bad", "kind": "job_finished", "job_id": "j1", **times}

    response = client.post("/v1/feedback", json={"events": [good, bad]})

    assert response.status_code == 422
    (problem,) = response.json()["problems"]
    assert problem["path"] == f"events[1].{path}"
    assert says in problem["message"]


def test_a_finished_job_may_end_the_instant_it_starts(client: TestClient) -> None:
    event = {
        "event_id": "instant",
        "kind": "job_finished",
        "job_id": "j1",
        "submitted_at": 5.0,
        "started_at": 5.0,
        "finished_at": 5.0,
        "outcome": "failed",
    }

    assert client.post("/v1/feedback", json={"events": [event]}).status_code == 202


def test_feedback_ids_the_log_cannot_store_are_refused_at_once(client: TestClient) -> None:
    events = [
        {"event_id": "e" * 129, "kind": "job_finished", "job_id": "j1", "finished_at": 1.0},
        {"event_id": "e-nul\x00", "kind": "job_finished", "job_id": "j1", "finished_at": 1.0},
    ]

    first = client.post("/v1/feedback", json={"events": events[:1]})
    second = client.post("/v1/feedback", json={"events": events[1:]})

    assert first.status_code == 422
    assert [p["path"] for p in first.json()["problems"]] == ["events[0].event_id"]
    assert second.status_code == 422
    assert [p["path"] for p in second.json()["problems"]] == ["events[0].event_id"]


def test_throughput_feedback_teaches_the_dual_agents_gp_for_its_cluster(
    client: TestClient,
) -> None:
    nodes = [
        {"id": f"n{i}", "gpu_type": "V100", "gpus": 4, "price_per_gpu_hour": 3.06} for i in range(3)
    ]
    snapshot = {
        "cluster_id": "hetero",
        "nodes": nodes,
        "jobs": [{"id": "j", "workers": 1, "model": "resnet50"}],
    }
    before = client.post("/v1/decisions", json={"profile": "dual-agent", "snapshot": snapshot})
    events = [
        {
            "event_id": f"t{i}",
            "kind": "throughput",
            "cluster_id": "hetero",
            "job_id": "old",
            "node_id": "n2",
            "model": "resnet50",
            "samples_per_s": 60.0,
            "expected_samples_per_s": 100.0,
        }
        for i in range(5)
    ]
    accepted = client.post("/v1/feedback", json={"events": events})
    after = client.post("/v1/decisions", json={"profile": "dual-agent", "snapshot": snapshot})
    other = client.post(
        "/v1/decisions",
        json={"profile": "dual-agent", "snapshot": {**snapshot, "cluster_id": "elsewhere"}},
    )

    assert accepted.status_code == 202
    [first] = before.json()["placement"]
    [second] = after.json()["placement"]
    assert first["details"]["gp_machines_observed"] == 0
    assert second["details"]["gp_machines_observed"] == 1
    assert other.json()["placement"][0]["details"]["gp_machines_observed"] == 0


@pytest.mark.parametrize(
    ("samples_per_s", "expected_samples_per_s"),
    [(5e-324, 2.0), (1e308, 1e-300)],
    ids=["ratio-underflows-to-zero", "ratio-overflows-to-infinity"],
)
def test_throughput_whose_speed_ratio_is_not_a_finite_positive_number_is_logged_not_learned(
    client: TestClient, settings: Settings, samples_per_s: float, expected_samples_per_s: float
) -> None:
    # Found by the long fuzz: both speeds are valid, their ratio is 0 (or inf), and the
    # GP's log of it was a 500 after the event had already been logged.
    snapshot = {
        "cluster_id": "odd-speeds",
        "nodes": [{"id": "n0", "gpu_type": "V100", "gpus": 4, "price_per_gpu_hour": 3.06}],
        "jobs": [{"id": "j", "workers": 1, "model": "resnet50"}],
    }
    client.post("/v1/decisions", json={"profile": "dual-agent", "snapshot": snapshot})
    event = {
        "event_id": f"odd-{samples_per_s}",
        "kind": "throughput",
        "cluster_id": "odd-speeds",
        "job_id": "j",
        "node_id": "n0",
        "samples_per_s": samples_per_s,
        "expected_samples_per_s": expected_samples_per_s,
    }

    accepted = client.post("/v1/feedback", json={"events": [event]})
    after = client.post("/v1/decisions", json={"profile": "dual-agent", "snapshot": snapshot})

    _flush(client)
    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        logged = connection.execute(
            text("SELECT count(*) FROM feedback_events WHERE event_id = :id"),
            {"id": event["event_id"]},
        ).scalar_one()
    engine.dispose()

    assert accepted.status_code == 202, accepted.text
    assert logged == 1
    assert after.json()["placement"][0]["details"]["gp_machines_observed"] == 0
