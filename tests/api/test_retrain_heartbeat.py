"""A retraining whose worker died is failed within the heartbeat timeout, and can be sent again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.schemas import RetrainRequest
from app.services.retrain import RetrainService, _Heartbeat, heartbeat_interval
from storage.db import create_engine_for, make_sessionmaker, upgrade_database
from storage.models import RetrainStatus
from storage.repositories import DecisionRepository, RetrainJobRepository
from tests.storage.factories import make_decision


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'retrain.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    made = make_sessionmaker(engine)
    with made.begin() as session:
        DecisionRepository(session).add_many([make_decision(profile="drf")])
    yield made
    engine.dispose()


def _start_running(sessions: sessionmaker[Session], service: RetrainService) -> str:
    job = service.create(RetrainRequest.model_validate({"policy": "dl2"}))
    with sessions.begin() as session:
        RetrainJobRepository(session).update_status(job.id, RetrainStatus.RUNNING)
    return job.id


def _updated_at(sessions: sessionmaker[Session], job_id: str) -> datetime:
    with sessions() as session:
        job = RetrainJobRepository(session).get(job_id)
        assert job is not None
        return job.updated_at


def test_a_running_job_without_heartbeats_is_failed_and_a_new_one_can_be_sent(
    sessions: sessionmaker[Session],
) -> None:
    service = RetrainService(sessions, queue=None, heartbeat_timeout_s=0.2)
    lost = _start_running(sessions, service)  # and then its worker is killed: no beats

    time.sleep(0.4)
    seen = service.get(lost)

    assert seen.status == "failed"
    assert seen.error is not None
    assert "stopped sending heartbeats" in seen.error
    again = service.create(RetrainRequest.model_validate({"policy": "dl2"}))
    assert again.id != lost


def test_a_worker_that_beats_keeps_its_job_running(sessions: sessionmaker[Session]) -> None:
    service = RetrainService(sessions, queue=None, heartbeat_timeout_s=0.5)
    job_id = _start_running(sessions, service)
    before = _updated_at(sessions, job_id)
    heartbeat = _Heartbeat(sessions, job_id, every_s=0.05)
    heartbeat.start()
    try:
        time.sleep(0.8)  # longer than the timeout, with a beat every 50 ms
        assert service.get(job_id).status == "running"
    finally:
        heartbeat.stop()
    assert _updated_at(sessions, job_id) > before


def test_workers_beat_four_times_per_timeout_and_at_most_every_ten_seconds() -> None:
    assert heartbeat_interval(15.0) == 3.75
    assert heartbeat_interval(60.0) == 10.0
    assert heartbeat_interval(3600.0) == 10.0
