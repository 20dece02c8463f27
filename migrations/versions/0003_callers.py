"""Decisions and feedback events record their caller (ARBITER_API_TOKENS).

Revision ID: 0003
Revises: 0002
Created: hand-written; checked against storage.models by tests/storage/test_migrations.py

Both columns are nullable (no tokens, no caller), so existing rows need no backfill and
the upgrade is a metadata-only change on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(
            sa.Column(
                "caller",
                sa.String(64),
                nullable=True,
                comment="who asked (ARBITER_API_TOKENS); null without tokens",
            )
        )
    with op.batch_alter_table("feedback_events") as batch:
        batch.add_column(
            sa.Column(
                "caller",
                sa.String(64),
                nullable=True,
                comment="who reported it (ARBITER_API_TOKENS); null without tokens",
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("feedback_events") as batch:
        batch.drop_column("caller")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("caller")
