"""Compressed JSON documents in SQLite's decision log.

A logged decision keeps two large documents, the snapshot as the caller sent it and the
decision as it was answered: some 30 KB of JSON for the 16-node example. PostgreSQL
compresses JSONB values that large by itself (TOAST); SQLite stores JSON columns as
plain text, and writing it (B-tree overflow pages, the write-ahead log, then the
database file) took a third of the CPU of a small decision served on embedded
defaults (docs/benchmarks.md, "The decision log on SQLite, compressed").

So on SQLite the log's writer stores these two documents as Zstandard frames, BLOBs in
the same JSON-typed columns (SQLite keeps a value's own storage class), about a seventh
of their size. A batch is compressed in one call that releases the interpreter for all
of it: compressing one document per call would hand the interpreter back and forth with
the request thread a thousand times a batch. The engine's JSON deserializer reads both
forms, so rows written as text before stay readable and nothing needs migrating.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import zstandard

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first four bytes of every Zstandard frame (RFC 8878, section 3.1.1)."""

LEVEL = 1
"""Zstandard's fastest standard level. On the small example's request body (16,316
bytes) it made a frame of 2,369 bytes in 15 µs; level 3 made 2,376 bytes in 17 µs."""


class CompressedDocument(bytes):
    """A JSON document as one Zstandard frame; bound to a JSON column as a BLOB, as is."""

    __slots__ = ()


def compress_documents(documents: Sequence[bytes]) -> list[CompressedDocument]:
    """Each of `documents` (JSON text as bytes) as one Zstandard frame, in order.

    One call for the whole batch, outside the interpreter lock; a compressor of its own
    per call, since a compressor must not be shared between threads.
    """
    if not documents:
        return []
    frames = zstandard.ZstdCompressor(level=LEVEL).multi_compress_to_buffer(
        list(documents), threads=0
    )
    return [CompressedDocument(frames[i].tobytes()) for i in range(len(frames))]


def load_json_document(value: str | bytes) -> Any:
    """A JSON column's value as read from SQLite: JSON text, or a Zstandard frame of it."""
    if isinstance(value, bytes) and value.startswith(ZSTD_MAGIC):
        value = zstandard.ZstdDecompressor().decompress(value)
    return orjson.loads(value)
