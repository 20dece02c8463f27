"""Retraining learned policies: the admin API's jobs, the queues that carry them, the run.

`POST /admin/retrain` validates the request, records a `retrain_jobs` row
(`queued`) and hands its id to a queue; it never trains in the request path.

* With Redis (`ARBITER_REDIS_URL`), the queue is RQ's, named by
  `ARBITER_RETRAIN_QUEUE` (default `arbiter-retrain`), served by `arbiter worker`
  processes. Jobs carry only the retrain job's id, JSON-serialised: the worker
  reads the request from the database and its own configuration from the same
  `ARBITER_*` environment as the service (no connection string travels).
* Without Redis, :class:`LocalProcessQueue` runs the jobs one at a time, each
  in a fresh process of this machine (multiprocessing, spawn), so training
  never competes with requests for the interpreter.

:func:`run_retrain_job` is the run itself, shared by the worker, the local
process and `arbiter train`: read the window's decisions, train with the
policy's trainer (:mod:`training.registry`), store the candidate as a new version with its
metrics and parent, activate it through :class:`ModelService` (so replicas hear
of it) when it wins or when asked to, and record the outcome. Progress
(`{"stage", "fraction"}`) is written to the job as it goes.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from app.schemas import RetrainJobOut, RetrainProgressOut, RetrainRequest, TrainerOut
from app.services.models import ModelService
from policies.model import Problem
from storage.cache import Cache
from storage.models import RetrainJob, RetrainStatus
from storage.repositories import (
    DecisionRepository,
    ModelVersionRepository,
    RetrainJobRepository,
)
from training.registry import (
    Incumbent,
    LoggedSource,
    Record,
    Trainer,
    Trainers,
    TrainingBudget,
    TrainingError,
    UnknownTrainerError,
    logged_source,
)
from training.registry import trainers as all_trainers

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from app.settings import Settings

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
"""Progress is written at most this often (and at every stage change)."""

Progress = Callable[[str, float], None]


def job_out(job: RetrainJob) -> RetrainJobOut:
    progress = job.progress or None
    return RetrainJobOut(
        id=job.id,
        policy=job.policy,
        status=job.status,
        progress=RetrainProgressOut.model_validate(progress) if progress else None,
        version=job.version,
        metrics=job.metrics,
        error=job.error,
        params=job.params,
        created_at=job.created_at,
        updated_at=job.updated_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


class RetrainQueue(Protocol):
    """Where accepted retrain jobs wait for a process to run them."""

    @property
    def kind(self) -> str:
        """`rq:<queue name>` or `local-process`."""
        ...

    def enqueue(self, job_id: str) -> None:
        """Hand the job over; raises when it cannot be (the job is then failed)."""
        ...

    def close(self) -> None: ...


def normalized(request: RetrainRequest, trainer: Trainer) -> RetrainRequest:
    """`since` and `steps` (DESIGN's short forms) folded into `window` and `budget`, and the
    budget validated by `trainer`'s schema with its defaults filled in.

    Raises :class:`InvalidRequestError` naming each problem's path (`budget.updates`).
    """
    problems: list[Problem] = []
    window, budget = request.window, dict(request.budget)
    if request.since is not None:
        if window.since is not None and window.since != request.since:
            problems.append(Problem(path="since", message="give `since` or `window.since`"))
        window = window.model_copy(update={"since": request.since})
    if request.steps is not None:
        if "updates" in budget and budget["updates"] != request.steps:
            problems.append(Problem(path="steps", message="give `steps` or `budget.updates`"))
        budget["updates"] = request.steps
    if window.since is not None and window.until is not None and window.since >= window.until:
        problems.append(Problem(path="window.until", message="must be later than window.since"))
    validated: TrainingBudget | None = None
    try:
        validated = trainer.Budget.model_validate(budget)
    except ValidationError as error:
        for problem in error.errors(include_url=False):
            path = ".".join(["budget", *(str(p) for p in problem["loc"])])
            problems.append(Problem(path=path, message=problem["msg"]))
    if problems or validated is None:
        raise InvalidRequestError(f"{problems[0].path}: {problems[0].message}", problems)
    return request.model_copy(
        update={
            "window": window,
            "budget": validated.model_dump(mode="json"),
            "since": None,
            "steps": None,
        }
    )


def trainer_for(trainers: Trainers, policy: str) -> Trainer:
    """The trainer of `policy`; 422 naming the known ones when it has none."""
    try:
        return trainers.get(policy)
    except UnknownTrainerError as error:
        raise InvalidRequestError(
            f"policy: {error}", [Problem(path="policy", message="not a retrainable learned policy")]
        ) from error


class RetrainService:
    """The admin API's side: validate, record, enqueue, report."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        queue: RetrainQueue | None,
        max_active: int = 16,
        heartbeat_timeout_s: float = 60.0,
        trainers: Trainers | None = None,
    ) -> None:
        self.sessions = sessions
        self.queue = queue
        self.trainers = trainers if trainers is not None else all_trainers()
        self.max_active = max_active
        self.heartbeat_timeout_s = heartbeat_timeout_s

    def create(self, request: RetrainRequest) -> RetrainJobOut:
        """Validate `request` and record it as a queued job (not yet enqueued).

        422 for a policy with no trainer, a budget its trainer's schema refuses, or
        (for a trainer that imitates) a window with no logged decision; 503 when the
        database is away.
        """
        trainer = trainer_for(self.trainers, request.policy)
        request = normalized(request, trainer)
        window = request.window
        try:
            with self.sessions.begin() as session:
                if trainer.needs_logged_decisions:
                    logged = DecisionRepository(session).count_in_window(
                        window.since, window.until, request.profile, request.exclude_callers
                    )
                else:
                    logged = None
                if logged == 0:
                    where = f" of profile {request.profile!r}" if request.profile else ""
                    raise InvalidRequestError(
                        f"window: no decision{where} logged between "
                        f"{window.since or 'the beginning'} and {window.until or 'now'}",
                        [Problem(path="window", message="no logged decision in the window")],
                    )
                jobs = RetrainJobRepository(session)
                self._check_room(jobs, request)
                job = jobs.create(
                    request.policy,
                    request.model_dump(mode="json", exclude={"since", "steps", "concurrent"}),
                )
                return job_out(job)
        except SQLAlchemyError as error:
            raise UnavailableError(
                f"the database is unavailable ({type(error).__name__}); retry later"
            ) from error

    def _check_room(self, jobs: RetrainJobRepository, request: RetrainRequest) -> None:
        """409 for a second retraining of one (policy, profile) unless asked for; 429 when
        the queue is full. Checked in the creating transaction; replicas creating at the
        same instant may both pass (the queue bound is a guard, not a lock)."""
        # A job whose worker died holds no place: fail it first (it can be sent again).
        jobs.fail_silent(self.heartbeat_timeout_s)
        active = jobs.active()
        if not request.concurrent:
            same = [
                job
                for job in active
                if job.policy == request.policy and job.params.get("profile") == request.profile
            ]
            if same:
                what = f"profile {request.profile!r}" if request.profile else "any profile"
                raise ConflictError(
                    f"retrain job {same[0].id} of {request.policy!r} ({what}) is already "
                    f"{same[0].status}; poll GET /admin/retrain/{same[0].id}, or send "
                    "`concurrent: true` to queue another",
                    [Problem(path="concurrent", message="another job is active")],
                )
        if len(active) >= self.max_active:
            raise TooManyRequestsError(
                f"{len(active)} retrain jobs are queued or running (at most "
                f"{self.max_active}); retry once some have finished"
            )

    def start(self, request: RetrainRequest) -> RetrainJobOut:
        """Record the job and enqueue it; the job runs elsewhere."""
        if self.queue is None:
            raise UnavailableError("retraining is not available in this process")
        job = self.create(request)
        try:
            self.queue.enqueue(job.id)
        except Exception as error:
            logger.warning("could not enqueue retrain job %s: %s", job.id, error)
            detail = f"could not enqueue on {self.queue.kind}: {type(error).__name__}: {error}"
            _finish(self.sessions, job.id, RetrainStatus.FAILED, error=detail)
            raise UnavailableError(detail) from error
        return job

    def trainer_catalog(self) -> list[TrainerOut]:
        """Every learned policy that can be retrained, with its budget schema."""
        return [
            TrainerOut(
                name=trainer.name,
                summary=trainer.summary,
                stages=list(trainer.stages),
                needs_logged_decisions=trainer.needs_logged_decisions,
                budget=trainer.Budget.model_json_schema(),
            )
            for trainer in self.trainers
        ]

    def get(self, job_id: str) -> RetrainJobOut:
        try:
            with self.sessions.begin() as session:
                jobs = RetrainJobRepository(session)
                jobs.fail_silent(self.heartbeat_timeout_s)
                job = jobs.get(job_id)
                if job is None:
                    raise NotFoundError(f"no retrain job {job_id!r}")
                return job_out(job)
        except SQLAlchemyError as error:
            raise UnavailableError(
                f"the database is unavailable ({type(error).__name__}); retry later"
            ) from error


def _finish(
    sessions: sessionmaker[Session],
    job_id: str,
    status: RetrainStatus,
    *,
    version: str | None = None,
    metrics: dict[str, Any] | None = None,
    error: str | None = None,
) -> bool:
    """Move a job to a final status unless it already has one; whether it moved."""
    with sessions.begin() as session:
        repository = RetrainJobRepository(session)
        job = repository.get(job_id)
        if job is None or job.status in (RetrainStatus.SUCCEEDED, RetrainStatus.FAILED):
            return False
        repository.update_status(job_id, status, version=version, metrics=metrics, error=error)
        return True


def fail_unfinished(sessions: sessionmaker[Session], job_id: str, reason: str) -> bool:
    """Fail a job that did not finish (its process died, timed out, or was stopped)."""
    try:
        return _finish(sessions, job_id, RetrainStatus.FAILED, error=reason)
    except SQLAlchemyError:
        logger.exception("could not record that retrain job %s failed", job_id)
        return False


# -- the run ----------------------------------------------------------------------------------


HEARTBEAT_EVERY_S = 10.0
"""How often a running job's worker says it is alive; the service fails a job silent for
`ARBITER_RETRAIN_HEARTBEAT_TIMEOUT_S` (default 60 s, several beats)."""


def heartbeat_interval(timeout_s: float) -> float:
    """Beats often enough that a busy machine delaying one or two does not fail a live job:
    four per timeout, at most every :data:`HEARTBEAT_EVERY_S`."""
    return min(HEARTBEAT_EVERY_S, timeout_s / 4.0)


class _Heartbeat:
    """A thread that touches the running job every `every_s` until stopped."""

    def __init__(self, sessions: sessionmaker[Session], job_id: str, every_s: float) -> None:
        self._sessions = sessions
        self._job_id = job_id
        self._every_s = every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"arbiter-heartbeat-{job_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stopped.wait(self._every_s):
            try:
                with self._sessions.begin() as session:
                    RetrainJobRepository(session).touch(self._job_id)
            except SQLAlchemyError as error:  # a missed beat; the next one may get through
                logger.warning("heartbeat of retrain job %s not recorded: %s", self._job_id, error)


class _ProgressWriter:
    """Writes `{"stage", "fraction"}` to the job at most every second and at stage changes."""

    def __init__(self, sessions: sessionmaker[Session], job_id: str, also: Progress | None) -> None:
        self.sessions = sessions
        self.job_id = job_id
        self.also = also
        self._stage = ""
        self._written_at = 0.0

    def __call__(self, stage: str, fraction: float) -> None:
        if self.also is not None:
            self.also(stage, fraction)
        now = time.monotonic()
        if stage == self._stage and fraction < 1.0 and now - self._written_at < PROGRESS_EVERY_S:
            return
        self._stage, self._written_at = stage, now
        try:
            with self.sessions.begin() as session:
                RetrainJobRepository(session).update_progress(self.job_id, stage, fraction)
        except SQLAlchemyError as error:  # progress is informative: never fail a run for it
            logger.warning("could not record progress of retrain job %s: %s", self.job_id, error)


def _incumbent(session: Session, trainer: Trainer) -> Incumbent:
    row = ModelVersionRepository(session).active(trainer.name)
    if row is not None:
        return Incumbent(version=row.version, weights=row.weights)
    return Incumbent(version=trainer.shipped_version(), weights=None)


def _records(
    sessions: sessionmaker[Session], request: RetrainRequest, source: LoggedSource = "decisions"
) -> Iterator[Record]:
    with sessions() as session:
        repository = DecisionRepository(session)
        window = (request.window.since, request.window.until, request.profile)
        limit, excluded = int(request.budget["max_records"]), request.exclude_callers
        if source == "dispatches":
            yield from repository.dispatches_with_outcomes(
                *window, limit=limit, exclude_callers=excluded
            )
        else:
            yield from repository.snapshots_and_decisions(
                *window,
                limit=limit,
                exclude_callers=excluded,
                finishes=source == "decisions-with-finishes",
            )


def new_version_name(weights: bytes, now: datetime | None = None) -> str:
    """`YYYYMMDD-HHMMSS-` and 8 hex digits of the weights' SHA-256: sortable, names the bytes."""
    moment = now or datetime.now(UTC)
    return f"{moment:%Y%m%d-%H%M%S}-{hashlib.sha256(weights).hexdigest()[:8]}"


def run_retrain_job(
    sessions: sessionmaker[Session],
    cache: Cache,
    job_id: str,
    *,
    trainers: Trainers | None = None,
    on_progress: Progress | None = None,
    heartbeat_s: float = HEARTBEAT_EVERY_S,
) -> RetrainJobOut | None:
    """Run a queued job to its end with its policy's trainer and record the outcome; None
    when it was not runnable.

    Never raises for a failed training: the failure is the job's `error`. A job
    that is not `queued` (already taken by another worker, or finished) is left
    alone.
    """
    with sessions.begin() as session:
        repository = RetrainJobRepository(session)
        job = repository.get(job_id)
        if job is None:
            logger.error("retrain job %s does not exist here; skipped", job_id)
            return None
        if job.status != RetrainStatus.QUEUED:
            logger.warning("retrain job %s is %s, not queued; skipped", job_id, job.status)
            return None
        repository.update_status(job_id, RetrainStatus.RUNNING)
        request = RetrainRequest.model_validate(job.params)
    progress = _ProgressWriter(sessions, job_id, on_progress)
    heartbeat = _Heartbeat(sessions, job_id, heartbeat_s)
    heartbeat.start()
    try:
        progress("loading", 0.0)
        trainer = (trainers if trainers is not None else all_trainers()).get(request.policy)
        budget = trainer.Budget.model_validate(request.budget)
        with sessions() as session:
            incumbent = _incumbent(session, trainer)
        candidate = trainer.train(
            _records(sessions, request, logged_source(trainer)),
            incumbent,
            budget,
            seed=request.seed,
            start=request.start,
            on_progress=progress,
        )
        weights, wins = candidate.weights, candidate.wins
        metrics, model_meta = candidate.metrics, candidate.model_meta
        progress("storing", 0.0)
        version = new_version_name(weights)
        activate = request.activate == "always" or (request.activate == "if_better" and wins)
        metrics = {**metrics, "incumbent_version": incumbent.version, "activated": activate}
        meta = {
            "parent": incumbent.version,
            "retrain_job": job_id,
            "window": {
                "since": request.window.since.isoformat() if request.window.since else None,
                "until": request.window.until.isoformat() if request.window.until else None,
                "profile": request.profile,
                "records": metrics.get("records"),
            },
            "budget": budget.model_dump(mode="json"),
            "seed": request.seed,
            "start": request.start,
            "metrics": metrics,
            "model": model_meta,
        }
        with sessions.begin() as session:
            ModelVersionRepository(session).add(request.policy, version, weights, meta)
        if activate:
            ModelService(sessions, cache).activate(request.policy, version)
        progress("storing", 1.0)
        _finish(sessions, job_id, RetrainStatus.SUCCEEDED, version=version, metrics=metrics)
    except TrainingError as error:
        _finish(sessions, job_id, RetrainStatus.FAILED, error=str(error))
    except Exception as error:
        logger.exception("retrain job %s failed", job_id)
        fail_unfinished(sessions, job_id, f"{type(error).__name__}: {error}")
    finally:
        heartbeat.stop()
    with sessions() as session:
        finished = RetrainJobRepository(session).get(job_id)
        return job_out(finished) if finished is not None else None


def run_with_settings(
    settings: Settings, job_id: str, *, on_progress: Progress | None = None
) -> RetrainJobOut | None:
    """:func:`run_retrain_job` on the database and cache `settings` name."""
    from storage.cache import create_cache  # noqa: PLC0415
    from storage.db import create_engine_for, make_sessionmaker  # noqa: PLC0415

    engine = create_engine_for(settings.database_url)
    cache = create_cache(settings.redis_url, prefix=settings.redis_prefix)
    try:
        return run_retrain_job(
            make_sessionmaker(engine),
            cache,
            job_id,
            on_progress=on_progress,
            heartbeat_s=heartbeat_interval(settings.retrain_heartbeat_timeout_s),
        )
    finally:
        cache.close()
        engine.dispose()


# -- queues -----------------------------------------------------------------------------------


class RqRetrainQueue:
    """RQ on Redis; `arbiter worker` serves it (see :mod:`app.worker`)."""

    def __init__(self, redis_url: str, name: str, timeout_s: int) -> None:
        import redis  # noqa: PLC0415
        from rq import Queue  # noqa: PLC0415
        from rq.serializers import JSONSerializer  # noqa: PLC0415

        # Short timeouts: an unreachable Redis answers the admin with a 503, not a hang.
        self._connection = redis.Redis.from_url(
            redis_url, socket_connect_timeout=2, socket_timeout=5
        )
        self._queue = Queue(name, connection=self._connection, serializer=JSONSerializer)
        self._timeout_s = timeout_s

    @property
    def kind(self) -> str:
        return f"rq:{self._queue.name}"

    def enqueue(self, job_id: str) -> None:
        from rq import Callback  # noqa: PLC0415

        self._queue.enqueue_call(
            "app.worker.retrain_task",
            args=(job_id,),
            job_id=job_id,
            timeout=self._timeout_s,
            result_ttl=24 * 3600,
            failure_ttl=7 * 24 * 3600,
            on_failure=Callback("app.worker.retrain_task_failed"),
        )

    def close(self) -> None:
        self._connection.close()


class LocalProcessQueue:
    """No Redis: jobs run one after another, each in a new process of this machine.

    A dispatcher thread starts the processes (spawned, not forked: this process
    has threads) and waits for them; `on_finished` is told after each (the model
    watcher checks at once, so an activation is served without waiting for the
    next interval). A process running past `time_limit_s` (default
    `ARBITER_RETRAIN_TIMEOUT_S`) is stopped and its job failed, as the RQ worker does.
    On close, the running process is stopped and unfinished jobs are failed with a
    reason.
    """

    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        on_finished: Callable[[], None] | None = None,
        *,
        time_limit_s: float | None = None,
    ) -> None:
        self._settings = settings.model_dump(mode="json")
        self._time_limit_s = (
            time_limit_s if time_limit_s is not None else float(settings.retrain_timeout_s)
        )
        self._sessions = sessions
        self._on_finished = on_finished
        self._pending: collections.deque[str] = collections.deque()
        self._lock = threading.Condition()
        self._closed = False
        self._running: tuple[str, BaseProcess] | None = None
        self._thread = threading.Thread(target=self._run, name="arbiter-retrain", daemon=True)
        self._thread.start()

    @property
    def kind(self) -> str:
        return "local-process"

    def enqueue(self, job_id: str) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the service is stopping")
            self._pending.append(job_id)
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._pending)
            self._pending.clear()
            running = self._running
            self._lock.notify_all()
        if running is not None and running[1].is_alive():
            running[1].terminate()
        self._thread.join(timeout=10.0)
        for job_id in pending + ([running[0]] if running is not None else []):
            fail_unfinished(self._sessions, job_id, "the service stopped before the job finished")

    def _run(self) -> None:
        context = multiprocessing.get_context("spawn")
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                job_id = self._pending.popleft()
                process = context.Process(
                    target=_run_in_process,
                    args=(self._settings, job_id),
                    name=f"arbiter-retrain-{job_id}",
                )
                process.start()
                self._running = (job_id, process)
            process.join(self._time_limit_s)
            over_time = process.is_alive()
            if over_time:
                process.terminate()
                process.join()
            with self._lock:
                self._running = None
                closed = self._closed
            if over_time:
                fail_unfinished(
                    self._sessions,
                    job_id,
                    f"the job ran past its time limit of {self._time_limit_s:g} s and was stopped",
                )
            elif not closed and process.exitcode != 0:
                fail_unfinished(
                    self._sessions,
                    job_id,
                    f"the retraining process exited with code {process.exitcode}",
                )
            if self._on_finished is not None:
                self._on_finished()


def _run_in_process(settings_json: dict[str, Any], job_id: str) -> None:
    """Entry point of a local retraining process."""
    from app.settings import Settings  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO)
    run_with_settings(Settings.model_validate(settings_json), job_id)
