"""Repositories on SQLite and PostgreSQL (each test runs on both, in a rolled-back transaction)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError, InvalidRequestError
from sqlalchemy.orm import Session

from storage.models import FeedbackEvent, ModelVersion, RetrainStatus
from storage.records import FeedbackRecord
from storage.repositories import (
    DecisionRepository,
    FeedbackRepository,
    ModelVersionExistsError,
    ModelVersionNotFoundError,
    ModelVersionRepository,
    RetrainJobNotFoundError,
    RetrainJobRepository,
    RetrainTransitionError,
)
from tests.storage.factories import make_decision, make_feedback

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_decisions_are_written_and_read_back(session: Session) -> None:
    decisions = DecisionRepository(session)
    full = make_decision(
        "d-full",
        created_at=T0,
        action_probs={"j1": 0.75, "j2": 0.25},
        shadow={"policy": "dl2", "ordering": ["j2", "j1"]},
        fallback={"policy": "fifo", "reason": "model missing"},
    )
    minimal = make_decision("d-minimal", created_at=T0 + timedelta(seconds=1))

    assert decisions.add_many([full, minimal]) == 2

    stored = decisions.get("d-full")
    assert stored is not None
    assert stored.cluster_id == full.cluster_id
    assert stored.profile == full.profile
    assert stored.created_at == T0
    assert stored.created_at.tzinfo is not None
    assert stored.now == full.now
    assert stored.stages == full.stages
    assert stored.policies == full.policies
    assert stored.snapshot == full.snapshot
    assert stored.decision == full.decision
    assert stored.action_probs == full.action_probs
    assert stored.shadow == full.shadow
    assert stored.fallback == full.fallback
    assert stored.latency_ms == full.latency_ms
    plain = decisions.get("d-minimal")
    assert plain is not None
    assert (plain.action_probs, plain.shadow, plain.fallback) == (None, None, None)
    assert decisions.get("d-missing") is None


def test_raw_json_bytes_are_stored_as_json(session: Session) -> None:
    snapshot = {"cluster_id": "c", "nodes": [{"id": "n1", "gpus": 8}], "ünïcode": "✓"}
    decision = {"ordering": ["j1"], "fallback": None}
    record = make_decision(
        "d-raw", snapshot=orjson.dumps(snapshot), decision=orjson.dumps(decision)
    )

    DecisionRepository(session).add_many([record])

    stored = DecisionRepository(session).get("d-raw")
    assert stored is not None
    assert stored.snapshot == snapshot
    assert stored.decision == decision


def test_adding_a_stored_decision_again_keeps_the_first(session: Session) -> None:
    decisions = DecisionRepository(session)
    first = make_decision("d-1", profile="fifo")

    assert decisions.add_many([first]) == 1
    assert decisions.add_many([make_decision("d-1", profile="sjf"), make_decision("d-2")]) == 1
    assert decisions.add_many([]) == 0

    stored = decisions.get("d-1")
    assert stored is not None
    assert stored.profile == "fifo"
    assert decisions.count() == 2


def test_decisions_are_counted_and_listed_by_window_and_profile(session: Session) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [
            make_decision("d-a", cluster_id="c1", profile="fifo", created_at=T0),
            make_decision(
                "d-b", cluster_id="c1", profile="sjf", created_at=T0 + timedelta(hours=1)
            ),
            make_decision(
                "d-c", cluster_id="c2", profile="fifo", created_at=T0 + timedelta(hours=2)
            ),
            make_decision(
                "d-d", cluster_id="c2", profile="fifo", created_at=T0 + timedelta(hours=3)
            ),
        ]
    )

    assert decisions.count() == 4
    assert decisions.count(cluster_id="c1") == 2
    assert decisions.count(cluster_id="nope") == 0
    listed = decisions.list(since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=3))
    assert [d.decision_id for d in listed] == ["d-b", "d-c"]  # since inclusive, until not
    assert [d.decision_id for d in decisions.list(profile="fifo")] == ["d-a", "d-c", "d-d"]
    assert [d.decision_id for d in decisions.list(profile="fifo", limit=2)] == ["d-a", "d-c"]
    assert [d.decision_id for d in decisions.list(cluster_id="c2")] == ["d-c", "d-d"]
    # A window given in another time zone means the same instants.
    tokyo = timezone(timedelta(hours=9))
    since_in_tokyo = (T0 + timedelta(hours=2)).astimezone(tokyo)
    assert [d.decision_id for d in decisions.list(since=since_in_tokyo)] == ["d-c", "d-d"]


def test_feedback_is_written_and_read_back_per_decision(session: Session) -> None:
    feedback = FeedbackRepository(session)
    late = make_feedback("e-late", decision_id="d-1", received_at=T0 + timedelta(seconds=5))
    early = make_feedback("e-early", decision_id="d-1", received_at=T0, kind="throughput")
    other = make_feedback("e-other", decision_id="d-2", received_at=T0)

    assert feedback.add_many_ignoring_duplicates([late, early, other]) == 3

    stored = feedback.get("e-early")
    assert stored is not None
    assert (stored.kind, stored.cluster_id, stored.decision_id) == (
        "throughput",
        "cluster-a",
        "d-1",
    )
    assert (stored.job_id, stored.occurred_at) == (early.job_id, early.occurred_at)
    assert stored.payload == early.payload
    assert stored.received_at == T0
    assert [e.event_id for e in feedback.for_decision("d-1")] == ["e-early", "e-late"]
    assert feedback.for_decision("d-none") == []


def test_feedback_is_idempotent_by_event_id(session: Session) -> None:
    feedback = FeedbackRepository(session)
    event = make_feedback("e-1", payload={"attempt": 1})

    assert feedback.add_many_ignoring_duplicates([event]) == 1
    assert (
        feedback.add_many_ignoring_duplicates([make_feedback("e-1", payload={"attempt": 2})]) == 0
    )
    # Duplicates inside one batch count once, too.
    assert feedback.add_many_ignoring_duplicates([make_feedback("e-2"), make_feedback("e-2")]) == 1

    stored = feedback.get("e-1")
    assert stored is not None
    assert stored.payload == {"attempt": 1}
    count = session.scalar(select(func.count()).select_from(FeedbackEvent))
    assert count == 2


def test_feedback_may_arrive_before_its_decision(session: Session) -> None:
    FeedbackRepository(session).add_many_ignoring_duplicates(
        [make_feedback("e-x", decision_id="d-later")]
    )
    DecisionRepository(session).add_many([make_decision("d-later")])

    assert [e.event_id for e in FeedbackRepository(session).for_decision("d-later")] == ["e-x"]


def _active_versions(session: Session, policy: str) -> list[str]:
    rows = session.scalars(
        select(ModelVersion.version).where(ModelVersion.policy == policy, ModelVersion.active)
    )
    return list(rows)


def test_activating_a_model_version_keeps_exactly_one_active(session: Session) -> None:
    models = ModelVersionRepository(session)
    models.add("dl2", "v1", b"w1", {"metrics": {"avg_jct_s": 10.0}}, activate=True)
    models.add("dl2", "v2", b"w2", {"parent": "v1"})
    models.add("dl2", "v3", b"w3")
    models.add("rwgp", "v1", b"other", activate=True)

    assert _active_versions(session, "dl2") == ["v1"]
    activated = models.activate("dl2", "v2")
    assert (activated.version, activated.active) == ("v2", True)
    assert _active_versions(session, "dl2") == ["v2"]
    models.activate("dl2", "v3")
    models.activate("dl2", "v3")  # activating the active one changes nothing
    assert _active_versions(session, "dl2") == ["v3"]
    active = models.active("dl2")
    assert active is not None
    assert active.version == "v3"
    assert _active_versions(session, "rwgp") == ["v1"]  # other policies untouched
    with pytest.raises(ModelVersionNotFoundError):
        models.activate("dl2", "v9")
    assert _active_versions(session, "dl2") == ["v3"]
    assert models.active("no-such-policy") is None


def test_the_database_refuses_a_second_active_version(session: Session) -> None:
    models = ModelVersionRepository(session)
    models.add("dl2", "v1", b"w1", activate=True)
    models.add("dl2", "v2", b"w2")

    with pytest.raises(IntegrityError):
        session.execute(
            update(ModelVersion)
            .where(ModelVersion.policy == "dl2", ModelVersion.version == "v2")
            .values(active=True)
        )


def test_model_versions_store_weights_and_metadata(session: Session) -> None:
    models = ModelVersionRepository(session)
    weights = bytes(range(256)) * 64  # includes NUL bytes
    models.add("dl2", "v1", weights, {"window": ["2025-01-01", "2025-02-01"], "parent": None})
    models.add("dl2", "v2", b"w2")

    stored = models.get("dl2", "v1")
    assert stored is not None
    assert stored.weights == weights
    assert stored.meta == {"window": ["2025-01-01", "2025-02-01"], "parent": None}
    assert stored.created_at.tzinfo is not None
    assert models.get("dl2", "v7") is None
    with pytest.raises(ModelVersionExistsError):
        models.add("dl2", "v1", b"again")


def test_listing_model_versions_leaves_weights_unloaded(session: Session) -> None:
    models = ModelVersionRepository(session)
    models.add("dl2", "v1", b"w1")
    models.add("dl2", "v2", b"w2", activate=True)
    models.add("rwgp", "v1", b"w3")
    session.expunge_all()

    listed = models.list("dl2")

    assert [(m.version, m.active) for m in listed] == [("v1", False), ("v2", True)]
    assert [(m.policy, m.version) for m in models.list()] == [
        ("dl2", "v1"),
        ("dl2", "v2"),
        ("rwgp", "v1"),
    ]
    session.expunge_all()
    with pytest.raises(InvalidRequestError):
        _ = models.list("rwgp")[0].weights


def test_retrain_job_moves_from_queued_to_succeeded(session: Session) -> None:
    jobs = RetrainJobRepository(session)
    job = jobs.create("dl2", {"steps": 10, "activate": "if_better"})
    assert job.status == "queued"
    created_at = job.updated_at

    jobs.update_status(job.id, RetrainStatus.RUNNING)
    done = jobs.update_status(job.id, "succeeded", version="v2", metrics={"avg_jct_s": 9.5})

    stored = jobs.get(job.id)
    assert stored is done
    assert (stored.status, stored.version, stored.metrics) == (
        "succeeded",
        "v2",
        {"avg_jct_s": 9.5},
    )
    assert stored.params == {"steps": 10, "activate": "if_better"}
    assert stored.error is None
    assert stored.updated_at >= created_at
    assert [j.id for j in jobs.list(policy="dl2", status="succeeded")] == [job.id]


def test_finished_retrain_job_cannot_be_restarted(session: Session) -> None:
    jobs = RetrainJobRepository(session)
    job = jobs.create("dl2", job_id="job-1")
    jobs.update_status("job-1", "failed", error="diverged")

    with pytest.raises(RetrainTransitionError):
        jobs.update_status("job-1", "running")
    with pytest.raises(ValueError, match="paused"):
        jobs.update_status("job-1", "paused")
    with pytest.raises(RetrainJobNotFoundError):
        jobs.update_status("job-404", "running")
    assert job.error == "diverged"
    assert jobs.get("job-404") is None


def test_training_reads_snapshots_and_decisions_of_a_window_oldest_first(
    session: Session,
) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [
            make_decision("w-late", created_at=T0 + timedelta(minutes=2), profile="drf"),
            make_decision("w-early", created_at=T0, profile="drf"),
            make_decision("w-other", created_at=T0 + timedelta(minutes=1), profile="fifo"),
            make_decision("w-after", created_at=T0 + timedelta(hours=1), profile="drf"),
        ]
    )
    until = T0 + timedelta(minutes=30)

    rows = list(decisions.snapshots_and_decisions(T0, until, "drf", page_size=1))

    assert decisions.count_in_window(T0, until, "drf") == 2
    assert decisions.count_in_window(T0, until) == 3
    assert decisions.count_in_window(until + timedelta(days=1)) == 0
    assert len(rows) == 2
    assert all(set(snapshot) >= {"cluster_id", "nodes"} for snapshot, _ in rows)
    assert all("ordering" in decision for _, decision in rows)
    assert len(list(decisions.snapshots_and_decisions(T0, until, limit=1))) == 1


def test_training_reads_only_scheduling_decisions_not_reclaims_or_dispatches(
    session: Session,
) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [
            make_decision("scheduled", created_at=T0),
            make_decision(
                "reclaimed",
                created_at=T0 + timedelta(seconds=1),
                stages=["reclaim"],
                decision={"servers": ["n1"], "shrink": [], "preempt": []},
            ),
            make_decision("dispatched", created_at=T0 + timedelta(seconds=2), stages=["dispatch"]),
        ]
    )

    rows = list(decisions.snapshots_and_decisions())

    assert len(rows) == 1
    assert "ordering" in rows[0][1]


def _snapshot(cluster_id: str, *jobs: tuple[str, float]) -> dict[str, object]:
    return {
        "cluster_id": cluster_id,
        "nodes": [{"id": "n1", "gpus": 8}],
        "jobs": [{"id": job_id, "submit_time": submitted} for job_id, submitted in jobs],
    }


def _finished(
    job_id: str,
    finished_at: float,
    *,
    cluster_id: str = "cluster-a",
    received_at: datetime = T0 + timedelta(hours=2),
    **more: object,
) -> FeedbackRecord:
    """A `job_finished` event as the feedback service logs it (payload without the ids)."""
    payload = {"job_id": job_id, "started_at": 0.0, "finished_at": finished_at, **more}
    return make_feedback(
        cluster_id=cluster_id, job_id=job_id, payload=payload, received_at=received_at
    )


def test_training_reads_each_jobs_finish_with_the_first_decision_that_names_it(
    session: Session,
) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [
            make_decision("first", created_at=T0, snapshot=_snapshot("cluster-a", ("j1", 0.0))),
            make_decision(
                "second",
                created_at=T0 + timedelta(minutes=1),
                snapshot=_snapshot("cluster-a", ("j1", 0.0), ("j2", 30.0), ("j3", 40.0)),
            ),
        ]
    )
    FeedbackRepository(session).add_many_ignoring_duplicates(
        [
            _finished("j1", 500.0, outcome="completed"),
            _finished("j2", 900.0),
            _finished("j3", 700.0, cluster_id="cluster-b"),  # another cluster's job j3
            make_feedback(kind="throughput", job_id="j2", payload={"samples_per_s": 1.0}),
        ]
    )

    rows = list(decisions.snapshots_and_decisions(finishes=True))
    plain = list(decisions.snapshots_and_decisions())

    assert [decision["finished"] for _, decision in rows] == [
        {"j1": {"job_id": "j1", "started_at": 0.0, "finished_at": 500.0, "outcome": "completed"}},
        {"j2": {"job_id": "j2", "started_at": 0.0, "finished_at": 900.0}},
    ]
    assert [{k: v for k, v in d.items() if k != "finished"} for _, d in rows] == [
        d for _, d in plain
    ]
    assert all("finished" not in decision for _, decision in plain)


def test_a_reused_job_id_is_joined_to_the_finish_not_before_its_submission(
    session: Session,
) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [make_decision("later", created_at=T0, snapshot=_snapshot("cluster-a", ("j1", 1000.0)))]
    )
    FeedbackRepository(session).add_many_ignoring_duplicates(
        [_finished("j1", 400.0), _finished("j1", 1600.0)]  # the first is an earlier job's
    )

    (row,) = decisions.snapshots_and_decisions(finishes=True)

    assert row[1]["finished"]["j1"]["finished_at"] == 1600.0


def test_finishes_reported_before_the_window_are_not_read(session: Session) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [make_decision("d", created_at=T0, snapshot=_snapshot("cluster-a", ("j1", 0.0)))]
    )
    FeedbackRepository(session).add_many_ignoring_duplicates(
        [_finished("j1", 500.0, received_at=T0 - timedelta(days=1))]
    )

    (row,) = decisions.snapshots_and_decisions(T0, finishes=True)
    (unbounded,) = decisions.snapshots_and_decisions(finishes=True)

    assert row[1]["finished"] == {}
    assert set(unbounded[1]["finished"]) == {"j1"}


def test_retrain_job_records_progress_and_when_it_ran(session: Session) -> None:
    jobs = RetrainJobRepository(session)
    job = jobs.create("dl2", {"policy": "dl2"})
    assert (job.progress, job.started_at, job.finished_at) == (None, None, None)

    jobs.update_status(job.id, RetrainStatus.RUNNING)
    jobs.update_progress(job.id, "rl", 1.7)
    running = jobs.get(job.id)
    assert running is not None
    assert running.progress == {"stage": "rl", "fraction": 1.0}
    assert running.started_at is not None
    assert running.finished_at is None
    jobs.update_status(job.id, RetrainStatus.FAILED, error="boom")

    finished = jobs.get(job.id)
    assert finished is not None
    assert finished.finished_at is not None
    assert finished.finished_at >= finished.started_at  # type: ignore[operator]
    with pytest.raises(RetrainJobNotFoundError):
        jobs.update_progress("missing", "rl", 0.5)


def test_the_active_version_name_is_read_without_weights(session: Session) -> None:
    versions = ModelVersionRepository(session)
    assert versions.active_version("dl2") is None
    versions.add("dl2", "v1", b"w1", activate=True)
    versions.add("dl2", "v2", b"w2")

    assert versions.active_version("dl2") == "v1"


def test_training_windows_can_leave_out_callers(session: Session) -> None:
    decisions = DecisionRepository(session)
    decisions.add_many(
        [
            make_decision("from-planner", caller="planner"),
            make_decision("from-nightly", caller="nightly"),
            make_decision("from-anyone"),
        ]
    )

    assert decisions.count_in_window() == 3
    assert decisions.count_in_window(exclude_callers=["nightly"]) == 2
    kept = list(decisions.snapshots_and_decisions(exclude_callers=["nightly", "planner"]))
    assert len(kept) == 1
