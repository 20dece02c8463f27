"""Engines, sessions and schema upgrades for SQLite and PostgreSQL.

Everything takes an explicit URL; nothing is built at import time.

* :func:`create_engine_for` sets each dialect up the way Arbiter needs: SQLite in WAL
  mode with foreign keys on and usable from the decision log's thread; PostgreSQL
  through psycopg 3 with a pre-ping and a short connect timeout, so that an outage
  fails fast instead of hanging a request or the log's writer. Both encode JSON with
  orjson (see :mod:`storage.records` for raw-bytes documents).
* :func:`upgrade_database` runs ``alembic upgrade head`` from the migrations shipped in
  the :mod:`migrations` package, holding a lock so that replicas starting together
  migrate once: a PostgreSQL advisory lock, or an exclusive ``flock`` on a file beside
  a SQLite database.
* :func:`wait_for_database` is the prestart step: poll until a connection succeeds.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from collections.abc import Callable, Iterator
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, make_url, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool, StaticPool

from storage.compression import CompressedDocument, load_json_document
from storage.records import dump_json

if TYPE_CHECKING:
    from alembic.config import Config

logger = logging.getLogger(__name__)

POSTGRES_CONNECT_TIMEOUT_S = 3
"""psycopg ``connect_timeout``: how long an unreachable server may hold a caller."""

MIGRATION_LOCK_KEY = 0x4172626974657201
"""``pg_advisory_lock`` key held while migrating (``"Arbiter"`` + 1, as 64 bits)."""

_PLAIN_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def normalize_database_url(url: str) -> str:
    """Use the psycopg 3 driver for a plain PostgreSQL URL; leave any other URL as is.

    ``postgres://`` (Heroku-style) and ``postgresql://`` become ``postgresql+psycopg://``.
    """
    for scheme in _PLAIN_POSTGRES_SCHEMES:
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    return url


def _sqlite_json_serializer(value: object) -> str | bytes:
    # SQLite JSON columns hold text; a compressed document is stored as a BLOB, as is
    # (storage.compression), and read back by `load_json_document`.
    if isinstance(value, CompressedDocument):
        return bytes(value)
    return dump_json(value).decode()


def _is_sqlite_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or "mode=memory" in str(url)


def create_engine_for(url: str, **engine_options: Any) -> Engine:
    """An engine for ``url`` (normalised), configured for its dialect.

    ``engine_options`` are passed to :func:`sqlalchemy.create_engine` and win over the
    defaults chosen here (``poolclass``, ``pool_size`` …).
    """
    parsed = make_url(normalize_database_url(url))
    options: dict[str, Any] = {"json_deserializer": orjson.loads}
    if parsed.get_backend_name() == "sqlite":
        options["json_serializer"] = _sqlite_json_serializer
        options["json_deserializer"] = load_json_document
        # No statement cache: a cached SQLite statement keeps a copy of the values last
        # bound to it until it is used again, and the log's multi-row INSERTs are one
        # statement per batch size, so the cache held up to a hundred-odd batches of
        # snapshots (hundreds of MB on large clusters) for the life of the process.
        # Preparing a statement again costs microseconds against the insert itself.
        options["connect_args"] = {
            "check_same_thread": False,
            "timeout": 15,
            "cached_statements": 0,
        }
        if _is_sqlite_memory(parsed):
            # One shared connection, or every thread would see its own empty database.
            options["poolclass"] = StaticPool
    elif parsed.get_backend_name() == "postgresql":
        options["json_serializer"] = dump_json
        options["pool_pre_ping"] = True
        options["connect_args"] = {
            "connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
            "application_name": "arbiter",
        }
        # Keeps one multi-row INSERT of large snapshots well under the protocol limits.
        options["insertmanyvalues_page_size"] = 100
    options.update(engine_options)
    engine = create_engine(parsed, **options)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _configure_sqlite_connection)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine`` whose objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def migrations_directory() -> Path:
    """Where the Alembic environment shipped in the ``migrations`` package lives."""
    return Path(str(files("migrations")))


def alembic_config(url: str, connection: Connection | None = None) -> Config:
    """An Alembic ``Config`` built in code (no ``alembic.ini``) for ``url``.

    With ``connection``, ``migrations/env.py`` runs on that connection instead of
    opening its own.
    """
    # Alembic is imported here, not at the top: it costs about half a second, and
    # only the upgrade step needs it, not every process that opens a session.
    from alembic.config import Config  # noqa: PLC0415

    config = Config()
    config.set_main_option("script_location", str(migrations_directory()))
    # ConfigParser interpolates '%', which URL-encoded passwords contain.
    config.set_main_option("sqlalchemy.url", normalize_database_url(url).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_database(url: str) -> None:
    """Bring the schema at ``url`` to the newest revision; safe to run concurrently."""
    from alembic import command  # noqa: PLC0415 (see alembic_config)

    engine = create_engine_for(url, poolclass=NullPool)
    try:
        with engine.connect() as connection, _migration_lock(connection):
            command.upgrade(alembic_config(url, connection), "head")
            connection.commit()
    finally:
        engine.dispose()


def schema_is_current(engine: Engine, url: str) -> bool:
    """Whether the database behind ``engine`` is at the newest revision (tables made by
    ``arbiter db upgrade`` or the service's start). Raises SQLAlchemyError when the
    database cannot be reached."""
    from alembic.runtime.migration import MigrationContext  # noqa: PLC0415 (see alembic_config)
    from alembic.script import ScriptDirectory  # noqa: PLC0415

    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current == head


@contextlib.contextmanager
def _migration_lock(connection: Connection) -> Iterator[None]:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        # Session-level lock: it outlives the transactions Alembic commits.
        connection.execute(select(text(f"pg_advisory_lock({MIGRATION_LOCK_KEY})")))
        connection.commit()
        try:
            yield
        finally:
            connection.rollback()
            connection.execute(select(text(f"pg_advisory_unlock({MIGRATION_LOCK_KEY})")))
            connection.commit()
    elif dialect == "sqlite" and not _is_sqlite_memory(connection.engine.url):
        database = Path(str(connection.engine.url.database))
        with open(database.with_name(database.name + ".migrate.lock"), "a") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
    else:
        yield


class DatabaseUnavailableError(RuntimeError):
    """The database did not accept a connection in the time allowed."""


def wait_for_database(
    url: str,
    timeout_s: float = 60.0,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once ``url`` accepts a connection and ``SELECT 1``; raise
    :class:`DatabaseUnavailableError` (naming the last error) after ``timeout_s``."""
    engine = create_engine_for(url, poolclass=NullPool)
    deadline = time.monotonic() + timeout_s
    delay_s = 0.1
    try:
        while True:
            try:
                with engine.connect() as connection:
                    connection.execute(text("SELECT 1"))
                return
            except SQLAlchemyError as error:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    raise DatabaseUnavailableError(
                        f"database {engine.url.render_as_string(hide_password=True)} "
                        f"not reachable after {timeout_s:g}s: {error}"
                    ) from error
                logger.info("database not ready yet (%s); retrying", type(error).__name__)
                sleep(min(delay_s, remaining_s))
                delay_s = min(delay_s * 2, 2.0)
    finally:
        engine.dispose()
