"""Fixtures shared by every test package: real PostgreSQL and Redis, and throwaway servers.

Shared services (``ARBITER_TEST_POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``; ``ARBITER_TEST_REDIS_URL``, default
``redis://127.0.0.1:6379/0``) are used without being changed: each test session creates
its own database ``arbiter_test_<random>`` and drops it at the end, and Redis keys live
under a unique prefix that is deleted afterwards. Outage tests start their own servers
(see :mod:`tests.servers`).

When a service cannot be reached, tests that need it fail under CI (``CI=true``) with a
message saying what to start, and are skipped elsewhere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from storage.db import create_engine_for, upgrade_database
from tests.servers import ServerUnavailableError, ThrowawayPostgres, ThrowawayRedis

POSTGRES_URL = os.environ.get(
    "ARBITER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("ARBITER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DIALECTS = ("sqlite", "postgresql")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def service_unavailable(message: str) -> NoReturn:
    """Fail under CI (where every storage test must run), skip elsewhere."""
    if in_ci():
        pytest.fail(f"{message} (CI=true: storage tests must not be skipped)", pytrace=False)
    pytest.skip(message)


def _admin_url() -> str:
    return POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://", 1)


def _check_postgres() -> None:
    try:
        with psycopg.connect(_admin_url(), connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        service_unavailable(
            f"PostgreSQL not reachable at {POSTGRES_URL} ({error}); start it or set "
            "ARBITER_TEST_POSTGRES_URL"
        )


def create_postgres_database() -> str:
    """A new, empty database on the shared server; returns its URL."""
    name = f"arbiter_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_admin_url(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = _admin_url().rpartition("/")
    return f"{base}/{name}"


def drop_postgres_database(url: str) -> None:
    name = url.rpartition("/")[2]
    with psycopg.connect(_admin_url(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_available() -> None:
    _check_postgres()


@pytest.fixture
def empty_postgres_url(postgres_available: None) -> Iterator[str]:
    """A fresh database with no tables, dropped after the test."""
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def postgres_url(postgres_available: None) -> Iterator[str]:
    """A database migrated to head, shared by the session's tests."""
    url = create_postgres_database()
    try:
        upgrade_database(url)
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
def fresh_postgres_url(postgres_available: None) -> Iterator[str]:
    """A database of the test's own, migrated to head: for tests that count what they wrote."""
    url = create_postgres_database()
    try:
        upgrade_database(url)
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite file migrated to head, shared by the session's tests."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'arbiter.db'}"
    upgrade_database(url)
    return url


@pytest.fixture
def empty_sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'empty.db'}"


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated database of each dialect in turn."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture(params=DIALECTS)
def empty_database_url(request: pytest.FixtureRequest) -> str:
    """An empty database of each dialect in turn."""
    fixture = "empty_sqlite_url" if request.param == "sqlite" else "empty_postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_engine_for(database_url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test."""
    with engine.connect() as connection:
        transaction = connection.begin()
        with Session(bind=connection, expire_on_commit=False) as db_session:
            yield db_session
        transaction.rollback()


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        service_unavailable(
            f"Redis not reachable at {REDIS_URL} ({error}); start it or set ARBITER_TEST_REDIS_URL"
        )
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    prefix = f"arbiter-test-{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A private PostgreSQL server, started and migrated; stopped and removed after."""
    try:
        server = ThrowawayPostgres()
    except ServerUnavailableError as error:
        service_unavailable(str(error))
    try:
        server.init()
        server.start()
        upgrade_database(server.url)
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def throwaway_redis() -> Iterator[ThrowawayRedis]:
    """A private redis-server, started; killed after."""
    try:
        server = ThrowawayRedis()
    except ServerUnavailableError as error:
        service_unavailable(str(error))
    try:
        server.start()
        yield server
    finally:
        server.cleanup()
