"""Records survive the trip through a spill line unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from storage.records import DecisionRecord, FeedbackRecord, decode_spill_line, encode_spill_line
from tests.storage.factories import make_decision, make_feedback

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


@settings(max_examples=40, deadline=None)  # generation is the slow part here
@given(snapshot=json_objects, decision=json_objects, action_probs=st.none() | json_objects)
def test_a_decision_survives_a_spill_line(
    snapshot: dict[str, Any], decision: dict[str, Any], action_probs: dict[str, Any] | None
) -> None:
    record = make_decision(snapshot=snapshot, decision=decision, action_probs=action_probs)

    line = encode_spill_line(record)

    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode_spill_line(line) == record


def test_raw_json_bytes_are_embedded_without_re_encoding() -> None:
    raw = b'{"nodes":[{"id":"n1","gpus":8}],"jobs":[]}'
    record = make_decision(snapshot=raw)

    line = encode_spill_line(record)

    assert raw in line
    decoded = decode_spill_line(line)
    assert isinstance(decoded, DecisionRecord)
    assert decoded.snapshot == orjson.loads(raw)


def test_timestamps_come_back_as_the_same_instant_in_utc() -> None:
    local = datetime(2025, 3, 1, 21, 0, tzinfo=timezone(timedelta(hours=9)))
    decision = decode_spill_line(encode_spill_line(make_decision(created_at=local)))
    feedback = decode_spill_line(encode_spill_line(make_feedback(received_at=local)))

    assert isinstance(decision, DecisionRecord)
    assert decision.created_at == local
    assert decision.created_at.tzinfo == UTC
    assert isinstance(feedback, FeedbackRecord)
    assert feedback.received_at == local


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b'{"type": "weather"}\n', b'{"type": "decision", "decision_id": "x"}\n'],
)
def test_a_line_that_is_no_record_is_refused(line: bytes) -> None:
    with pytest.raises(ValueError, match="not a spill line"):
        decode_spill_line(line)


def test_a_pydantic_model_in_a_document_is_stored_as_its_json() -> None:
    class Node(BaseModel):
        id: str
        gpus: int

    record = make_decision(snapshot={"nodes": [Node(id="n1", gpus=8)]})

    decoded = decode_spill_line(encode_spill_line(record))

    assert isinstance(decoded, DecisionRecord)
    assert decoded.snapshot == {"nodes": [{"id": "n1", "gpus": 8}]}
