"""Decisions: parse the snapshot, run the profile's pipeline, answer, log off the path.

The request path never touches the database: pipelines are built at start-up,
the decision is encoded straight to JSON bytes by pydantic-core, and the log
record is handed to the write-behind :class:`storage.log.DecisionLog`.

Stateless profiles (most) do not touch the cache either. A stateful profile
(one whose pipeline has :attr:`Pipeline.state_keys`, e.g. `oasis`) reads each
of its keys for the snapshot's cluster from the cache before deciding
(`state:{cluster_id}:{key}`, JSON) and writes the updates back after: the
policy state of DESIGN §5, shared by every replica through Redis (in process
when there is none). Within a process, one cluster's stateful rounds are
serialised by a lock (decisions run on several threads). Across replicas, rounds
of one cluster are expected one at a time, as a scheduler loop sends them; two
replicas deciding for the same cluster at once would race (the later write
wins), and the next round's snapshot reconciles what was lost (running jobs win
over the state). Throughput feedback is folded into the state of the policies that
learn from it (:meth:`DecisionService.learn`) under the same lock, once per event id:
the cluster's recently learned ids are kept beside its state
(`learned-events:{cluster_id}`).

A cluster's keys expire `state_ttl_s` (`ARBITER_STATE_TTL_S`, 30 days) after it was
last heard from: every write passes the TTL, and a stateful decision also restarts
the expiry of the keys it only reads (the dual agent's GP, written by feedback alone).
So a cluster that keeps deciding or sending feedback keeps its state, while the state
of a decommissioned cluster, or of a finished replay (`arbiter simulate --via-http`,
an id of its own per run), goes from Redis and from the in-process cache. A cluster
silent for longer starts from empty state, as a new one does: the snapshot wins over
the state (running jobs are what the snapshot says; OASiS prices them by their real
placement, Tiresias forgets its promotions, the GP starts from its prior). An operator
drops a cluster's state on purpose with :meth:`DecisionService.drop_state`
(`DELETE /admin/clusters/{cluster_id}/state`), under the same lock, with the same effect.

Learned policies get their model from a `ModelProvider` (the service's
:class:`app.services.models.ActiveModels`). When a model changes,
:meth:`DecisionService.rebuild` builds the affected pipelines on the caller's
thread (the model watcher's) and swaps the whole mapping in one assignment: a
request reads the mapping once, so one in flight finishes on the pipeline it
started with. Shadowed profiles (:mod:`app.services.shadow`) hand their log
record to the shadow thread instead of straight to the log.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeVar

import msgspec
import orjson
from pydantic import BaseModel, JsonValue, ValidationError

from app.errors import (
    InvalidSnapshotError,
    NotFoundError,
    PolicyFailedError,
    check_no_nul,
    decode_error,
    invalid_request,
    validation_error,
)
from app.memory import HeapTrimmer
from app.metrics import Metrics
from app.schemas import (
    DecisionRequest,
    FeedbackEvent,
    FeedbackRequest,
    JobFinished,
    StageDecisionRequest,
    ThroughputObserved,
)
from app.services.shadow import ShadowDecider, ShadowTarget
from policies.decision import ENGINE_STAGES, Decision, Stage
from policies.engine import Pipeline, PolicyFault
from policies.learned.models import ModelBlob, ModelProvider, StaticModels
from policies.model import (
    Frozen,
    Problem,
    Snapshot,
    ThroughputObservation,
    decode,
    encode,
    snapshot_problems,
    to_builtins,
)
from policies.profiles import Profile
from policies.protocols import FeedbackLearner, StateValue, learned_model_key
from policies.registry import Registry
from storage.cache import Cache, InProcessCache
from storage.records import DecisionRecord, FeedbackRecord

M = TypeVar("M", bound=BaseModel)
S = TypeVar("S", bound=Frozen)

logger = logging.getLogger(__name__)


class LogSink(Protocol):
    def submit_decision(self, record: DecisionRecord) -> None: ...
    def submit_feedback(self, record: FeedbackRecord) -> None: ...


def parse_body(body: bytes, model: type[M]) -> M:
    """Validate a raw JSON body straight into a pydantic `model` (no intermediate dict)."""
    try:
        validated = model.model_validate_json(body)
    except ValidationError as error:
        raise validation_error(error) from error
    check_no_nul(body)
    return validated


class _SnapshotBytes(msgspec.Struct):
    """A request body's `snapshot`, undecoded: a slice of the body the parser skips over."""

    snapshot: msgspec.Raw


def raw_snapshot(body: bytes) -> bytes:
    """The `snapshot` of an already validated request body, as the JSON the caller sent.

    What the decision log keeps: the bytes take a fraction of the memory of the decoded
    snapshot (thousands of objects for a large cluster) while a record waits for the
    writer, and are stored verbatim, with no encoding on the log's thread.
    """
    return bytes(msgspec.json.decode(body, type=_SnapshotBytes).snapshot)


def decode_body(body: bytes, kind: type[S]) -> S:
    """Decode a raw JSON body straight into a core Struct, validated by the decoder."""
    try:
        decoded = decode(body, kind)
    except msgspec.MsgspecError as error:
        raise decode_error(error, body, kind) from error
    check_no_nul(body)
    return decoded


TRIM_AFTER_BYTES = 256 * 1024
"""A request at least this large leaves enough freed heap behind to be worth a trim."""


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """A decision request decoded from its body (:meth:`DecisionService.read`), to be
    decided where the router chooses: on the event loop or on a decision thread."""

    request: DecisionRequest | StageDecisionRequest
    stages: Sequence[Stage] | None
    endpoint: str
    stateful: bool  # its profile keeps state per cluster (a round waits for its lock)
    read_s: float  # seconds the decode and its checks took


@dataclass(frozen=True)
class SnapshotLimits:
    """Sizes that drive a decision's cost; larger snapshots are refused with 422.

    Each is a setting (`ARBITER_MAX_JOBS`, `ARBITER_MAX_NODES`, `ARBITER_MAX_REQUESTS`).
    """

    jobs: int = 100_000
    nodes: int = 20_000
    inference_requests: int = 100_000


def check_snapshot(snapshot: Snapshot, limits: SnapshotLimits | None = None) -> None:
    if limits is not None:
        _check_sizes(snapshot, limits)
    problems = snapshot_problems(snapshot)
    if problems:
        located = [Problem(path=f"snapshot.{p.path}", message=p.message) for p in problems]
        raise InvalidSnapshotError(
            f"{len(located)} problem(s) in the snapshot; first: "
            f"{located[0].path}: {located[0].message}",
            located,
        )


def _check_sizes(snapshot: Snapshot, limits: SnapshotLimits) -> None:
    sizes = (
        ("snapshot.jobs", len(snapshot.jobs), limits.jobs, "ARBITER_MAX_JOBS"),
        ("snapshot.nodes", len(snapshot.nodes), limits.nodes, "ARBITER_MAX_NODES"),
        (
            "snapshot.inference.requests",
            len(snapshot.inference.requests),
            limits.inference_requests,
            "ARBITER_MAX_REQUESTS",
        ),
    )
    problems = [
        Problem(path=path, message=f"{size:,} items; at most {limit:,} ({setting})")
        for path, size, limit, setting in sizes
        if size > limit
    ]
    if problems:
        raise InvalidSnapshotError(
            f"the snapshot is larger than this service takes; first: {problems[0].path}: "
            f"{problems[0].message}",
            problems,
        )


def state_cache_key(cluster_id: str, key: str) -> str:
    """Where a cluster's policy state under `key` lives in the cache."""
    return f"state:{cluster_id}:{key}"


LEARNED_EVENTS = "learned-events"
"""The name of a cluster's learned event ids: their cache key's prefix, and what
:meth:`DecisionService.drop_state` calls them beside the policy state keys it reports."""


def learned_events_cache_key(cluster_id: str) -> str:
    """Where the ids of the throughput events a cluster's feedback learners folded in live.

    Beside the cluster's policy state (:func:`state_cache_key`), under a prefix of its own
    so that no policy's state key can collide with it.
    """
    return f"{LEARNED_EVENTS}:{cluster_id}"


@dataclass(frozen=True)
class DroppedState:
    """What :meth:`DecisionService.drop_state` did to one cluster's state."""

    cluster_id: str
    dropped: tuple[str, ...]
    """The keys the cluster had, now removed."""
    absent: tuple[str, ...]
    """The keys asked for that the cluster did not have (never written, expired, or
    dropped before)."""


LEARNED_EVENTS_KEPT = 16_384
"""How many of a cluster's most recently learned throughput event ids are remembered.

Feedback is idempotent by event id (DESIGN §4): a retried `POST /v1/feedback` (a
timeout, a lost answer) must not teach the GP the same observation twice. A retry
comes soon after its original, so only the most recent ids are kept, oldest dropped
first. 16,384 covers the 10,000 events one request may carry (a retry of the largest
request is recognised whole) with room for some 6,000 more of the cluster's events
arriving between an original and its retry. Each id is kept as an 8-byte digest
(:func:`_event_digest`), so the key is at most 128 KiB whatever the ids' length (up
to 128 characters), and it is read and written once per feedback request that
teaches the cluster anything.
"""

_DIGEST_BYTES = 8


def _event_digest(event_id: str) -> bytes:
    """An event id's 64-bit BLAKE2b digest: what :func:`learned_events_cache_key` keeps.

    Among 16,384 kept digests a new id is taken for a learned one with probability
    under 1e-15; such a collision would only leave one observation unlearned.
    """
    encoded = event_id.encode("utf-8", "surrogatepass")  # any str has one, even a lone surrogate
    return hashlib.blake2b(encoded, digest_size=_DIGEST_BYTES).digest()


def _digest_values(digests: bytes) -> memoryview:
    """Concatenated digests as unsigned 64-bit integers (native order, on both sides of
    a comparison): a set of them is built several times faster than one of 8-byte
    slices, which matters when a full key is read on every feedback request."""
    return memoryview(digests).cast("Q")


def profile_model_keys(profile: Profile, registry: Registry) -> set[str]:
    """The model keys of the learned policies a profile uses (fallbacks included)."""
    choices = [(stage, profile.choice(stage)) for stage in ENGINE_STAGES]
    choices += list(profile.fallback.items())
    keys = {learned_model_key(registry.spec(stage, choice.name).cls) for stage, choice in choices}
    return {key for key in keys if key is not None}


VersionLoader = Callable[[str, str], ModelBlob | None]
"""(policy, version) → that stored version, None if there is none; may raise."""


class DecisionService:
    def __init__(  # noqa: PLR0917 - the lifespan's one call site names them all
        self,
        registry: Registry,
        profiles: dict[str, Profile],
        log: LogSink,
        metrics: Metrics,
        cache: Cache | None = None,
        models: ModelProvider | None = None,
        *,
        shadow: Mapping[str, ShadowTarget] | None = None,
        load_version: VersionLoader | None = None,
        shadow_backlog: int = 1000,
        shadow_retry_s: float = 5.0,
        limits: SnapshotLimits | None = None,
        cpu_budget_s: float | None = None,
        inline_max_bytes: int = 0,
        trimmer: HeapTrimmer | None = None,
        learned_events_kept: int = LEARNED_EVENTS_KEPT,
        state_ttl_s: float | None = None,
    ) -> None:
        self.limits = limits or SnapshotLimits()
        self.state_ttl_s = state_ttl_s
        """Seconds a cluster's policy state and learned event ids are kept after its last
        decision or feedback; None (the default): kept forever."""
        self.learned_events_kept = learned_events_kept
        self.inline_max_bytes = inline_max_bytes
        self.trimmer = trimmer
        self.cpu_budget_s = cpu_budget_s
        self.registry = registry
        self.profiles = profiles
        self.models = models
        self.pipelines = {name: Pipeline.build(p, registry, models) for name, p in profiles.items()}
        self.log = log
        self.metrics = metrics
        self.cache: Cache = cache if cache is not None else InProcessCache()
        self._load_version = load_version
        self._shadow_retry_s = shadow_retry_s
        self._shadow_lock = threading.Lock()
        self._locks_lock = threading.Lock()
        self._cluster_locks: dict[str, threading.Lock] = {}
        self._shadow_pipelines: dict[str, Pipeline | str] = {}
        self._shadow_retry_at: dict[str, float] = {}
        self.shadow: ShadowDecider | None = None
        if shadow:
            self.shadow = ShadowDecider(
                shadow, self._shadow_pipeline, self.load_state, log.submit_decision, shadow_backlog
            )
            for served, target in shadow.items():
                if target.version is None:
                    self._shadow_pipelines[served] = self._build(target.profile, models)

    def _build(self, profile: str, models: ModelProvider | None) -> Pipeline:
        return Pipeline.build(self.profiles[profile], self.registry, models)

    def rebuild(self, changed: set[str]) -> None:
        """Rebuild the pipelines that use a changed model key, then swap them in at once.

        Called off the request path (the model watcher's thread). Pinned shadows keep
        their version.
        """
        rebuilt = dict(self.pipelines)
        for name, profile in self.profiles.items():
            if profile_model_keys(profile, self.registry) & changed:
                rebuilt[name] = self._build(name, self.models)
        self.pipelines = rebuilt
        if self.shadow is None:
            return
        with self._shadow_lock:
            shadows = dict(self._shadow_pipelines)
            for served, target in self.shadow.targets.items():
                keys = profile_model_keys(self.profiles[target.profile], self.registry)
                if target.version is None and keys & changed:
                    shadows[served] = self._build(target.profile, self.models)
            self._shadow_pipelines = shadows

    def _shadow_pipeline(self, served: str) -> Pipeline | str:
        """The shadow pipeline of `served` (on the shadow thread); pinned ones load lazily."""
        with self._shadow_lock:
            current = self._shadow_pipelines.get(served)
            if isinstance(current, Pipeline) or self.shadow is None:
                return current or "no shadow"
            if time.monotonic() < self._shadow_retry_at.get(served, 0.0):
                return current or "shadow not loaded yet"
            self._shadow_retry_at[served] = time.monotonic() + self._shadow_retry_s
        target = self.shadow.targets[served]
        built = self._pinned(target)
        with self._shadow_lock:
            self._shadow_pipelines = {**self._shadow_pipelines, served: built}
        return built

    def _pinned(self, target: ShadowTarget) -> Pipeline | str:
        assert target.version is not None
        keys = profile_model_keys(self.profiles[target.profile], self.registry)
        if not keys:
            return self._build(target.profile, self.models)
        if self._load_version is None:
            return "pinned model versions cannot be loaded here"
        blobs: dict[str, ModelBlob] = {}
        for key in sorted(keys):
            try:
                blob = self._load_version(key, target.version)
            except Exception as error:
                return f"model version {target.version!r} of {key!r} not readable: {error}"
            if blob is None:
                return f"model version {target.version!r} of {key!r} not found"
            blobs[key] = blob
        return self._build(target.profile, StaticModels(blobs))

    def stop(self) -> None:
        """Finish the queued shadow decisions (their records reach the log); before log stop."""
        if self.shadow is not None:
            self.shadow.stop()

    def _cluster_lock(self, cluster_id: str) -> threading.Lock:
        with self._locks_lock:
            lock = self._cluster_locks.get(cluster_id)
            if lock is None:
                lock = self._cluster_locks[cluster_id] = threading.Lock()
            return lock

    def _learners(self) -> dict[str, FeedbackLearner]:
        """State key → the served policy that learns it from feedback (one per key)."""
        learners: dict[str, FeedbackLearner] = {}
        for pipeline in self.pipelines.values():
            for policy in _feedback_learners(pipeline):
                learners.setdefault(policy.state_key, policy)
        return learners

    def learns_from_feedback(self, profile: str) -> bool:
        """Whether a policy of the profile's served pipeline folds throughput feedback into
        the cluster's state (a :class:`FeedbackLearner`), as the simulator's engine decider
        asks of its own pipeline."""
        return bool(_feedback_learners(self.pipeline(profile)))

    def learn(self, cluster_id: str, observations: Mapping[str, ThroughputObservation]) -> None:
        """Fold observed throughput (event id → observation) into the cluster's state of
        every feedback learner, skipping the events it has already learned.

        Feedback is idempotent by event id (DESIGN §4): an event whose id this cluster's
        learners folded in before (a retried request) is not learned again, so the GP
        never counts one observation twice. The cluster's most recently learned ids
        (the last :attr:`learned_events_kept`, :data:`LEARNED_EVENTS_KEPT` by default)
        are kept in the cache under :func:`learned_events_cache_key`, beside the state,
        so every replica sees them; a new event id is learned even when its content
        repeats an earlier event's (it is a second observation).

        Under the cluster's lock, like a stateful decision, so neither loses the other's
        write within a process, and a retry that races its original on this replica
        waits for it. Across replicas, as for decisions, a retry sent to another replica
        while the original is still being learned may be learned twice. The state is
        written before the ids: should the process die between the two writes, a retry
        is learned again rather than its observation lost. A cache
        that is down serves both from the process's copy (:class:`storage.cache.Cache`
        never raises for an outage), as for the state alone.
        """
        learners = self._learners()
        if not learners or not observations:
            return
        with self._cluster_lock(cluster_id):
            learned = self._learned_events(cluster_id)
            known = set(_digest_values(learned))
            fresh: list[ThroughputObservation] = []
            fresh_digests: list[bytes] = []
            for event_id, observation in observations.items():
                digest = _event_digest(event_id)
                value = _digest_values(digest)[0]
                if value in known:
                    continue
                known.add(value)
                fresh.append(observation)
                fresh_digests.append(digest)
            if not fresh:
                return
            state = self.load_state(cluster_id, tuple(learners))
            self.save_state(
                cluster_id,
                {key: learner.learn(state.get(key), fresh) for key, learner in learners.items()},
            )
            remembered = learned + b"".join(fresh_digests)
            oldest_kept = max(0, len(remembered) - self.learned_events_kept * _DIGEST_BYTES)
            self.cache.set(
                learned_events_cache_key(cluster_id), remembered[oldest_kept:], self.state_ttl_s
            )

    def _learned_events(self, cluster_id: str) -> bytes:
        """The digests of the cluster's most recently learned event ids, oldest first;
        none when never written (or unreadable)."""
        raw = self.cache.get(learned_events_cache_key(cluster_id))
        if raw is None:
            return b""
        if len(raw) % _DIGEST_BYTES:
            logger.warning("unreadable learned event ids of cluster %r; ignored", cluster_id)
            return b""
        return raw

    def load_state(self, cluster_id: str, keys: Sequence[str]) -> dict[str, JsonValue]:
        """The cluster's kept state under `keys`; a key never written (or unreadable) is absent."""
        state: dict[str, JsonValue] = {}
        for key in keys:
            raw = self.cache.get(state_cache_key(cluster_id, key))
            if raw is None:
                continue
            try:
                state[key] = orjson.loads(raw)
            except orjson.JSONDecodeError:
                logger.warning("unreadable policy state %r of cluster %r; ignored", key, cluster_id)
        return state

    def save_state(self, cluster_id: str, updates: Mapping[str, StateValue]) -> None:
        """Write the cluster's new state under each key as JSON, expiring
        :attr:`state_ttl_s` from now."""
        for key, value in updates.items():
            self.cache.set(state_cache_key(cluster_id, key), encode(value), self.state_ttl_s)

    def _keep_read_state(
        self, cluster_id: str, loaded: Mapping[str, JsonValue], written: Mapping[str, StateValue]
    ) -> None:
        """Restart the expiry of the keys a decision read but did not write (the GP, which
        only feedback writes), so that a cluster that keeps deciding keeps them too.

        A TTL refresh, not a rewrite: the value (the GP can hold 20,000 machines) does
        not travel again. A key the cluster does not have is left absent. Without a TTL
        the call still runs: it clears an expiry the key was given before (a deployment
        that turned expiry off keeps what it had).
        """
        for key in loaded:
            if key not in written:
                self.cache.expire(state_cache_key(cluster_id, key), self.state_ttl_s)

    def state_keys(self) -> tuple[str, ...]:
        """Every policy state key a served profile reads or writes, sorted."""
        return tuple(sorted({key for p in self.pipelines.values() for key in p.state_keys}))

    def drop_state(self, cluster_id: str, keys: Sequence[str] | None = None) -> DroppedState:
        """Remove the cluster's policy state under `keys` (each a :meth:`state_keys`
        member), or with none given all of it: every served key and the learned event ids.

        What an operator asks for after changing a cluster's hardware (the GP's machine
        speeds are wrong), after a replay ran under a live cluster's id, or to make a
        cluster start afresh. The next decision starts from empty state, as a new
        cluster's does (the snapshot wins). Dropping only some keys keeps the learned
        event ids: they guard against retries, and a retry of an event from before the
        drop (the old hardware's speed) is better not learned into the fresh GP.

        Under the cluster's lock, so it never interleaves with a stateful decision or a
        :meth:`learn` of the cluster in this process; a round in flight on another
        replica may still write its state after the drop, as two replicas deciding for
        one cluster race. Idempotent: asked again, it drops nothing.

        Raises :class:`InvalidRequestError` (422) naming each unknown key.
        """
        known = self.state_keys()
        if keys:
            unknown = [
                Problem(
                    path=f"query.key[{index}]",
                    message=f"unknown state key {key!r}; known: {', '.join(known) or 'none'}",
                )
                for index, key in enumerate(keys)
                if key not in known
            ]
            if unknown:
                raise invalid_request(unknown)
            chosen = tuple(dict.fromkeys(keys))
        else:
            chosen = known
        dropped: list[str] = []
        absent: list[str] = []
        with self._cluster_lock(cluster_id):
            for key in chosen:
                removed = self.cache.delete(state_cache_key(cluster_id, key))
                (dropped if removed else absent).append(key)
            if not keys:
                removed = self.cache.delete(learned_events_cache_key(cluster_id))
                (dropped if removed else absent).append(LEARNED_EVENTS)
        if dropped:
            logger.info("dropped the state %s of cluster %r", ", ".join(dropped), cluster_id)
        return DroppedState(cluster_id, tuple(dropped), tuple(absent))

    def pipeline(self, profile: str) -> Pipeline:
        pipeline = self.pipelines.get(profile)
        if pipeline is None:
            known = ", ".join(sorted(self.pipelines))
            raise NotFoundError(f"unknown profile {profile!r}; known: {known}")
        return pipeline

    def read(self, body: bytes, stage: Stage | None = None) -> ReadRequest:
        """A decision request's body decoded and validated, its profile known (a 404
        otherwise, before any semantic 422); how long that took rides along."""
        started = time.perf_counter()
        request: DecisionRequest | StageDecisionRequest
        stages: Sequence[Stage] | None
        if stage is None:
            request = decode_body(body, DecisionRequest)
            stages, endpoint = request.engine_stages, "decisions"
        else:
            request = decode_body(body, StageDecisionRequest)
            stages, endpoint = [stage], f"decisions/{stage.value}"
        pipeline = self.pipeline(request.profile)  # an unknown profile is a 404 before any 422
        return ReadRequest(
            request=request,
            stages=stages,
            endpoint=endpoint,
            stateful=bool(pipeline.state_keys),
            read_s=time.perf_counter() - started,
        )

    def decide(self, body: bytes, stage: Stage | None = None, caller: str | None = None) -> bytes:
        """Answer a decision request given as raw JSON; return the decision as JSON bytes."""
        return self.answer(self.read(body, stage), body, caller)

    def answer(self, read: ReadRequest, body: bytes, caller: str | None = None) -> bytes:
        """Decide a request :meth:`read` from `body`; return the decision as JSON bytes.

        Its latency (the metric, the log) counts the read and what follows it, not the
        wait for a decision thread in between.
        """
        started = time.perf_counter() - read.read_s
        request = read.request
        check_snapshot(request.snapshot, self.limits)
        _, encoded = self.decide_snapshot(
            request.profile,
            request.snapshot,
            read.stages,
            seed=request.seed,
            caller=caller,
            endpoint=read.endpoint,
            started=started,
            logged_snapshot=raw_snapshot(body),
        )
        if self.trimmer is not None and len(body) >= TRIM_AFTER_BYTES:
            self.trimmer.note()  # its decoded snapshot and working objects are freed now
        return encoded

    def decide_snapshot(
        self,
        profile: str,
        snapshot: Snapshot,
        stages: Sequence[Stage] | None = None,
        *,
        seed: int = 0,
        caller: str | None = None,
        endpoint: str = "decisions",
        started: float | None = None,
        logged_snapshot: bytes | None = None,
    ) -> tuple[Decision, bytes]:
        """Decide for a checked snapshot, log the decision off the path; return it and its JSON.

        The entry point of callers that build the snapshot themselves (the scheduler
        adapters of :mod:`app.adapters`); the snapshot must have passed
        :func:`check_snapshot`. `logged_snapshot` is the snapshot as the caller sent
        it, when it came as JSON: the log keeps those bytes rather than the objects.
        """
        started = time.perf_counter() if started is None else started
        pipeline = self.pipeline(profile)
        cluster_id = snapshot.cluster_id
        try:
            if pipeline.state_keys:
                # Decisions run on several threads: one cluster's stateful rounds go one
                # at a time here, so a round never reads state that another is replacing.
                with self._cluster_lock(cluster_id):
                    loaded = self.load_state(cluster_id, pipeline.state_keys)
                    outcome = pipeline.run(
                        snapshot,
                        stages,
                        state=loaded,
                        seed=seed,
                        cpu_budget_s=self.cpu_budget_s,
                    )
                    self.save_state(cluster_id, outcome.state)
                    self._keep_read_state(cluster_id, loaded, outcome.state)
                decision = outcome.decision
            else:
                decision = pipeline.decide(
                    snapshot, stages, seed=seed, cpu_budget_s=self.cpu_budget_s
                )
        except PolicyFault as fault:
            raise PolicyFailedError(str(fault)) from fault
        encoded = encode(decision)
        elapsed = time.perf_counter() - started
        self.metrics.decided(profile, endpoint, elapsed, fell_back=decision.fallback is not None)
        record = DecisionRecord(
            decision_id=decision.decision_id,
            cluster_id=decision.cluster_id,
            profile=decision.profile,
            created_at=datetime.now(UTC),
            now=decision.now,
            stages=[s.value for s in decision.stages],
            policies=to_builtins(decision.policies),
            snapshot=logged_snapshot if logged_snapshot is not None else snapshot,
            decision=encoded,
            latency_ms=elapsed * 1000.0,
            fallback=to_builtins(decision.fallback) if decision.fallback else None,
            caller=caller,
        )
        if self.shadow is not None and self.shadow.shadows(profile):
            self.shadow.submit(
                record, snapshot, tuple(stages) if stages is not None else None, seed
            )
        else:
            self.log.submit_decision(record)
        return decision, encoded


class FeedbackService:
    """Logs every outcome; throughput observed on a node against an expected speed also goes
    to `learn` (the decision service's feedback learners), per cluster and by event id
    (`learn` skips the ids it has learned before), and a finished job to every
    `on_job_finished` listener."""

    def __init__(
        self,
        log: LogSink,
        metrics: Metrics,
        learn: Callable[[str, Mapping[str, ThroughputObservation]], None] | None = None,
        on_job_finished: Sequence[Callable[[str, str], object]] = (),
    ) -> None:
        self.log = log
        self.metrics = metrics
        self.learn = learn
        # (cluster_id, job_id) → whoever keeps running jobs besides the snapshot (the
        # Kubernetes extender's view frees a finished job's GPUs).
        self.on_job_finished = tuple(on_job_finished)

    def accept(self, body: bytes, caller: str | None = None) -> int:
        request = parse_body(body, FeedbackRequest)
        received = datetime.now(UTC)
        for event in request.events:
            payload = event.model_dump(
                mode="json",
                exclude={"event_id", "cluster_id", "decision_id", "occurred_at", "kind"},
            )
            self.log.submit_feedback(
                FeedbackRecord(
                    event_id=event.event_id,
                    kind=event.kind,
                    cluster_id=event.cluster_id,
                    payload=payload,
                    decision_id=event.decision_id,
                    job_id=getattr(event, "job_id", None),
                    occurred_at=event.occurred_at,
                    received_at=received,
                    caller=caller,
                )
            )
            self.metrics.feedback.labels(event.kind).inc()
            if isinstance(event, JobFinished):
                for listener in self.on_job_finished:
                    listener(event.cluster_id, event.job_id)
        if self.learn is not None:
            for cluster_id, observations in _observations(request.events).items():
                self.learn(cluster_id, observations)
        return len(request.events)


def _feedback_learners(pipeline: Pipeline) -> list[FeedbackLearner]:
    """The pipeline's stage policies that learn from feedback (decisions read their state)."""
    return [
        policy
        for policy in (pipeline.ordering, pipeline.scaling, pipeline.placement)
        if isinstance(policy, FeedbackLearner)
    ]


def _observations(
    events: Sequence[FeedbackEvent],
) -> dict[str, dict[str, ThroughputObservation]]:
    """Throughput events a GP can learn from (a node, a speed, an expected speed), by cluster
    and event id. An id that comes twice counts once, as its first occurrence (the one
    the log keeps)."""
    out: dict[str, dict[str, ThroughputObservation]] = {}
    taken: set[str] = set()
    for event in events:
        if event.event_id in taken:
            continue
        taken.add(event.event_id)
        if not (
            isinstance(event, ThroughputObserved)
            and event.node_id
            and event.expected_samples_per_s
            and event.samples_per_s > 0
        ):
            continue
        # Two valid speeds can still make a ratio of 0 or infinity (5e-324 / 2 underflows):
        # such an event is logged like any other, but it tells a machine's speed nothing.
        relative_speed = event.samples_per_s / event.expected_samples_per_s
        if not (0.0 < relative_speed < math.inf):
            continue
        out.setdefault(event.cluster_id, {})[event.event_id] = ThroughputObservation(
            node_id=event.node_id,
            job_id=event.job_id,
            model=event.model or "",
            relative_speed=relative_speed,
        )
    return out
