"""Engine set-up, URL normalisation and the prestart wait."""

from __future__ import annotations

import ctypes
import ctypes.util
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from storage.db import (
    DatabaseUnavailableError,
    create_engine_for,
    make_sessionmaker,
    normalize_database_url,
    wait_for_database,
)
from tests.servers import free_port


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p@db:5432/arbiter", "postgresql+psycopg://u:p@db:5432/arbiter"),
        ("postgres://u:p%40ss@db/arbiter", "postgresql+psycopg://u:p%40ss@db/arbiter"),
        ("postgresql+psycopg://u@db/arbiter", "postgresql+psycopg://u@db/arbiter"),
        ("sqlite:///var/arbiter.db", "sqlite:///var/arbiter.db"),
        ("sqlite:////abs/arbiter.db", "sqlite:////abs/arbiter.db"),
    ],
)
def test_plain_postgres_urls_use_psycopg3(url: str, expected: str) -> None:
    assert normalize_database_url(url) == expected


def test_sqlite_engine_uses_wal_and_foreign_keys(sqlite_url: str) -> None:
    engine = create_engine_for(sqlite_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        engine.dispose()


def test_in_memory_sqlite_is_one_database_for_every_thread() -> None:
    engine = create_engine_for("sqlite://")
    sessions = make_sessionmaker(engine)
    with sessions.begin() as session:
        session.execute(text("CREATE TABLE t (x INTEGER)"))
        session.execute(text("INSERT INTO t VALUES (1)"))
    seen: list[int] = []

    def read() -> None:
        with sessions() as session:
            seen.append(session.execute(text("SELECT count(*) FROM t")).scalar_one())

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    engine.dispose()
    assert seen == [1]


def test_wait_for_database_returns_once_it_answers(postgres_url: str, sqlite_url: str) -> None:
    wait_for_database(postgres_url, timeout_s=5)
    wait_for_database(sqlite_url, timeout_s=5)


def test_wait_for_database_gives_up_with_the_last_error() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/arbiter"
    started = time.monotonic()

    with pytest.raises(DatabaseUnavailableError, match=r"not reachable after 0\.5s"):
        wait_for_database(url, timeout_s=0.5)
    assert time.monotonic() - started < 5


def test_postgres_outage_fails_fast() -> None:
    engine = create_engine_for(f"postgresql://postgres@127.0.0.1:{free_port()}/arbiter")
    started = time.monotonic()
    with pytest.raises(Exception, match="refused"), engine.connect():
        pass
    engine.dispose()
    assert time.monotonic() - started < 2


def _sqlite_library() -> ctypes.CDLL | None:
    """The SQLite library Python's sqlite3 module uses, if ctypes reaches the same copy."""
    name = ctypes.util.find_library("sqlite3")
    if name is None:
        return None
    library = ctypes.CDLL(name)
    library.sqlite3_libversion.restype = ctypes.c_char_p
    library.sqlite3_memory_used.restype = ctypes.c_int64
    if library.sqlite3_libversion().decode() != sqlite3.sqlite_version:
        return None  # a different copy: its counters say nothing about this module's
    return library


def test_sqlite_keeps_no_copy_of_inserted_rows_after_the_insert(tmp_path: Path) -> None:
    # The decision log inserts batches of 0.5-1 MB snapshots in one multi-row INSERT;
    # each batch size is its own statement. A statement cache would keep the last values
    # bound to each of them, so SQLite's memory grew with every new batch size seen.
    library = _sqlite_library()
    if library is None:
        pytest.skip("SQLite is linked statically here: its memory counter is not reachable")
    engine = create_engine_for(f"sqlite:///{tmp_path / 'big.db'}")
    blob = b"x" * (512 << 10)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE big (id INTEGER PRIMARY KEY, body BLOB)"))
        before = library.sqlite3_memory_used()
        for rows in range(1, 13):  # 78 rows (39 MiB) in 12 statements of different shapes
            values = ", ".join(f"(:b{i})" for i in range(rows))
            with engine.begin() as connection:
                connection.execute(
                    text(f"INSERT INTO big (body) VALUES {values}"),
                    {f"b{i}": blob for i in range(rows)},
                )
        held = library.sqlite3_memory_used() - before
    finally:
        engine.dispose()
    assert held < 8 << 20, f"SQLite still holds {held >> 20} MiB after the inserts"
