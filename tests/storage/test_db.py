"""Engine set-up, URL normalisation and the prestart wait."""

from __future__ import annotations

import threading
import time

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
