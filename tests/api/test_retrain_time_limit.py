"""A retraining's time limit stops it wherever it is, on the RQ worker and without Redis.

The engine turns any `Exception` a policy raises into a fallback to another policy,
and training spends most of its time inside policy calls; RQ's own limit is an
`Exception`, so these tests run the engine under each limit with a placement that is
still working when the limit fires.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient
from rq.timeouts import JobTimeoutException, UnixSignalDeathPenalty

from app.main import create_app
from app.schemas import RetrainRequest
from app.services.retrain import LocalProcessQueue, RetrainService
from app.settings import Settings
from app.worker import RetrainTimeLimit, RetrainWorker, TimeLimit
from policies.capacity import FreeCapacity
from policies.decision import Stage
from policies.engine import Pipeline
from policies.model import Job
from policies.profiles import Profile
from policies.protocols import Context, NoParams, PlacementOutcome
from policies.registry import PolicySpec, Registry, build_registry
from storage.db import create_engine_for, make_sessionmaker
from tests.api.retrain_helpers import OVER_TIME_BUDGET, TOKEN, log_decisions, poll
from tests.policies.builders import job, node, snap


class SlowPlacement:
    """A placement that takes ten seconds a job."""

    name: ClassVar[str] = "slow"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Sleeps."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        time.sleep(10.0)
        raise AssertionError("the time limit should have stopped this call")


def slow_pipeline() -> Pipeline:
    registry = Registry([*build_registry().specs(), PolicySpec(SlowPlacement)])
    profile = Profile.model_validate(
        {
            "name": "slow-with-fallback",
            "placement": {"name": "slow"},
            "fallback": {"placement": {"name": "consolidated"}},
        }
    )
    return Pipeline.build(profile, registry)


SNAPSHOT = snap([node("n0")], [job("a", workers=2)])

# RQ's time limits are untyped classes: called through Any.
OURS: Any = TimeLimit
RQS: Any = UnixSignalDeathPenalty


def test_the_worker_time_limit_passes_through_the_engines_fallback() -> None:
    pipeline = slow_pipeline()
    started = time.monotonic()
    with (
        pytest.raises(RetrainTimeLimit, match="time limit of 1 s"),
        OURS(1, JobTimeoutException, job_id="j"),
    ):
        pipeline.decide(SNAPSHOT)
    assert time.monotonic() - started < 5.0


def test_rqs_own_time_limit_would_be_taken_for_a_policy_fault() -> None:
    # Why the worker has a limit of its own: under RQ's, the engine falls back and the
    # decision (and so the training) goes on.
    with RQS(1, JobTimeoutException, job_id="j"):
        decision = slow_pipeline().decide(SNAPSHOT)
    assert decision.fallback is not None
    assert "JobTimeoutException" in decision.fallback.reason


def test_the_retrain_worker_uses_the_time_limit_no_guard_can_take() -> None:
    assert RetrainWorker.death_penalty_class is TimeLimit
    assert not issubclass(RetrainTimeLimit, Exception)


def test_without_redis_a_retraining_past_its_time_limit_is_stopped_and_failed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    settings = Settings(database_url=url, spill_dir=tmp_path / "spill", admin_token=TOKEN)
    with TestClient(create_app(settings)) as client:
        log_decisions(client, "drf")
    engine = create_engine_for(url)
    sessions = make_sessionmaker(engine)
    queue = LocalProcessQueue(settings, sessions, time_limit_s=2.0)
    try:
        service = RetrainService(sessions, queue)
        job_id = service.start(
            RetrainRequest.model_validate({"policy": "dl2", "budget": OVER_TIME_BUDGET})
        ).id
        failed = poll(
            lambda: out if (out := service.get(job_id)).status == "failed" else None,
            "the job to be failed",
        )
    finally:
        queue.close()
        engine.dispose()
    assert failed.error == "the job ran past its time limit of 2 s and was stopped"
