"""Initial schema: decisions, feedback events, model versions, retrain jobs.

Revision ID: 0001
Revises:
Created: hand-written; checked against storage.models by tests/storage/test_migrations.py

Types are spelled out here rather than imported from ``storage.models`` so that this
revision keeps meaning what it meant when later revisions change the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    """JSONB on PostgreSQL, JSON text on SQLite."""
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("decision_id", sa.String(128), nullable=False),
        sa.Column("cluster_id", sa.String(255), nullable=False),
        sa.Column("profile", sa.String(128), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("now", sa.Double(), nullable=False, comment="seconds on the caller's clock"),
        sa.Column("stages", _json(), nullable=False),
        sa.Column("policies", _json(), nullable=False, comment="stage -> {name, version}"),
        sa.Column("snapshot", _json(), nullable=False),
        sa.Column("decision", _json(), nullable=False),
        sa.Column("action_probs", _json(), nullable=True),
        sa.Column(
            "shadow",
            _json(),
            nullable=True,
            comment="a learned policy's decision logged beside the served one",
        ),
        sa.Column("latency_ms", sa.Double(), nullable=False),
        sa.Column("fallback", _json(), nullable=True),
        sa.PrimaryKeyConstraint("decision_id", name="pk_decisions"),
    )
    op.create_index("ix_decisions_cluster_id_created_at", "decisions", ["cluster_id", "created_at"])
    op.create_index("ix_decisions_created_at", "decisions", ["created_at"])
    op.create_index("ix_decisions_profile", "decisions", ["profile"])

    op.create_table(
        "feedback_events",
        sa.Column("event_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("cluster_id", sa.String(255), nullable=False),
        sa.Column("decision_id", sa.String(128), nullable=True),
        sa.Column("job_id", sa.String(255), nullable=True),
        sa.Column("payload", _json(), nullable=False),
        sa.Column(
            "occurred_at", sa.Double(), nullable=True, comment="seconds on the caller's clock"
        ),
        sa.Column("received_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_feedback_events"),
    )
    op.create_index("ix_feedback_events_decision_id", "feedback_events", ["decision_id"])
    op.create_index(
        "ix_feedback_events_cluster_id_received_at",
        "feedback_events",
        ["cluster_id", "received_at"],
    )

    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("policy", sa.String(128), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("weights", sa.LargeBinary(), nullable=False),
        sa.Column(
            "metadata",
            _json(),
            nullable=False,
            comment="training data window, metrics, parent version",
        ),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_model_versions"),
        sa.UniqueConstraint("policy", "version", name="uq_model_versions_policy_version"),
    )
    op.create_index(
        "ix_model_versions_one_active_per_policy",
        "model_versions",
        ["policy"],
        unique=True,
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )

    op.create_table(
        "retrain_jobs",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("policy", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("params", _json(), nullable=False),
        sa.Column("version", sa.String(64), nullable=True),
        sa.Column("metrics", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')",
            name="ck_retrain_jobs_status",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_retrain_jobs"),
    )
    op.create_index("ix_retrain_jobs_policy_created_at", "retrain_jobs", ["policy", "created_at"])
    op.create_index("ix_retrain_jobs_status", "retrain_jobs", ["status"])


def downgrade() -> None:
    op.drop_table("retrain_jobs")
    op.drop_table("model_versions")
    op.drop_table("feedback_events")
    op.drop_table("decisions")
