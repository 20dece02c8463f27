"""Plain records the app hands to storage, and their JSON encodings.

The app builds these without touching SQLAlchemy. A record knows two encodings:
the column values of its row (:meth:`DecisionRecord.to_row`), whose JSON columns the
engine's orjson serializer encodes, and one JSON line of a spill file
(:func:`encode_spill_line` / :func:`decode_spill_line`).

A snapshot or decision may be passed as pre-serialised JSON ``bytes`` (the request's
raw body, already validated by the app) so that it is stored without being decoded and
encoded again: such bytes travel as an :class:`orjson.Fragment`, which orjson embeds
verbatim. They are not re-validated here; a payload the database refuses as JSON is
set aside by the decision log (see :mod:`storage.log`), never silently dropped. A
model (a Struct or pydantic model, at the top or nested in a dict) is encoded by its own
encoder when
the row or line is written, on the log's thread rather than the request's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
from pydantic import BaseModel

from storage.compression import CompressedDocument

JsonObject = dict[str, Any]
JsonDocument = JsonObject | bytes | BaseModel | msgspec.Struct
"""A JSON document: a dict, pre-serialised bytes, or a model (Struct or pydantic) encoded
when written."""


def _encode_other(value: object) -> object:
    """orjson's hook for types it does not know: the core's Structs and pydantic models are
    encoded by their own encoders (so one passed where a dict is expected is still stored)."""
    if isinstance(value, msgspec.Struct):
        return orjson.Fragment(msgspec.json.encode(value))
    serializer = getattr(value, "__pydantic_serializer__", None)
    if serializer is not None and hasattr(value, "model_dump"):
        return orjson.Fragment(serializer.to_json(value))
    raise TypeError(f"type {type(value).__name__} is not JSON serializable")


def dump_json(value: object) -> bytes:
    """orjson with the options storage uses everywhere (non-string keys allowed)."""
    return orjson.dumps(value, default=_encode_other, option=orjson.OPT_NON_STR_KEYS)


_ENCODED_ALONE = (bytes, bytearray, memoryview, msgspec.Struct, BaseModel)
"""Documents encoded by themselves rather than as part of their row."""


def document_json(document: JsonDocument) -> bytes:
    """A document as JSON text: raw bytes as they are, a model by its own encoder."""
    if isinstance(document, bytes | bytearray | memoryview):
        return bytes(document)
    if isinstance(document, msgspec.Struct):
        return msgspec.json.encode(document)
    if isinstance(document, BaseModel):
        return document.__pydantic_serializer__.to_json(document)
    return dump_json(document)


def _json_value(document: JsonDocument) -> object:
    """A document as a value orjson can encode without re-encoding raw bytes.

    Raw bytes and models become fragments (a model encoded here, on the log's thread, so
    the request path never pays for it); a compressed document is bound as it is
    (:mod:`storage.compression`), and a dict is encoded with the row.
    """
    if isinstance(document, CompressedDocument) or not isinstance(document, _ENCODED_ALONE):
        return document
    return orjson.Fragment(document_json(document))


def _utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One served decision: what was asked, what was answered, by which policies."""

    decision_id: str
    cluster_id: str
    profile: str
    created_at: datetime
    now: float
    stages: list[str]
    policies: JsonObject
    snapshot: JsonDocument
    decision: JsonDocument
    latency_ms: float
    fallback: JsonObject | None = None
    action_probs: JsonObject | None = None
    shadow: JsonObject | None = None
    caller: str | None = None

    def to_row(self) -> dict[str, object]:
        """Column values for the ``decisions`` table (JSON columns not yet encoded)."""
        return {
            "decision_id": self.decision_id,
            "cluster_id": self.cluster_id,
            "profile": self.profile,
            "created_at": _utc(self.created_at),
            "now": self.now,
            "stages": list(self.stages),
            "policies": self.policies,
            "snapshot": _json_value(self.snapshot),
            "decision": _json_value(self.decision),
            "action_probs": self.action_probs,
            "shadow": self.shadow,
            "latency_ms": self.latency_ms,
            "fallback": self.fallback,
            "caller": self.caller,
        }


@dataclass(frozen=True, slots=True)
class FeedbackRecord:
    """One reported outcome (job finished, throughput observed, SLA met …)."""

    event_id: str
    kind: str
    cluster_id: str
    payload: JsonObject
    decision_id: str | None = None
    job_id: str | None = None
    occurred_at: float | None = None
    received_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    caller: str | None = None

    def to_row(self) -> dict[str, object]:
        """Column values for the ``feedback_events`` table."""
        return {
            "event_id": self.event_id,
            "kind": self.kind,
            "cluster_id": self.cluster_id,
            "decision_id": self.decision_id,
            "job_id": self.job_id,
            "payload": self.payload,
            "occurred_at": self.occurred_at,
            "received_at": _utc(self.received_at),
            "caller": self.caller,
        }


LogRecord = DecisionRecord | FeedbackRecord

_DECISION_TAG = "decision"
_FEEDBACK_TAG = "feedback"


def encode_spill_line(record: LogRecord) -> bytes:
    """One newline-terminated JSON line holding ``record`` (raw JSON bytes embedded as is)."""
    row = record.to_row()
    row["type"] = _DECISION_TAG if isinstance(record, DecisionRecord) else _FEEDBACK_TAG
    return dump_json(row) + b"\n"


def decode_spill_line(line: bytes) -> LogRecord:
    """The record a spill line holds; raises ``ValueError`` for a line that is not one."""
    try:
        fields = orjson.loads(line)
        kind = fields.pop("type")
        if kind == _DECISION_TAG:
            fields["created_at"] = datetime.fromisoformat(fields["created_at"])
            return DecisionRecord(**fields)
        if kind == _FEEDBACK_TAG:
            fields["received_at"] = datetime.fromisoformat(fields["received_at"])
            return FeedbackRecord(**fields)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a spill line: {error}") from error
    raise ValueError(f"not a spill line: unknown type {kind!r}")
