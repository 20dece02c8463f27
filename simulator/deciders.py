"""Who answers the simulator's snapshots: the engine in process, or a running service.

Both go through the same engine and registry: in process by
`Pipeline.build(profile, registry).decide(...)`, over HTTP by `POST
{URL}/v1/decisions` with `{"profile", "snapshot", "seed"}` (DESIGN §4), which
the service answers with `Pipeline.decide` too. The per-round seed is sent
along, so randomised policies draw the same numbers either way and a replay
through the service gives the same metrics as one in process.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

import httpx
import orjson
from pydantic import JsonValue

from policies.decision import Decision
from policies.engine import Pipeline
from policies.model import Snapshot
from policies.profiles import Profile, load_profiles
from policies.registry import Registry, build_registry


class Decider(Protocol):
    """Answers one snapshot: `decide(snapshot, seed, decision_id) -> Decision`."""

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision: ...


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
        self.profile = profile
        self.pipeline = Pipeline.build(profile, registry or build_registry())
        self.state: dict[str, JsonValue] = {}

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
        if not self.pipeline.state_keys:
            return self.pipeline.decide(snapshot, seed=seed, decision_id=decision_id)
        outcome = self.pipeline.run(snapshot, state=self.state, seed=seed, decision_id=decision_id)
        self.state.update(outcome.state)
        return outcome.decision


class DecisionServiceError(RuntimeError):
    """The service answered with an error, or with something that is not a decision."""


class HttpDecider:
    """A running Arbiter service; only `POST /v1/decisions` is used.

    `client` may be any `httpx.Client` (e.g. a `fastapi.testclient.TestClient`);
    by default one is opened on `base_url` and closed by `close()`.
    """

    def __init__(
        self,
        base_url: str,
        profile: str,
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.profile = profile
        self._owns_client = client is None
        self.client = client or httpx.Client(base_url=base_url, timeout=timeout_s)
        self.url = base_url.rstrip("/") + "/v1/decisions" if client is None else "/v1/decisions"
        self._profile_json = orjson.dumps(profile)

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        body = b"".join(
            (
                b'{"profile":',
                self._profile_json,
                b',"seed":',
                str(seed).encode(),
                b',"snapshot":',
                snapshot.model_dump_json().encode(),
                b"}",
            )
        )
        response = self.client.post(
            self.url, content=body, headers={"content-type": "application/json"}
        )
        if response.status_code != 200:
            raise DecisionServiceError(
                f"POST {self.url} answered {response.status_code}: {response.text[:500]}"
            )
        try:
            return Decision.model_validate_json(response.content)
        except ValueError as error:
            raise DecisionServiceError(f"POST {self.url}: not a decision: {error}") from error

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
