"""Who answers the simulator's snapshots: the engine in process, or a running service.

A decider answers the two questions a cluster manager asks (DESIGN §2, §4):
what to do next (a decision) and, when inference needs loaned servers back,
which ones to return (a reclaim). Both go through the same code as the service:

* decisions: in process by `Pipeline.build(profile, registry).run(...)`, over
  HTTP by `POST {URL}/v1/decisions` with `{"profile", "snapshot", "seed"}`;
* reclaims: in process by :func:`policies.common.reclaim.run_reclaim` with the
  profile's reclaim policy (and its reclaim fallback), over HTTP by `POST
  {URL}/v1/reclaim` with `{"profile", "snapshot", "count" | "node_ids", "seed"}`.

* throughput feedback between rounds (for a profile that learns from it): in
  process by the pipeline's feedback learners (`learn`), over HTTP by `POST
  {URL}/v1/feedback` with `throughput` events.

The seeds are sent along, so randomised policies draw the same numbers either
way. Policy state (DESIGN §5, e.g. OASiS's committed schedules, the dual agent's
GP of machine speeds) is fed back into every round as the service does. The
service keeps it under the snapshot's cluster id, so a replay of a stateful
profile through a service matches one in process when the service holds no state
for that id yet: `arbiter simulate --via-http` gives every profile run a fresh id
(:mod:`simulator.cluster_ids`), and a caller that builds its own simulation passes
one (`Simulation(cluster_id=...)`, `simulate(..., cluster_ids=...)`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

import httpx
import orjson

from policies.common.reclaim import run_reclaim
from policies.decision import Decision, Stage
from policies.engine import Pipeline
from policies.model import Snapshot, ThroughputObservation, encode
from policies.profiles import Profile, load_profiles
from policies.protocols import FeedbackLearner, StateValue
from policies.reclaim_models import ReclaimDecision, ReclaimRequest, ReclaimResult
from policies.registry import Registry, build_registry
from simulator.http_client import HttpClient, decoded, post_json


class Decider(Protocol):
    """Answers for one profile: decisions each round, reclaims when inference wants servers.

    `decider(snapshot, seed, decision_id)` returns the profile's decision;
    `decider.reclaim(snapshot, request, seed)` the checked answer of the profile's
    reclaim policy (which loaned servers go back, who shrinks, who is preempted).
    """

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision: ...

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult: ...


class UnknownProfileError(LookupError):
    pass


def shipped_profiles(registry: Registry | None = None) -> dict[str, Profile]:
    """Every profile the service ships (`load_profiles(build_registry())`)."""
    return load_profiles(registry or build_registry())


class EngineDecider:
    """The engine in this process, for one profile, keeping its policy state.

    Like the service, it keeps one state dict (DESIGN §5) and merges each round's
    updates into it, so stateful policies (OASiS's committed schedules, Tiresias's
    promotions) see their history; a new decider starts from nothing.
    """

    def __init__(self, profile: Profile, registry: Registry | None = None) -> None:
        reg = registry or build_registry()
        self.profile = profile
        self.pipeline = Pipeline.build(profile, reg)
        self.reclaim_policy = reg.reclaim(profile.reclaim.name, profile.reclaim.params)
        fallback = profile.fallback.get(Stage.RECLAIM)
        self.reclaim_fallback = (
            reg.reclaim(fallback.name, fallback.params) if fallback is not None else None
        )
        self.state: dict[str, StateValue] = {}
        # Found once: a runtime protocol check walks the protocol's members on every call.
        self._learners: tuple[FeedbackLearner, ...] = tuple(
            p
            for p in (self.pipeline.ordering, self.pipeline.scaling, self.pipeline.placement)
            if isinstance(p, FeedbackLearner)
        )

    @classmethod
    def named(cls, name: str, registry: Registry | None = None) -> EngineDecider:
        reg = registry or build_registry()
        profiles = load_profiles(reg)
        if name not in profiles:
            raise UnknownProfileError(
                f"unknown profile {name!r}; known: {', '.join(sorted(profiles))}"
            )
        return cls(profiles[name], reg)

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        # The simulator applies decisions and never reads their reasons: none are worded.
        if not self.pipeline.state_keys:
            return self.pipeline.decide(snapshot, seed=seed, decision_id=decision_id, explain=False)
        outcome = self.pipeline.run(
            snapshot, state=self.state, seed=seed, decision_id=decision_id, explain=False
        )
        self.state.update(outcome.state)
        return outcome.decision

    @property
    def settles(self) -> bool:
        """Whether the pipeline changes nothing when asked between events
        (:attr:`policies.engine.Pipeline.settles`): the simulator then asks it on
        events only, not on the round timer."""
        return self.pipeline.settles

    @property
    def gathers(self) -> bool:
        """Whether the pipeline moves spread running jobs onto one node
        (:attr:`policies.engine.Pipeline.gathers`): the simulator then asks it when a
        completion frees room for such a job, even if no job waits."""
        return self.pipeline.gathers

    @property
    def learns_from_feedback(self) -> bool:
        """Whether a policy of the pipeline folds throughput feedback into its state."""
        return bool(self._learners)

    def observe(self, observations: Sequence[ThroughputObservation]) -> None:
        """Throughput feedback between rounds: each feedback learner of the pipeline folds
        it into its state, as the service does on `POST /v1/feedback`."""
        if not observations:
            return
        for policy in self._learners:
            key = policy.state_key
            self.state[key] = policy.learn(self.state.get(key), observations)

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        """The profile's reclaim policy through `run_reclaim`, as `POST /v1/reclaim` answers."""
        return run_reclaim(self.reclaim_policy, snapshot, request, seed, self.reclaim_fallback)


class DecisionServiceError(RuntimeError):
    """The service answered with an error, or with something that is not a decision."""


FEEDBACK_EVENTS_PER_POST = 10_000
"""The most events `POST /v1/feedback` takes at once (`FeedbackRequest.events`)."""

_MAX_EVENT_ID = 128  # `event_id`'s most characters


class HttpDecider:
    """A running Arbiter service: `POST /v1/decisions`, `POST /v1/reclaim` and, for a
    profile that learns from feedback, `POST /v1/feedback`.

    `client` is an `httpx.Client` or anything that posts as one does
    (:class:`simulator.http_client.HttpClient`; tests pass the service's TestClient);
    by default one is opened on `base_url` and closed by `close()`.

    Throughput observations (:meth:`observe`) go to the service as `throughput` events
    of the cluster of the snapshots it is asked about, so they land in the policy state
    its decisions read. A relative speed `r` is sent as `samples_per_s = r` against
    `expected_samples_per_s = 1`: the service learns `r` itself, to the last bit.
    """

    def __init__(
        self,
        base_url: str,
        profile: str,
        *,
        client: HttpClient | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.profile = profile
        self._owns_client = client is None
        self.client: HttpClient = client or httpx.Client(base_url=base_url, timeout=timeout_s)
        root = base_url.rstrip("/") if client is None else ""
        self.url = root + "/v1/decisions"
        self.reclaim_url = root + "/v1/reclaim"
        self.profile_url = root + "/v1/profiles/" + profile
        self.feedback_url = root + "/v1/feedback"
        self._profile_json = orjson.dumps(profile)
        self._settles: bool | None = None
        self._gathers: bool | None = None
        self._learns: bool | None = None
        # Feedback goes to the cluster of the snapshots asked about; observations made
        # before the first one wait for it (a run whose jobs already run at its start).
        self._cluster_id: str | None = None
        self._unsent: list[ThroughputObservation] = []
        # Event ids: the simulator's id of the last decision asked for ("start" before
        # any) and the observation's index since then; see `_event_id`.
        self._after = "start"
        self._reported = 0
        self._last_decision_id: str | None = None

    @property
    def settles(self) -> bool:
        """What the service says of the profile (`settles` of `GET /v1/profiles/{name}`),
        asked once; False when it cannot say (then every round is asked)."""
        if self._settles is None:
            self._ask_profile()
        assert self._settles is not None
        return self._settles

    @property
    def gathers(self) -> bool:
        """What the service says of the profile (`gathers` of `GET /v1/profiles/{name}`),
        asked once; False when it cannot say."""
        if self._gathers is None:
            self._ask_profile()
        assert self._gathers is not None
        return self._gathers

    @property
    def learns_from_feedback(self) -> bool:
        """What the service says of the profile (`learns_from_feedback` of `GET
        /v1/profiles/{name}`), asked once; False when it cannot say (then the simulator
        works out no throughput reports, and none is posted)."""
        if self._learns is None:
            self._ask_profile()
        assert self._learns is not None
        return self._learns

    def _ask_profile(self) -> None:
        response = self.client.get(self.profile_url)
        said = response.json() if response.status_code == 200 else None
        self._settles = isinstance(said, dict) and said.get("settles") is True
        self._gathers = isinstance(said, dict) and said.get("gathers") is True
        self._learns = isinstance(said, dict) and said.get("learns_from_feedback") is True

    def observe(self, observations: Sequence[ThroughputObservation]) -> None:
        """Throughput feedback between rounds: one `POST /v1/feedback` of `throughput`
        events (none for no observations, or for a profile that learns nothing from them).

        Each event's id is fixed by the cluster, the simulator's id of the last decision
        (its seed and round) and the observation's index since: a run sent again sends
        the same ids, which the service's log keeps once. Before the first decision the
        cluster is not known yet: the observations go with it. A non-2xx answer raises
        :class:`DecisionServiceError`.
        """
        if not observations or not self.learns_from_feedback:
            return
        self._unsent.extend(observations)
        if self._cluster_id is not None:
            self._post_feedback(self._cluster_id)

    def _post_feedback(self, cluster_id: str) -> None:
        while self._unsent:
            batch = self._unsent[:FEEDBACK_EVENTS_PER_POST]
            first = self._reported
            events = [
                {
                    "event_id": self._event_id(cluster_id, first + index),
                    "kind": "throughput",
                    "cluster_id": cluster_id,
                    "decision_id": self._last_decision_id,
                    "job_id": seen.job_id,
                    "node_id": seen.node_id,
                    "model": seen.model or None,
                    # Speeds are relative to the job's table speed on the node's GPU type.
                    "samples_per_s": float(seen.relative_speed),
                    "expected_samples_per_s": 1.0,
                }
                for index, seen in enumerate(batch)
            ]
            post_json(
                self.client,
                self.feedback_url,
                orjson.dumps({"events": events}),
                DecisionServiceError,
                accepted=range(200, 300),
            )
            self._reported = first + len(batch)
            del self._unsent[: len(batch)]

    def _event_id(self, cluster_id: str, index: int) -> str:
        """`{cluster}/{last decision}/{index}`: unique in a run, the same in a rerun.

        Hashed when longer than an event id may be (a cluster id may be 255 characters).
        """
        plain = f"{cluster_id}/{self._after}/{index}"
        if len(plain) <= _MAX_EVENT_ID:
            return plain
        return "sim-" + hashlib.sha256(plain.encode()).hexdigest()

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        self._cluster_id = snapshot.cluster_id
        if self._unsent:
            self._post_feedback(snapshot.cluster_id)
        body = b"".join(
            (
                b'{"profile":',
                self._profile_json,
                b',"seed":',
                str(seed).encode(),
                b',"snapshot":',
                encode(snapshot),
                b"}",
            )
        )
        response = post_json(self.client, self.url, body, DecisionServiceError)
        decision = decoded(response, Decision, self.url, "a decision", DecisionServiceError)
        self._after, self._reported = decision_id, 0
        self._last_decision_id = decision.decision_id
        return decision

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        asked = (
            b'"count":' + str(request.count).encode()
            if request.count is not None
            else b'"node_ids":' + orjson.dumps(list(request.node_ids or ()))
        )
        body = b"".join(
            (
                b'{"profile":',
                self._profile_json,
                b',"seed":',
                str(seed).encode(),
                b",",
                asked,
                b',"snapshot":',
                encode(snapshot),
                b"}",
            )
        )
        response = post_json(self.client, self.reclaim_url, body, DecisionServiceError)
        answer = decoded(
            response, ReclaimDecision, self.reclaim_url, "a reclaim answer", DecisionServiceError
        )
        # The service's bookkeeping (decision id, profile, policy) is not part of the answer.
        return ReclaimResult(
            **{name: getattr(answer, name) for name in ReclaimResult.__struct_fields__}
        )

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> HttpDecider:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
