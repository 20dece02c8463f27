"""The decision log's documents on SQLite are stored compressed, and read back whole."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
import zstandard
from sqlalchemy import text
from sqlalchemy.orm import Session

from storage.compression import ZSTD_MAGIC, compress_documents, load_json_document
from storage.repositories import DecisionRepository
from tests.storage.factories import make_decision

SNAPSHOT = {
    "cluster_id": "cluster-a",
    "now": 100.0,
    "nodes": [{"id": f"n{i}", "gpu_type": "V100", "gpus": 8} for i in range(40)],
    "jobs": [{"id": f"j{i}", "workers": 1, "state": "pending"} for i in range(80)],
    "ünïcode": "✓",
}
DECISION = {"ordering": [f"j{i}" for i in range(80)], "pending": [], "fallback": None}


ON_SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
ON_POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def _stored(session: Session, column: str, decision_id: str) -> str | bytes:
    """A column's value as SQLite holds it (text or BLOB), not through the JSON type."""
    value: str | bytes = session.execute(
        text(f"SELECT {column} FROM decisions WHERE decision_id = :id"), {"id": decision_id}
    ).scalar_one()
    return value


def test_documents_compress_to_frames_that_decompress_to_the_same_json() -> None:
    documents = [orjson.dumps(SNAPSHOT), orjson.dumps(DECISION), b"{}"]

    frames = compress_documents(documents)

    assert [zstandard.ZstdDecompressor().decompress(f) for f in frames] == documents
    assert all(f.startswith(ZSTD_MAGIC) for f in frames)
    assert compress_documents([]) == []


@ON_SQLITE
def test_sqlite_keeps_a_logged_snapshot_and_decision_as_zstandard_frames(
    session: Session,
) -> None:
    raw_snapshot = orjson.dumps(SNAPSHOT)
    record = make_decision("d-z", snapshot=raw_snapshot, decision=DECISION)

    DecisionRepository(session).add_many([record])

    stored = _stored(session, "snapshot", "d-z")
    assert isinstance(stored, bytes)
    assert stored.startswith(ZSTD_MAGIC)
    assert len(stored) * 4 < len(raw_snapshot)
    assert load_json_document(stored) == SNAPSHOT
    assert load_json_document(_stored(session, "decision", "d-z")) == DECISION
    # The small documents of the same row stay JSON text.
    assert isinstance(_stored(session, "policies", "d-z"), str)
    read = DecisionRepository(session).get("d-z")
    assert read is not None
    assert (read.snapshot, read.decision) == (SNAPSHOT, DECISION)


@ON_SQLITE
def test_rows_stored_as_json_text_before_compression_still_read_back(
    session: Session,
) -> None:
    session.execute(
        text(
            "INSERT INTO decisions (decision_id, cluster_id, profile, created_at, now, "
            "stages, policies, snapshot, decision, latency_ms) VALUES ('d-text', "
            "'cluster-a', 'fifo', :created, 1.0, :stages, '{}', :snapshot, :decision, 2.0)"
        ),
        {
            "created": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
            "stages": '["admission", "ordering", "scaling", "placement"]',
            "snapshot": orjson.dumps(SNAPSHOT).decode(),
            "decision": orjson.dumps(DECISION).decode(),
        },
    )
    DecisionRepository(session).add_many(
        [make_decision("d-new", snapshot=SNAPSHOT, created_at=datetime(2026, 1, 2, tzinfo=UTC))]
    )

    assert isinstance(_stored(session, "snapshot", "d-text"), str)
    documents = list(DecisionRepository(session).snapshots_and_decisions())
    assert [snapshot for snapshot, _ in documents] == [SNAPSHOT, SNAPSHOT]
    assert documents[0][1] == DECISION


@ON_POSTGRESQL
def test_postgresql_keeps_logged_documents_as_queryable_jsonb(session: Session) -> None:
    DecisionRepository(session).add_many(
        [make_decision("d-pg", snapshot=orjson.dumps(SNAPSHOT), decision=DECISION)]
    )

    kind, first_node = session.execute(
        text(
            "SELECT jsonb_typeof(snapshot), snapshot->'nodes'->0->>'id' "
            "FROM decisions WHERE decision_id = 'd-pg'"
        )
    ).one()
    assert (kind, first_node) == ("object", "n0")
    read = DecisionRepository(session).get("d-pg")
    assert read is not None
    assert read.snapshot == SNAPSHOT
