"""Who answers the accelerator simulator's snapshots: the policies in process, or a service.

In process, :func:`policies.dispatch.run.run_dispatch` with the profile's dispatch
policy and fallback, built by :func:`policies.dispatch.run.build_dispatch` exactly as
the service builds them; over HTTP, `POST {URL}/v1/dispatch` with `{"profile",
"snapshot"}`. The two give the same answers (tests/simulator/test_accelerator.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import httpx
import orjson

from policies.dispatch.model import DispatchDecision, DispatchResult, DispatchSnapshot
from policies.dispatch.run import Dispatches, DispatchPair, build_dispatch, run_dispatch
from policies.learned.models import ModelProvider
from policies.model import encode
from policies.profiles import load_profiles
from policies.registry import build_registry
from simulator.deciders import UnknownProfileError
from simulator.http_client import HttpClient, decoded, post_json

if TYPE_CHECKING:
    from simulator.accelerator.system import RunResult


class Dispatcher(Protocol):
    name: str

    def __call__(self, snapshot: DispatchSnapshot) -> DispatchResult: ...


class DispatchServiceError(RuntimeError):
    pass


class PolicyDispatcher:
    """A dispatch policy (and fallback) called in process, as the service calls them."""

    def __init__(self, name: str, policy: Dispatches, fallback: Dispatches | None = None) -> None:
        self.name = name
        self.policy = policy
        self.fallback = fallback

    def __call__(self, snapshot: DispatchSnapshot) -> DispatchResult:
        result, _ = run_dispatch(self.policy, snapshot, self.fallback)
        return result


class InProcessDispatcher(PolicyDispatcher):
    """A profile's dispatch policy and fallback, built as the service builds them."""

    def __init__(self, profile: str, models: ModelProvider | None = None) -> None:
        registry = build_registry()
        pairs = build_dispatch(registry, load_profiles(registry), models)
        if profile not in pairs:
            known = ", ".join(sorted(pairs))
            raise UnknownProfileError(f"unknown profile {profile!r}; known: {known}")
        pair: DispatchPair = pairs[profile]
        super().__init__(profile, pair.policy, pair.fallback)


class HttpDispatcher:
    """A running service; `client` is an `httpx.Client` or anything that posts as one does
    (:class:`simulator.http_client.HttpClient`; a TestClient in tests)."""

    def __init__(
        self,
        base_url: str,
        profile: str,
        *,
        client: HttpClient | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.name = profile
        self._owns_client = client is None
        self.client: HttpClient = client or httpx.Client(base_url=base_url, timeout=timeout_s)
        root = base_url.rstrip("/") if client is None else ""
        self.url = root + "/v1/dispatch"
        self._profile_json = orjson.dumps(profile)

    def __call__(self, snapshot: DispatchSnapshot) -> DispatchResult:
        body = b'{"profile":' + self._profile_json + b',"snapshot":' + encode(snapshot) + b"}"
        response = post_json(self.client, self.url, body, DispatchServiceError)
        return decoded(response, DispatchDecision, self.url, "a dispatch", DispatchServiceError)

    def report(self, result: RunResult, system_id: str) -> int:
        """POST the episode's outcomes to `/v1/feedback` as a caller would; how many were new."""
        events = outcome_events(result, system_id)
        url = self.url.removesuffix("/v1/dispatch") + "/v1/feedback"
        accepted = 0
        for start in range(0, len(events), 10_000):
            batch = orjson.dumps({"events": events[start : start + 10_000]})
            response = post_json(self.client, url, batch, DispatchServiceError, accepted=(202,))
            accepted += int(response.json()["accepted"])
        return accepted

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


def outcome_events(result: RunResult, system_id: str) -> list[dict[str, Any]]:
    """One `inference` feedback event per finished request of the episode: its latency and
    whether it met its SLA, at the time it finished (event ids `system/request`)."""
    return [
        {
            "kind": "inference",
            "event_id": f"{system_id}/{r.id}",
            "cluster_id": system_id,
            "request_id": r.id,
            "latency_ms": (r.finished - r.arrival) * 1000.0,
            "sla_met": r.met,
            "occurred_at": r.finished,
        }
        for r in result.requests
        if r.finished is not None
    ]
