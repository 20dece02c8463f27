"""SQLAlchemy 2 typed mappings of every table Arbiter owns.

The schema is created by the Alembic revisions in :mod:`migrations`, never by
``metadata.create_all``; ``tests/storage`` checks that these mappings and the
migrations agree. Constraint and index names come from one naming convention so that
later migrations can refer to them by a predictable name on every dialect.

Types chosen to behave the same on PostgreSQL and SQLite:

* JSON columns are JSONB on PostgreSQL and JSON text on SQLite; Python ``None`` is
  stored as SQL ``NULL`` (not the JSON literal ``null``).
* Timestamps are timezone-aware UTC on the way in and out. SQLite keeps no zone, so
  they are stored there as naive UTC and given their zone back when read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JSON_DOCUMENT: TypeEngine[Any] = JSON(none_as_null=True).with_variant(
    JSONB(none_as_null=True), "postgresql"
)
"""A JSON value: JSONB on PostgreSQL, JSON text elsewhere; ``None`` is SQL NULL."""


class UTCDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that always reads and writes aware UTC datetimes.

    A naive datetime handed in is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        moment = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        # SQLite stores the wall-clock text only; naive UTC keeps comparisons right.
        return moment.replace(tzinfo=None) if dialect.name == "sqlite" else moment

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime()}  # noqa: RUF012 (SQLAlchemy reads it)


class Decision(Base):
    """A served decision with everything needed to replay or learn from it."""

    __tablename__ = "decisions"
    __table_args__ = (
        Index(None, "cluster_id", "created_at"),
        Index(None, "created_at"),
        Index(None, "profile"),
    )

    decision_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(String(255))
    profile: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime]
    now: Mapped[float] = mapped_column(Double, comment="seconds on the caller's clock")
    stages: Mapped[list[str]] = mapped_column(JSON_DOCUMENT)
    policies: Mapped[dict[str, Any]] = mapped_column(
        JSON_DOCUMENT, comment="stage -> {name, version}"
    )
    snapshot: Mapped[dict[str, Any]] = mapped_column(JSON_DOCUMENT)
    decision: Mapped[dict[str, Any]] = mapped_column(JSON_DOCUMENT)
    action_probs: Mapped[dict[str, Any] | None] = mapped_column(JSON_DOCUMENT)
    shadow: Mapped[dict[str, Any] | None] = mapped_column(
        JSON_DOCUMENT, comment="a learned policy's decision logged beside the served one"
    )
    latency_ms: Mapped[float] = mapped_column(Double)
    fallback: Mapped[dict[str, Any] | None] = mapped_column(JSON_DOCUMENT)
    caller: Mapped[str | None] = mapped_column(
        String(64), comment="who asked (ARBITER_API_TOKENS); null without tokens"
    )


class FeedbackEvent(Base):
    """An outcome reported by the caller. No foreign key to ``decisions``: feedback
    may arrive before the decision it refers to has been written by the log."""

    __tablename__ = "feedback_events"
    __table_args__ = (
        Index(None, "decision_id"),
        Index(None, "cluster_id", "received_at"),
    )

    event_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    cluster_id: Mapped[str] = mapped_column(String(255))
    decision_id: Mapped[str | None] = mapped_column(String(128))
    job_id: Mapped[str | None] = mapped_column(String(255))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON_DOCUMENT)
    occurred_at: Mapped[float | None] = mapped_column(
        Double, comment="seconds on the caller's clock"
    )
    received_at: Mapped[datetime]
    caller: Mapped[str | None] = mapped_column(
        String(64), comment="who reported it (ARBITER_API_TOKENS); null without tokens"
    )


class ModelVersion(Base):
    """Trained weights of a learned policy (tensors only, e.g. safetensors bytes).

    At most one version per policy is active. :class:`storage.repositories.
    ModelVersionRepository` maintains that; the partial unique index is the backstop
    that makes a racing second activation fail instead of leaving two.
    """

    __tablename__ = "model_versions"
    __table_args__ = (
        UniqueConstraint("policy", "version"),
        Index(
            "ix_model_versions_one_active_per_policy",
            "policy",
            unique=True,
            postgresql_where=text("active"),
            sqlite_where=text("active"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    policy: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(64))
    weights: Mapped[bytes] = mapped_column(LargeBinary)
    meta: Mapped[dict[str, Any]] = mapped_column(
        "metadata",
        JSON_DOCUMENT,
        comment="training data window, metrics, parent version",
    )
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    active: Mapped[bool] = mapped_column(Boolean, default=False)


class RetrainStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RetrainJob(Base):
    """One request to retrain a policy, and what came of it."""

    __tablename__ = "retrain_jobs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed')",
            name="status",
        ),
        Index(None, "policy", "created_at"),
        Index(None, "status"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    policy: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    params: Mapped[dict[str, Any]] = mapped_column(JSON_DOCUMENT)
    version: Mapped[str | None] = mapped_column(String(64))
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON_DOCUMENT)
    error: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[dict[str, Any] | None] = mapped_column(
        JSON_DOCUMENT, comment="{stage, fraction} while it runs"
    )
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
