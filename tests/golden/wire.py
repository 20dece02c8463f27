"""The golden set's one translation between the core's types and JSON (the wire format)."""

from __future__ import annotations

import json
from typing import Any

from policies.decision import Decision
from policies.model import Snapshot
from policies.reclaim_models import ReclaimRequest, ReclaimResult


def snapshot_json(snapshot: Snapshot) -> Any:
    return json.loads(snapshot.model_dump_json())


def decision_json(decision: Decision) -> Any:
    return json.loads(decision.model_dump_json())


def reclaim_json(answer: ReclaimResult) -> Any:
    return json.loads(answer.model_dump_json())


def snapshot_from(data: Any) -> Snapshot:
    return Snapshot.model_validate_json(json.dumps(data))


def reclaim_request_from(data: Any) -> ReclaimRequest:
    return ReclaimRequest.model_validate_json(json.dumps(data))
