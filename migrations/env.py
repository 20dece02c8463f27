"""Alembic environment: runs the revisions against the connection it is handed.

:func:`storage.db.upgrade_database` passes an open connection (already holding the
migration lock) in ``config.attributes["connection"]``. Without one, an engine is made
from the ``sqlalchemy.url`` option. ``--sql`` (offline) mode renders the SQL instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.pool import NullPool

from storage.db import create_engine_for
from storage.models import Base

TARGET_METADATA = Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=TARGET_METADATA,
        # SQLite alters tables by copying them; batch mode makes revisions portable.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=TARGET_METADATA,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if isinstance(connection, Connection):
        _configure_and_run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection given and no sqlalchemy.url configured")
    engine = create_engine_for(url, poolclass=NullPool)
    try:
        with engine.connect() as own_connection:
            _configure_and_run(own_connection)
            own_connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
