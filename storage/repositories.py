"""Repositories: every query Arbiter runs, one class per table.

A repository wraps a caller's :class:`~sqlalchemy.orm.Session` and never commits or
rolls back: the caller's unit of work (a request, a log batch, a retrain step) owns the
transaction. Repositories may flush, so that database errors surface at the call that
caused them.

Inserts of logged rows (decisions, feedback) are idempotent by primary key:
``INSERT … ON CONFLICT DO NOTHING`` on PostgreSQL and SQLite alike, so a replayed spill
file or a retried request never duplicates a row or fails on one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Insert, Select, Table, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session, defer

from storage.compression import compress_documents
from storage.models import (
    Decision,
    FeedbackEvent,
    ModelVersion,
    RetrainJob,
    RetrainStatus,
    utc_now,
)
from storage.records import DecisionRecord, FeedbackRecord, document_json


def _insert_ignoring_duplicates(
    session: Session, table: Table, rows: Sequence[Mapping[str, object]]
) -> int:
    """Insert ``rows``, skipping any whose primary key exists; return how many were new."""
    if not rows:
        return 0
    (key,) = table.primary_key.columns
    dialect = session.get_bind().dialect.name
    statement: Insert
    if dialect == "postgresql":
        statement = postgresql.insert(table).on_conflict_do_nothing(index_elements=[key])
    elif dialect == "sqlite":
        statement = sqlite.insert(table).on_conflict_do_nothing(index_elements=[key])
    else:  # pragma: no cover - only the two supported dialects reach here
        raise NotImplementedError(f"no idempotent insert for dialect {dialect!r}")
    # RETURNING yields only the rows actually inserted; rowcount is unreliable for
    # the batched multi-row form SQLAlchemy uses for executemany.
    inserted = session.execute(statement.returning(key), list(rows))
    return len(inserted.all())


def _feedback_of(
    kind: str, column: InstrumentedAttribute[Any], since: datetime | None, limit: int
) -> Select[tuple[str, Any, dict[str, Any]]]:
    """(cluster, `column`, payload) of the `kind` events received from ``since`` on, in the
    order received (ties by event id), at most `limit`."""
    events = (
        select(FeedbackEvent.cluster_id, column, FeedbackEvent.payload)
        .where(FeedbackEvent.kind == kind)
        .order_by(FeedbackEvent.received_at, FeedbackEvent.event_id)
        .limit(limit)
    )
    if since is not None:
        events = events.where(FeedbackEvent.received_at >= since)
    return events


def _finished_jobs(
    session: Session, since: datetime | None, limit: int
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``job_finished`` payloads received from ``since`` on, by (cluster, job), oldest first."""
    events = _feedback_of("job_finished", FeedbackEvent.job_id, since, limit)
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cluster_id, job_id, payload in session.execute(events):
        if job_id is not None and isinstance(payload, dict):
            out.setdefault((cluster_id, job_id), []).append(payload)
    return out


def _first_finishes(
    snapshot: Mapping[str, Any],
    finished: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    joined: set[tuple[str, str]],
) -> dict[str, Any]:
    """The finish events of the snapshot's jobs not joined to an earlier record (see
    :meth:`DecisionRepository.snapshots_and_decisions`); marks them joined."""
    out: dict[str, Any] = {}
    if not finished:
        return out
    cluster_id = snapshot.get("cluster_id", "default")
    for job in snapshot.get("jobs", ()):
        key = (cluster_id, job.get("id"))
        if key in joined or key not in finished:
            continue
        submitted = job.get("submit_time", 0.0)
        for payload in finished[key]:
            ended = payload.get("finished_at")
            if isinstance(ended, int | float) and ended >= submitted:
                out[key[1]] = payload
                joined.add(key)
                break
    return out


_Query = TypeVar("_Query", bound=Select[Any])


def _window(
    query: _Query,
    since: datetime | None,
    until: datetime | None,
    profile: str | None,
    exclude_callers: Sequence[str] = (),
) -> _Query:
    if exclude_callers:
        query = query.where(
            or_(Decision.caller.is_(None), Decision.caller.not_in(list(exclude_callers)))
        )
    if since is not None:
        query = query.where(Decision.created_at >= since)
    if until is not None:
        query = query.where(Decision.created_at < until)
    if profile is not None:
        query = query.where(Decision.profile == profile)
    return query


SCHEDULING_STAGES = frozenset({"admission", "ordering", "scaling", "placement"})
"""The stages of a logged scheduling decision; a reclaim or dispatch answer has others."""


def _table(model: type[Any]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


class DecisionRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add_many(self, records: Iterable[DecisionRecord]) -> int:
        """Insert decisions; ids already stored are skipped. Returns how many were new.

        On SQLite the snapshot and the decision are stored compressed
        (:mod:`storage.compression`); PostgreSQL compresses its JSONB itself.
        """
        records = list(records)
        if records and self._session.get_bind().dialect.name == "sqlite":
            frames = compress_documents(
                [document_json(d) for r in records for d in (r.snapshot, r.decision)]
            )
            records = [
                replace(record, snapshot=snapshot, decision=decision)
                for record, snapshot, decision in zip(
                    records, frames[::2], frames[1::2], strict=True
                )
            ]
        rows = [record.to_row() for record in records]
        return _insert_ignoring_duplicates(self._session, _table(Decision), rows)

    def get(self, decision_id: str) -> Decision | None:
        return self._session.get(Decision, decision_id)

    def count(self, cluster_id: str | None = None) -> int:
        query = select(func.count()).select_from(Decision)
        if cluster_id is not None:
            query = query.where(Decision.cluster_id == cluster_id)
        return self._session.scalar(query) or 0

    def list(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        profile: str | None = None,
        limit: int = 1000,
        *,
        cluster_id: str | None = None,
    ) -> Sequence[Decision]:
        """Decisions with ``since <= created_at < until``, oldest first (ties by id)."""
        query = _window(select(Decision), since, until, profile)
        if cluster_id is not None:
            query = query.where(Decision.cluster_id == cluster_id)
        query = query.order_by(Decision.created_at, Decision.decision_id).limit(limit)
        return self._session.scalars(query).all()

    def count_in_window(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        profile: str | None = None,
        exclude_callers: Sequence[str] = (),
    ) -> int:
        """How many decisions have ``since <= created_at < until`` (and ``profile``, and a
        caller not in ``exclude_callers``)."""
        query = select(func.count()).select_from(Decision)
        query = _window(query, since, until, profile, exclude_callers)
        return self._session.scalar(query) or 0

    def snapshots_and_decisions(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        profile: str | None = None,
        limit: int = 20_000,
        *,
        page_size: int = 200,
        exclude_callers: Sequence[str] = (),
        finishes: bool = False,
        max_finishes: int = 1_000_000,
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(snapshot, decision)`` JSON of the window's decisions, oldest first, for training.

        Only the scheduling decisions (admission to placement): reclaim and dispatch
        answers share the table but not the documents' shape, and are skipped (after
        `limit`, which counts every row of the window). Only the documents and stages are
        read, a page at a time, so a large window is not held in memory twice (rows and
        the trainer's copies).

        With ``finishes``, each decision has ``finished``: the ``job_finished`` feedback
        payloads of the jobs its snapshot is the first of the window to name, by job id.
        An event belongs to a job of the same cluster (feedback ``cluster_id`` = snapshot
        ``cluster_id``) and id; where a caller reuses job ids, to the earliest event
        received whose ``finished_at`` is not before the job's ``submit_time`` (both on the
        caller's clock). Events are read from ``since`` on with no upper bound: a job
        finishes after the decisions that ran it.
        """
        finished = _finished_jobs(self._session, since, max_finishes) if finishes else None
        joined: set[tuple[str, str]] = set()
        query = select(Decision.snapshot, Decision.decision, Decision.stages)
        query = _window(query, since, until, profile, exclude_callers)
        query = query.order_by(Decision.created_at, Decision.decision_id).limit(limit)
        result = self._session.execute(query.execution_options(yield_per=page_size))
        for row in result:
            if not SCHEDULING_STAGES.issuperset(row.stages):
                continue
            if finished is None:
                yield row.snapshot, row.decision
                continue
            yield (
                row.snapshot,
                {
                    **row.decision,
                    "finished": _first_finishes(row.snapshot, finished, joined),
                },
            )

    def dispatches_with_outcomes(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        profile: str | None = None,
        limit: int = 20_000,
        *,
        page_size: int = 200,
        exclude_callers: Sequence[str] = (),
        max_outcomes: int = 1_000_000,
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(snapshot, decision)`` JSON of the window's dispatch answers, oldest first, each
        decision with ``outcomes``: the ``inference`` feedback of its requests, by request id.

        An outcome belongs to a request of the same system (feedback ``cluster_id`` =
        snapshot ``system_id``) and id; where a caller reuses ids, to the earliest event
        that occurred at or after the request's arrival (caller's clock; an event without
        ``occurred_at`` matches any). Events are read from ``since`` on with no upper
        bound: outcomes arrive after the decisions they follow. Scheduling decisions share
        the table and are skipped (after ``limit``, which counts every row of the window).
        """
        events = _feedback_of("inference", FeedbackEvent.occurred_at, since, max_outcomes)
        outcomes: dict[tuple[str, str], list[tuple[float | None, dict[str, Any]]]] = {}
        for cluster_id, occurred_at, payload in self._session.execute(events):
            request_id = payload.get("request_id") if isinstance(payload, dict) else None
            if isinstance(request_id, str):
                outcomes.setdefault((cluster_id, request_id), []).append((occurred_at, payload))
        query = select(Decision.snapshot, Decision.decision, Decision.stages)
        query = _window(query, since, until, profile, exclude_callers)
        query = query.order_by(Decision.created_at, Decision.decision_id).limit(limit)
        result = self._session.execute(query.execution_options(yield_per=page_size))
        for snapshot, decision, stages in result:
            if stages != ["dispatch"]:
                continue
            system = snapshot.get("system_id", "default")
            joined: dict[str, dict[str, Any]] = {}
            for request in snapshot.get("requests", ()):
                for occurred_at, payload in outcomes.get((system, request["id"]), ()):
                    if occurred_at is None or occurred_at >= request["arrival"]:
                        joined[request["id"]] = payload
                        break
            yield snapshot, {**decision, "outcomes": joined}


class FeedbackRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def add_many_ignoring_duplicates(self, events: Iterable[FeedbackRecord]) -> int:
        """Insert events; an event id already stored is skipped. Returns how many were new."""
        rows = [event.to_row() for event in events]
        return _insert_ignoring_duplicates(self._session, _table(FeedbackEvent), rows)

    def get(self, event_id: str) -> FeedbackEvent | None:
        return self._session.get(FeedbackEvent, event_id)

    def for_decision(self, decision_id: str) -> Sequence[FeedbackEvent]:
        """Events that refer to ``decision_id``, in the order they were received."""
        query = (
            select(FeedbackEvent)
            .where(FeedbackEvent.decision_id == decision_id)
            .order_by(FeedbackEvent.received_at, FeedbackEvent.event_id)
        )
        return self._session.scalars(query).all()


class ModelVersionExistsError(ValueError):
    def __init__(self, policy: str, version: str) -> None:
        super().__init__(f"policy {policy!r} already has a version {version!r}")
        self.policy = policy
        self.version = version


class ModelVersionNotFoundError(LookupError):
    def __init__(self, policy: str, version: str) -> None:
        super().__init__(f"policy {policy!r} has no version {version!r}")
        self.policy = policy
        self.version = version


class ModelVersionRepository:
    """Versions of learned policies' weights; at most one active per policy."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def add(
        self,
        policy: str,
        version: str,
        weights: bytes,
        metadata: Mapping[str, Any] | None = None,
        *,
        activate: bool = False,
    ) -> ModelVersion:
        """Store a new, inactive version (then activate it when ``activate``)."""
        if self.get(policy, version) is not None:
            raise ModelVersionExistsError(policy, version)
        model_version = ModelVersion(
            policy=policy,
            version=version,
            weights=weights,
            meta=dict(metadata or {}),
            created_at=utc_now(),
            active=False,
        )
        self._session.add(model_version)
        self._session.flush()
        if activate:
            return self.activate(policy, version)
        return model_version

    def list(self, policy: str | None = None) -> Sequence[ModelVersion]:
        """Versions oldest first, without their weights (reading ``weights`` raises)."""
        query = select(ModelVersion).options(defer(ModelVersion.weights, raiseload=True))
        if policy is not None:
            query = query.where(ModelVersion.policy == policy)
        query = query.order_by(ModelVersion.policy, ModelVersion.created_at, ModelVersion.id)
        return self._session.scalars(query).all()

    def get(self, policy: str, version: str) -> ModelVersion | None:
        query = select(ModelVersion).where(
            ModelVersion.policy == policy, ModelVersion.version == version
        )
        return self._session.scalars(query).one_or_none()

    def active_version(self, policy: str) -> str | None:
        """The active version's name alone (no weights read): a cheap periodic check."""
        query = select(ModelVersion.version).where(
            ModelVersion.policy == policy, ModelVersion.active.is_(True)
        )
        return self._session.scalars(query).one_or_none()

    def active(self, policy: str) -> ModelVersion | None:
        query = select(ModelVersion).where(
            ModelVersion.policy == policy, ModelVersion.active.is_(True)
        )
        return self._session.scalars(query).one_or_none()

    def activate(self, policy: str, version: str) -> ModelVersion:
        """Make ``version`` the only active version of ``policy``.

        The policy's rows are locked first (``SELECT … FOR UPDATE`` on PostgreSQL;
        SQLite serialises writers anyway), so concurrent activations queue up and the
        last one wins instead of tripping over each other. Deactivation runs before
        activation because the one-active index is checked row by row.
        """
        locked = self._session.execute(
            select(ModelVersion.id, ModelVersion.version)
            .where(ModelVersion.policy == policy)
            .with_for_update()
        ).all()
        if all(row.version != version for row in locked):
            raise ModelVersionNotFoundError(policy, version)
        self._session.execute(
            update(ModelVersion)
            .where(
                ModelVersion.policy == policy,
                ModelVersion.version != version,
                ModelVersion.active.is_(True),
            )
            .values(active=False)
            .execution_options(synchronize_session="fetch")
        )
        self._session.execute(
            update(ModelVersion)
            .where(ModelVersion.policy == policy, ModelVersion.version == version)
            .values(active=True)
            .execution_options(synchronize_session="fetch")
        )
        activated = self.get(policy, version)
        assert activated is not None
        return activated


class RetrainJobNotFoundError(LookupError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no retrain job {job_id!r}")
        self.job_id = job_id


class RetrainTransitionError(ValueError):
    def __init__(self, job_id: str, current: str, requested: str) -> None:
        super().__init__(f"retrain job {job_id!r} is {current}; cannot become {requested}")
        self.job_id = job_id


_TERMINAL_STATUSES = frozenset({RetrainStatus.SUCCEEDED, RetrainStatus.FAILED})


class RetrainJobRepository:
    def __init__(self, session: Session) -> None:
        self._session = session

    def create(
        self,
        policy: str,
        params: Mapping[str, Any] | None = None,
        *,
        job_id: str | None = None,
    ) -> RetrainJob:
        """A new job in status ``queued``; its id is a random hex string unless given."""
        now = utc_now()
        job = RetrainJob(
            id=job_id or uuid.uuid4().hex,
            policy=policy,
            status=RetrainStatus.QUEUED.value,
            params=dict(params or {}),
            created_at=now,
            updated_at=now,
        )
        self._session.add(job)
        self._session.flush()
        return job

    def get(self, job_id: str) -> RetrainJob | None:
        return self._session.get(RetrainJob, job_id)

    def list(
        self,
        policy: str | None = None,
        status: RetrainStatus | str | None = None,
        limit: int = 100,
    ) -> Sequence[RetrainJob]:
        """Jobs newest first."""
        query = select(RetrainJob)
        if policy is not None:
            query = query.where(RetrainJob.policy == policy)
        if status is not None:
            query = query.where(RetrainJob.status == RetrainStatus(status).value)
        query = query.order_by(RetrainJob.created_at.desc(), RetrainJob.id).limit(limit)
        return self._session.scalars(query).all()

    def active(self, policy: str | None = None) -> Sequence[RetrainJob]:
        """Jobs queued or running (of `policy`, if given), oldest first."""
        query = select(RetrainJob).where(
            RetrainJob.status.in_((RetrainStatus.QUEUED.value, RetrainStatus.RUNNING.value))
        )
        if policy is not None:
            query = query.where(RetrainJob.policy == policy)
        return self._session.scalars(query.order_by(RetrainJob.created_at, RetrainJob.id)).all()

    def update_status(
        self,
        job_id: str,
        status: RetrainStatus | str,
        *,
        version: str | None = None,
        metrics: Mapping[str, Any] | None = None,
        error: str | None = None,
    ) -> RetrainJob:
        """Move a job to ``status``, recording what is given; a finished job stays finished.

        Raises :class:`RetrainJobNotFoundError`, ``ValueError`` for an unknown status and
        :class:`RetrainTransitionError` when the job already succeeded or failed.
        ``started_at`` is set when it starts running, ``finished_at`` when it finishes.
        """
        new_status = RetrainStatus(status)
        job = self._session.get(RetrainJob, job_id, with_for_update=True)
        if job is None:
            raise RetrainJobNotFoundError(job_id)
        current = RetrainStatus(job.status)
        if current in _TERMINAL_STATUSES and new_status is not current:
            raise RetrainTransitionError(job_id, current.value, new_status.value)
        now = utc_now()
        if new_status is RetrainStatus.RUNNING and job.started_at is None:
            job.started_at = now
        if new_status in _TERMINAL_STATUSES and job.finished_at is None:
            job.finished_at = now
        job.status = new_status.value
        if version is not None:
            job.version = version
        if metrics is not None:
            job.metrics = dict(metrics)
        if error is not None:
            job.error = error
        job.updated_at = now
        self._session.flush()
        return job

    def touch(self, job_id: str) -> None:
        """A running job's heartbeat: its worker is alive (`updated_at` = now)."""
        job = self._session.get(RetrainJob, job_id)
        if job is not None and job.status == RetrainStatus.RUNNING.value:
            job.updated_at = utc_now()
            self._session.flush()

    def fail_silent(self, stale_after_s: float) -> Sequence[str]:
        """Fail running jobs with no heartbeat for `stale_after_s`: their worker is gone.

        Returns their ids. A failed job can be retried with a new request.
        """
        cutoff = utc_now() - timedelta(seconds=stale_after_s)
        query = select(RetrainJob).where(
            RetrainJob.status == RetrainStatus.RUNNING.value, RetrainJob.updated_at < cutoff
        )
        failed = []
        for job in self._session.scalars(query).all():
            job.status = RetrainStatus.FAILED.value
            job.error = (
                f"its worker stopped sending heartbeats (none for {stale_after_s:g} s, last at "
                f"{job.updated_at.isoformat()}): it was killed or lost; send the request again"
            )
            job.updated_at = job.finished_at = utc_now()
            failed.append(job.id)
        self._session.flush()
        return failed

    def update_progress(self, job_id: str, stage: str, fraction: float) -> RetrainJob:
        """Record how far a job is (`fraction` of `stage`, 0–1); its status is unchanged."""
        job = self._session.get(RetrainJob, job_id)
        if job is None:
            raise RetrainJobNotFoundError(job_id)
        job.progress = {"stage": stage, "fraction": round(min(max(fraction, 0.0), 1.0), 4)}
        job.updated_at = utc_now()
        self._session.flush()
        return job
