"""The fast decoder and the published JSON schema accept and reject the same bodies.

Requests are decoded by msgspec straight from their bytes; the OpenAPI spec publishes
the JSON schema msgspec generates from the same types, and the error path lists every
problem by validating against that schema. Both come from one definition, and these
properties check that they agree: a body is accepted by one exactly when it is by the
other, and the decoder's first problem is among those the schema reports, at the same
JSON path.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import decoder_problem, schema_problems
from app.schemas import DecisionRequest
from policies.model import decode
from tests.api.conftest import small_snapshot

# Values a caller might send where something else is expected.
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=5),
    st.lists(st.integers(min_value=-3, max_value=70), max_size=3),
    st.just({}),
    st.sampled_from(["pending", "running", "suspended", "training", "inference", "sigmoid"]),
)


def _paths(document: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every location in a JSON document (objects' keys and arrays' items)."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found += _paths(value, (*prefix, i))
    return found


def _body() -> dict[str, Any]:
    snapshot = small_snapshot()
    snapshot["jobs"][1].update(min_workers=2, max_workers=8, utility=None, priority=1)
    snapshot["tenants"] = [{"id": "default", "weight": 1.0, "gpu_quota": 8}]
    return {"profile": "fifo", "snapshot": snapshot, "stages": ["ordering"], "seed": 0}


LOCATIONS = _paths(_body())


def _set(document: Any, path: tuple[str | int, ...], value: Any) -> None:
    target = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


def _json_path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _decoder_verdict(body: dict[str, Any]) -> str | None:
    """None when the decoder accepts `body`, else the JSON path of its first problem."""
    try:
        decode(orjson.dumps(body), DecisionRequest)
    except msgspec.ValidationError as error:
        return decoder_problem(error).path
    return None


@settings(max_examples=300, deadline=None)
@given(
    location=st.sampled_from(LOCATIONS),
    value=ODD_VALUES,
    unknown_key=st.booleans(),
)
def test_decoder_and_schema_accept_and_reject_the_same_bodies(
    location: tuple[str | int, ...], value: Any, unknown_key: bool
) -> None:
    body = copy.deepcopy(_body())
    if unknown_key and isinstance(location[-1], str):
        _set(body, (*location[:-1], "colour"), value)  # a key no type declares
    else:
        _set(body, location, value)

    decoder = _decoder_verdict(body)
    schema = [p.path for p in schema_problems(body, DecisionRequest)]

    if decoder is None:
        assert schema == [], f"decoder accepts, schema refuses at {schema}"
    else:
        assert schema, f"decoder refuses at {decoder}, schema accepts"
        assert decoder in schema, (decoder, schema)


def test_the_untouched_body_is_accepted_by_both() -> None:
    body = _body()
    assert _decoder_verdict(body) is None
    assert schema_problems(body, DecisionRequest) == []
    assert _json_path(("snapshot", "jobs", 1, "workers")) == "snapshot.jobs[1].workers"
