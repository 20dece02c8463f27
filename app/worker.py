"""`arbiter worker`: an RQ worker that runs retraining jobs off the service's processes.

The queue (`ARBITER_RETRAIN_QUEUE`, default `arbiter-retrain`) lives on the Redis
of `ARBITER_REDIS_URL`; the worker reads its database and cache from the same
`ARBITER_*` environment as the service. Each job is the id of a `retrain_jobs`
row, serialised as JSON (nothing is unpickled). The worker forks a work horse
per job, so a job's memory is returned when it ends and a job over
`ARBITER_RETRAIN_TIMEOUT_S` is killed without taking the worker down; a job
that dies that way is failed by :func:`retrain_task_failed`.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any

from app.services.retrain import fail_unfinished, run_with_settings
from app.settings import Settings

if TYPE_CHECKING:
    from rq.job import Job

logger = logging.getLogger(__name__)


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
    from storage.db import create_engine_for, make_sessionmaker  # noqa: PLC0415

    engine = create_engine_for(Settings().database_url)
    try:
        reason = f"{exc_type.__name__}: {exc_value}" if exc_type is not None else "job failed"
        fail_unfinished(make_sessionmaker(engine), job.id, f"the worker failed the job: {reason}")
    finally:
        engine.dispose()


def serve(settings: Settings, *, burst: bool = False, queue: str | None = None) -> int:
    """Work the retrain queue until stopped (or, with `burst`, until it is empty)."""
    import redis  # noqa: PLC0415
    from rq import Queue, Worker  # noqa: PLC0415
    from rq.serializers import JSONSerializer  # noqa: PLC0415

    if settings.redis_url is None:
        raise ValueError(
            "ARBITER_REDIS_URL is not set: without Redis the service runs retraining "
            "in local processes and needs no worker"
        )
    connection = redis.Redis.from_url(settings.redis_url)
    try:
        name = queue or settings.retrain_queue
        worker = Worker(
            [Queue(name, connection=connection, serializer=JSONSerializer)],
            connection=connection,
            serializer=JSONSerializer,
        )
        logger.info("serving retrain queue %r", name)
        worker.work(burst=burst, logging_level="INFO")
    finally:
        connection.close()
    return 0
