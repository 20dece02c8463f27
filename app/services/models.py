"""Model versions of learned policies: list them, roll forward or back, serve the active ones.

The database is the source of truth: `model_versions` holds every version's
weights (safetensors bytes) and which one is active per policy. The cache holds
copies so that a replica starts without reading weights from the database and
learns of a change at once:

* `models:active:{policy}`: JSON `{"version", "meta"}` of the active version
  (no expiry; rewritten on every activation);
* `models:weights:{policy}:{version}`: that version's weights (versions never
  change, so any copy is good; kept :data:`WEIGHTS_TTL_S`);
* channel `arbiter:models`: `{"policy", "version"}`, published after each
  activation is committed. A replica that hears it asks the database which
  version is active (the message is a cue, the database the truth) and uses the
  announced version directly only while the database is away.

With Redis these are shared by every replica (under the `arbiter:` key
prefix); without it they live in the process.

:class:`ActiveModels` is the :class:`~policies.learned.models.ModelProvider` the
decision service builds its pipelines with. :class:`ModelWatcher` keeps it
current: it reloads a policy's model when a message arrives, and every
`models_check_interval_s` asks the database for the active versions (a query
of version names only), so a replica converges even after missing a message
(a Redis outage, or an activation by a process with no Redis). Loading and
pipeline building happen on the watcher's thread, never on a request's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.errors import NotFoundError
from app.schemas import ModelVersionOut
from policies.learned.models import ModelBlob
from storage.cache import Cache, Unsubscribe
from storage.models import ModelVersion
from storage.repositories import ModelVersionNotFoundError, ModelVersionRepository

logger = logging.getLogger(__name__)

MODELS_CHANNEL = "arbiter:models"
WEIGHTS_TTL_S = 7 * 24 * 3600.0
"""Weights copies expire after a week unused; the database still has them."""


def active_model_key(policy: str) -> str:
    """Cache key of a policy's active version and its metadata (JSON)."""
    return f"models:active:{policy}"


def model_weights_key(policy: str, version: str) -> str:
    """Cache key of one version's weights (safetensors bytes)."""
    return f"models:weights:{policy}:{version}"


def _out(row: ModelVersion) -> ModelVersionOut:
    return ModelVersionOut(
        policy=row.policy,
        version=row.version,
        active=row.active,
        created_at=row.created_at,
        metadata=row.meta,
    )


def cache_model(cache: Cache, blob: ModelBlob, *, active: bool) -> None:
    """Copy a version's weights to the cache, and mark it active there when `active`."""
    cache.set(model_weights_key(blob.policy, blob.version), blob.weights, WEIGHTS_TTL_S)
    if active:
        pointer = orjson.dumps({"version": blob.version, "meta": dict(blob.meta)})
        cache.set(active_model_key(blob.policy), pointer)


def _blob(row: ModelVersion) -> ModelBlob:
    return ModelBlob(policy=row.policy, version=row.version, weights=row.weights, meta=row.meta)


class ModelService:
    def __init__(self, sessions: sessionmaker[Session], cache: Cache) -> None:
        self.sessions = sessions
        self.cache = cache

    def list_versions(self, policy: str | None = None) -> list[ModelVersionOut]:
        with self.sessions() as session:
            return [_out(row) for row in ModelVersionRepository(session).list(policy)]

    def activate(self, policy: str, version: str) -> ModelVersionOut:
        """Make `version` active (committed first), copy it to the cache, tell the replicas."""
        with self.sessions.begin() as session:
            try:
                row = ModelVersionRepository(session).activate(policy, version)
            except ModelVersionNotFoundError as error:
                raise NotFoundError(str(error)) from error
            out = _out(row)
            blob = _blob(row)
        # The cache before the message: a replica that hears it finds the weights there.
        cache_model(self.cache, blob, active=True)
        self.cache.publish(MODELS_CHANNEL, orjson.dumps({"policy": policy, "version": version}))
        return out


class ActiveModels:
    """The active version of each learned policy, held in memory: a `ModelProvider`.

    The mapping is replaced whole on every change, never mutated, so a reader
    sees one consistent state without a lock.
    """

    def __init__(
        self, sessions: sessionmaker[Session], cache: Cache, policies: Iterable[str]
    ) -> None:
        self.sessions = sessions
        self.cache = cache
        self.policies = tuple(sorted(set(policies)))
        self._blobs: Mapping[str, ModelBlob | None] = dict.fromkeys(self.policies)
        self._sources: Mapping[str, str] = dict.fromkeys(self.policies, "none")
        self._lock = threading.Lock()  # one loader at a time (start-up, watcher)

    # -- ModelProvider -----------------------------------------------------------------------

    def model_for(self, policy: str) -> ModelBlob | None:
        return self._blobs.get(policy)

    # -- what is loaded ---------------------------------------------------------------------

    def versions(self) -> dict[str, str | None]:
        """Policy → the version in memory (None: no version active, the shipped model)."""
        return {p: (b.version if b is not None else None) for p, b in self._blobs.items()}

    def sources(self) -> dict[str, str]:
        """Policy → where its model came from: `cache`, `database` or `none`."""
        return dict(self._sources)

    # -- loading ------------------------------------------------------------------------------

    def load(self) -> None:
        """At start: each policy's active version from the cache, else from the database.

        Never raises: a policy whose version cannot be read keeps the shipped model
        until the watcher's next check.
        """
        with self._lock:
            blobs, sources = dict(self._blobs), dict(self._sources)
            for policy in self.policies:
                blob = self._from_cache_pointer(policy)
                source = "cache"
                if blob is None:
                    try:
                        blob = self._active_from_database(policy)
                    except SQLAlchemyError as error:
                        logger.warning(
                            "active %s model not readable (%s); using the shipped one for now",
                            policy,
                            type(error).__name__,
                        )
                    source = "database" if blob is not None else "none"
                    if blob is not None:
                        cache_model(self.cache, blob, active=True)
                blobs[policy], sources[policy] = blob, source
            self._blobs, self._sources = blobs, sources

    def refresh(self, policy: str, version: str | None = None) -> bool:
        """Bring `policy` to `version` (None: whatever the database says is active).

        Returns whether the model in memory changed. Raises `SQLAlchemyError` when the
        database had to be asked and could not be.
        """
        with self._lock:
            from_database = version is None
            if version is None:
                with self.sessions() as session:
                    version = ModelVersionRepository(session).active_version(policy)
            current = self._blobs.get(policy)
            if (current.version if current is not None else None) == version:
                return False
            blob: ModelBlob | None = None
            source = "none"
            if version is not None:
                blob, source = self.version(policy, version)
                if blob is None:
                    logger.warning(
                        "model version %r of %s not found; keeping %s",
                        version,
                        policy,
                        current.version if current is not None else "the shipped model",
                    )
                    return False
            self._blobs = {**self._blobs, policy: blob}
            self._sources = {**self._sources, policy: source}
            if from_database:
                # The cache disagreed with the database (a stale pointer, a missed
                # activation): fix it for the replicas that start next.
                if blob is None:
                    self.cache.delete(active_model_key(policy))
                else:
                    cache_model(self.cache, blob, active=True)
            logger.info(
                "%s model is now %s (from %s)", policy, version or "the shipped one", source
            )
            return True

    def version(self, policy: str, version: str) -> tuple[ModelBlob | None, str]:
        """One version's blob, the cache first, and where it came from; (None, "none") if
        it exists nowhere. Raises `SQLAlchemyError` when the database is needed and away."""
        weights = self.cache.get(model_weights_key(policy, version))
        if weights is not None:
            meta = self._cached_meta(policy, version)
            return ModelBlob(policy=policy, version=version, weights=weights, meta=meta), "cache"
        with self.sessions() as session:
            row = ModelVersionRepository(session).get(policy, version)
            if row is None:
                return None, "none"
            blob = _blob(row)
        cache_model(self.cache, blob, active=False)
        return blob, "database"

    def _cached_meta(self, policy: str, version: str) -> dict[str, Any]:
        pointer = self._pointer(policy)
        if pointer is not None and pointer.get("version") == version:
            meta = pointer.get("meta")
            if isinstance(meta, dict):
                return meta
        return {}

    def _pointer(self, policy: str) -> dict[str, Any] | None:
        raw = self.cache.get(active_model_key(policy))
        if raw is None:
            return None
        try:
            pointer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        return pointer if isinstance(pointer, dict) else None

    def _from_cache_pointer(self, policy: str) -> ModelBlob | None:
        pointer = self._pointer(policy)
        version = pointer.get("version") if pointer is not None else None
        if not isinstance(version, str):
            return None
        weights = self.cache.get(model_weights_key(policy, version))
        if weights is None:
            return None
        meta = pointer.get("meta") if pointer is not None else None
        return ModelBlob(
            policy=policy,
            version=version,
            weights=weights,
            meta=meta if isinstance(meta, dict) else {},
        )

    def _active_from_database(self, policy: str) -> ModelBlob | None:
        with self.sessions() as session:
            row = ModelVersionRepository(session).active(policy)
            return _blob(row) if row is not None else None


class ModelWatcher:
    """Keeps :class:`ActiveModels` current and tells `on_change` which policies changed.

    A daemon thread wakes on an `arbiter:models` message (reloading that policy
    to the announced version) and every `interval_s` (asking the database for
    every policy's active version). `on_change` runs on that thread.
    """

    def __init__(
        self,
        models: ActiveModels,
        cache: Cache,
        on_change: Callable[[set[str]], None],
        interval_s: float,
    ) -> None:
        self.models = models
        self.cache = cache
        self.on_change = on_change
        self.interval_s = interval_s
        self._announced: dict[str, str] = {}
        self._check_now = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Unsubscribe | None = None
        self.checks = 0
        """Completed database checks (for tests and metrics)."""

    def start(self) -> None:
        self._unsubscribe = self.cache.subscribe(MODELS_CHANNEL, self._on_message)
        self._thread = threading.Thread(target=self._run, name="arbiter-models", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def wake(self) -> None:
        """Check the database now rather than at the next interval."""
        with self._lock:
            self._check_now = True
        self._wake.set()

    def _on_message(self, message: bytes) -> None:
        try:
            announced = orjson.loads(message)
            policy, version = announced["policy"], announced["version"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            logger.warning("ignoring a malformed %s message: %r", MODELS_CHANNEL, message[:200])
            return
        if policy not in self.models.policies or not isinstance(version, str):
            return
        with self._lock:
            self._announced[policy] = version
        self._wake.set()

    def _run(self) -> None:
        next_check = 0.0  # check at once: what the cache said at start may be stale
        while not self._stop.is_set():
            # Cleared before reading what woke it, so a message arriving meanwhile
            # wakes the next wait instead of being left for the next interval.
            self._wake.clear()
            with self._lock:
                announced, self._announced = self._announced, {}
                check_now, self._check_now = self._check_now, False
            changed: set[str] = set()
            for policy, version in announced.items():
                changed |= self._refresh(policy, version)
            if check_now or time.monotonic() >= next_check:
                for policy in self.models.policies:
                    changed |= self._refresh(policy, None)
                self.checks += 1
                next_check = time.monotonic() + self.interval_s
            if changed:
                try:
                    self.on_change(changed)
                except Exception:
                    logger.exception("rebuilding pipelines after a model change failed")
            self._wake.wait(max(0.0, next_check - time.monotonic()))

    def _refresh(self, policy: str, announced: str | None) -> set[str]:
        """Reload `policy` if its active version changed; the database decides.

        An announced version is used as is only when the database cannot be asked
        (its weights then come from the cache): a message on a Redis shared with
        another deployment must not override this one's database.
        """
        try:
            try:
                changed = self.models.refresh(policy, None)
            except SQLAlchemyError:
                if announced is None:
                    raise
                changed = self.models.refresh(policy, announced)
        except SQLAlchemyError as error:
            logger.warning(
                "cannot check the active %s model (%s); keeping the one loaded",
                policy,
                type(error).__name__,
            )
            return set()
        except Exception:
            logger.exception("loading the %s model failed; keeping the one loaded", policy)
            return set()
        return {policy} if changed else set()
