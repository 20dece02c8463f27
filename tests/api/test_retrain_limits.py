"""One retraining per policy and profile at a time, and a bounded queue of them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.errors import ConflictError, TooManyRequestsError
from app.schemas import RetrainRequest
from app.services.retrain import RetrainService
from storage.db import create_engine_for, make_sessionmaker, upgrade_database
from storage.repositories import DecisionRepository
from tests.storage.factories import make_decision


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    """A migrated database holding a few logged decisions (something to imitate)."""
    url = f"sqlite:///{tmp_path / 'retrain.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    made = make_sessionmaker(engine)
    with made.begin() as session:
        DecisionRepository(session).add_many(
            [make_decision(profile=p) for p in ("tiresias", "drf", "drf")]
        )
    yield made
    engine.dispose()


def request(**fields: object) -> RetrainRequest:
    return RetrainRequest.model_validate({"policy": "dl2", **fields})


def test_a_second_retraining_of_one_policy_and_profile_is_refused_naming_the_first(
    sessions: sessionmaker[Session],
) -> None:
    service = RetrainService(sessions, queue=None)
    first = service.create(request())

    with pytest.raises(ConflictError) as refused:
        service.create(request())

    assert first.id in refused.value.detail
    assert refused.value.problems[0].path == "concurrent"


def test_another_profile_or_an_explicit_request_may_run_beside_it(
    sessions: sessionmaker[Session],
) -> None:
    service = RetrainService(sessions, queue=None)
    service.create(request())

    other_profile = service.create(request(profile="drf"))
    asked_for = service.create(request(concurrent=True))

    assert len({other_profile.id, asked_for.id}) == 2


def test_the_queue_of_retrainings_is_bounded(sessions: sessionmaker[Session]) -> None:
    service = RetrainService(sessions, queue=None, max_active=2)
    service.create(request(concurrent=True))
    service.create(request(concurrent=True))

    with pytest.raises(TooManyRequestsError) as refused:
        service.create(request(concurrent=True))

    assert "at most 2" in refused.value.detail
