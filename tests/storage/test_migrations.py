"""The Alembic revisions build exactly the schema the models describe, on both dialects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from storage.db import alembic_config, create_engine_for, upgrade_database
from storage.models import Base

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLES = {"decisions", "feedback_events", "model_versions", "retrain_jobs"}


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


def _current_revision(url: str) -> str | None:
    engine = create_engine_for(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def test_there_is_a_single_head() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def test_upgrade_creates_every_table_from_empty(empty_database_url: str) -> None:
    assert _current_revision(empty_database_url) is None

    upgrade_database(empty_database_url)
    upgrade_database(empty_database_url)  # a second run is a no-op

    engine = create_engine_for(empty_database_url)
    try:
        assert set(inspect(engine).get_table_names()) == TABLES | {"alembic_version"}
    finally:
        engine.dispose()
    assert _current_revision(empty_database_url) == _head()


def test_models_match_the_migrations(database_url: str) -> None:
    engine = create_engine_for(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_downgrade_to_base_and_back_to_head(empty_database_url: str) -> None:
    upgrade_database(empty_database_url)
    command.downgrade(alembic_config(empty_database_url), "base")

    engine = create_engine_for(empty_database_url)
    try:
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
    upgrade_database(empty_database_url)
    assert _current_revision(empty_database_url) == _head()


def test_replicas_starting_together_migrate_once(empty_postgres_url: str) -> None:
    """Several processes run the upgrade at the same moment; the advisory lock
    serialises them, so none fails on a table another has just created."""
    script = (
        "import sys\n"
        "from storage.db import upgrade_database\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        f"upgrade_database({empty_postgres_url!r})\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in processes:  # wait until all have imported everything
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    failures = []
    for process in processes:  # then release them together
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in processes:
        _, stderr = process.communicate(timeout=120)
        if process.returncode != 0:
            failures.append(stderr)

    assert failures == []
    assert _current_revision(empty_postgres_url) == _head()
