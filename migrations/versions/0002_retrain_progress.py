"""Retrain jobs report progress and when they started and finished.

Revision ID: 0002
Revises: 0001
Created: hand-written; checked against storage.models by tests/storage/test_migrations.py

All three columns are nullable, so existing rows need no backfill and the upgrade
is a metadata-only change on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    """JSONB on PostgreSQL, JSON text on SQLite."""
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop columns in place on downgrade; on
    # PostgreSQL it issues plain ALTER TABLE statements.
    with op.batch_alter_table("retrain_jobs") as batch:
        batch.add_column(
            sa.Column("progress", _json(), nullable=True, comment="{stage, fraction} while it runs")
        )
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("retrain_jobs") as batch:
        batch.drop_column("finished_at")
        batch.drop_column("started_at")
        batch.drop_column("progress")
