"""`arbiter worker`: an RQ worker that runs retraining jobs off the service's processes.

The queue (`ARBITER_RETRAIN_QUEUE`, default `arbiter-retrain`) lives on the Redis
of `ARBITER_REDIS_URL`; the worker reads its database and cache from the same
`ARBITER_*` environment as the service. Each job is the id of a `retrain_jobs`
row, serialised as JSON (nothing is unpickled). The worker forks a work horse
per job, so a job's memory is returned when it ends and a job over
`ARBITER_RETRAIN_TIMEOUT_S` is stopped without taking the worker down; a job
that fails that way is failed by :func:`retrain_task_failed`, and one whose work horse
is killed (RQ's last resort a minute past the limit, or the kernel's out-of-memory
killer) by :func:`retrain_horse_killed`.

RQ raises its time limit in the work horse as `JobTimeoutException`, an `Exception`.
Training runs the simulator, which runs the engine, and the engine turns any
`Exception` a policy raises into a fallback to another policy (that is what makes a
broken model safe to serve). A limit that fires inside a policy call would be taken
for that policy's fault and training would go on; the horse would then be killed a
minute later, when no failure callback runs. The worker therefore raises its own
limit, :class:`RetrainTimeLimit`, a `BaseException` like `KeyboardInterrupt`, which
no `except Exception` guard takes.
"""

from __future__ import annotations

import logging
import os
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from rq import Queue, Worker
from rq.serializers import JSONSerializer
from rq.timeouts import UnixSignalDeathPenalty

from app.services.retrain import fail_unfinished, run_with_settings
from app.settings import Settings

if TYPE_CHECKING:
    from rq.job import Job

logger = logging.getLogger(__name__)


class RetrainTimeLimit(BaseException):
    """A retrain job ran past `ARBITER_RETRAIN_TIMEOUT_S` (see the module's docstring for
    why this is not an `Exception`)."""


class TimeLimit(UnixSignalDeathPenalty):
    """RQ's alarm-based time limit, raising :class:`RetrainTimeLimit`."""

    def handle_death_penalty(self, signum: int, frame: FrameType | None) -> None:
        raise RetrainTimeLimit(f"the job ran past its time limit of {self._timeout} s")


class RetrainWorker(Worker):
    """RQ's forking worker with :class:`TimeLimit` as its time limit."""

    death_penalty_class = TimeLimit


def retrain_task(job_id: str) -> str | None:
    """The RQ job: run retrain job `job_id`; returns its final status."""
    out = run_with_settings(Settings(), job_id)
    return out.status if out is not None else None


def retrain_task_failed(
    job: Job,
    connection: Any,
    exc_type: type[BaseException] | None,
    exc_value: BaseException | None,
    traceback: TracebackType | None,
) -> None:
    """RQ's failure callback (a timeout, a crashed work horse): fail the retrain job."""
    reason = f"{exc_type.__name__}: {exc_value}" if exc_type is not None else "job failed"
    _fail(job.id, f"the worker failed the job: {reason}")


def retrain_horse_killed(job: Job, pid: int, status: int, usage: Any) -> None:
    """RQ's handler for a work horse that was killed: no failure callback runs then, so
    fail the retrain job here rather than leave it to the heartbeat timeout."""
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {status}"
    _fail(
        job.id,
        f"the worker's process for the job was killed ({how}): past its time limit, "
        "or out of memory",
    )


def _fail(job_id: str, reason: str) -> None:
    """Fail retrain job `job_id` in the database the environment names."""
    from storage.db import create_engine_for, make_sessionmaker  # noqa: PLC0415

    engine = create_engine_for(Settings().database_url)
    try:
        fail_unfinished(make_sessionmaker(engine), job_id, reason)
    finally:
        engine.dispose()


def serve(settings: Settings, *, burst: bool = False, queue: str | None = None) -> int:
    """Work the retrain queue until stopped (or, with `burst`, until it is empty)."""
    import redis  # noqa: PLC0415

    if settings.redis_url is None:
        raise ValueError(
            "ARBITER_REDIS_URL is not set: without Redis the service runs retraining "
            "in local processes and needs no worker"
        )
    connection = redis.Redis.from_url(settings.redis_url)
    try:
        name = queue or settings.retrain_queue
        worker = RetrainWorker(
            [Queue(name, connection=connection, serializer=JSONSerializer)],
            connection=connection,
            serializer=JSONSerializer,
            work_horse_killed_handler=retrain_horse_killed,
        )
        logger.info("serving retrain queue %r", name)
        worker.work(burst=burst, logging_level="INFO")
    finally:
        connection.close()
    return 0
