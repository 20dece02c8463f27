"""The golden set's one translation between the core's types and JSON (the wire format)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from policies.decision import Decision
from policies.model import Snapshot, decode, decode_snapshot, encode
from policies.protocols import StateValue
from policies.reclaim_models import ReclaimRequest, ReclaimResult


def snapshot_json(snapshot: Snapshot) -> Any:
    return json.loads(encode(snapshot))


def decision_json(decision: Decision) -> Any:
    return json.loads(encode(decision))


def state_json(state: Mapping[str, StateValue]) -> Any:
    """Policy state as the service stores it (a commit may return a Struct)."""
    return json.loads(encode(state))


def reclaim_json(answer: ReclaimResult) -> Any:
    return json.loads(encode(answer))


def snapshot_from(data: Any) -> Snapshot:
    return decode_snapshot(json.dumps(data))


def reclaim_request_from(data: Any) -> ReclaimRequest:
    return decode(json.dumps(data), ReclaimRequest)
