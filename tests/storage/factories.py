"""Records with plausible contents, unique ids unless given."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from storage.records import DecisionRecord, FeedbackRecord, JsonDocument


def make_decision(
    decision_id: str | None = None,
    *,
    cluster_id: str = "cluster-a",
    profile: str = "tiresias",
    created_at: datetime | None = None,
    snapshot: JsonDocument | None = None,
    **overrides: Any,
) -> DecisionRecord:
    fields: dict[str, Any] = {
        "decision_id": decision_id or f"d-{uuid.uuid4().hex}",
        "cluster_id": cluster_id,
        "profile": profile,
        "created_at": created_at or datetime.now(UTC),
        "now": 1_700_000_000.5,
        "stages": ["admission", "ordering", "scaling", "placement"],
        "policies": {"ordering": {"name": "tiresias", "version": "1"}},
        "snapshot": snapshot
        if snapshot is not None
        else {"cluster_id": cluster_id, "nodes": [{"id": "n1", "gpus": 8}], "jobs": []},
        "decision": {"ordering": [], "pending": [], "fallback": None},
        "latency_ms": 1.25,
    }
    fields.update(overrides)
    return DecisionRecord(**fields)


def make_feedback(
    event_id: str | None = None,
    *,
    decision_id: str | None = None,
    kind: str = "job_finished",
    received_at: datetime | None = None,
    **overrides: Any,
) -> FeedbackRecord:
    fields: dict[str, Any] = {
        "event_id": event_id or f"e-{uuid.uuid4().hex}",
        "kind": kind,
        "cluster_id": "cluster-a",
        "payload": {"job_id": "j1", "finished_at": 1_700_000_100.0},
        "decision_id": decision_id,
        "job_id": "j1",
        "occurred_at": 1_700_000_100.0,
        "received_at": received_at or datetime.now(UTC),
    }
    fields.update(overrides)
    return FeedbackRecord(**fields)
