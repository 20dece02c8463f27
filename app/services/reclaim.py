"""Reclaims: which loaned servers go back to inference, answered like a decision.

The same path as a decision (DESIGN §8): the raw body is validated straight
into its model, the profile's reclaim policy (built at start-up) answers
through :func:`policies.common.reclaim.run_reclaim`, which re-checks the answer,
the result is encoded by pydantic-core, and a record goes to the write-behind
decision log with stages `["reclaim"]`. Neither the database nor Redis is
touched on the request path.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import NoReturn

from msgspec.structs import asdict

from app.errors import InvalidRequestError, NotFoundError, PolicyFailedError
from app.metrics import Metrics
from app.schemas import ReclaimRequestBody
from app.services.decisions import (
    LogSink,
    SnapshotLimits,
    check_snapshot,
    decode_body,
    raw_snapshot,
)
from policies.common.reclaim import ReclaimRequestError, run_reclaim
from policies.decision import PolicyRef, Stage
from policies.engine import PolicyFault
from policies.model import Problem, Snapshot, encode, to_builtins
from policies.profiles import Profile
from policies.protocols import ReclaimPolicy
from policies.reclaim_models import ReclaimDecision, ReclaimRequest
from policies.registry import Registry
from storage.records import DecisionRecord


class ReclaimService:
    def __init__(
        self,
        registry: Registry,
        profiles: dict[str, Profile],
        log: LogSink,
        metrics: Metrics,
        limits: SnapshotLimits | None = None,
    ) -> None:
        self.limits = limits or SnapshotLimits()
        self.policies: dict[str, ReclaimPolicy] = {
            name: registry.reclaim(p.reclaim.name, p.reclaim.params) for name, p in profiles.items()
        }
        self.fallbacks: dict[str, ReclaimPolicy] = {
            name: registry.reclaim(choice.name, choice.params)
            for name, p in profiles.items()
            if (choice := p.fallback.get(Stage.RECLAIM)) is not None
        }
        self.log = log
        self.metrics = metrics

    def reclaim(self, body: bytes, caller: str | None = None) -> bytes:
        """Answer a reclaim request given as raw JSON; return the answer as JSON bytes."""
        started = time.perf_counter()
        request = decode_body(body, ReclaimRequestBody)
        if request.profile not in self.policies:
            self._unknown(request.profile)
        asked = _asked(request)
        check_snapshot(request.snapshot, self.limits)
        _, encoded = self.reclaim_snapshot(
            request.profile,
            request.snapshot,
            asked,
            request.seed,
            caller,
            started,
            logged_snapshot=raw_snapshot(body),
        )
        return encoded

    def _unknown(self, profile: str) -> NoReturn:
        known = ", ".join(sorted(self.policies))
        raise NotFoundError(f"unknown profile {profile!r}; known: {known}")

    def reclaim_snapshot(  # noqa: PLR0917 - the request's parts
        self,
        profile: str,
        snapshot: Snapshot,
        asked: ReclaimRequest,
        seed: int = 0,
        caller: str | None = None,
        started: float | None = None,
        logged_snapshot: bytes | None = None,
    ) -> tuple[ReclaimDecision, bytes]:
        """Answer a reclaim for a checked snapshot and log it; the answer and its JSON.

        The entry point of callers that build the snapshot themselves (the scheduler
        adapters of :mod:`app.adapters`).
        """
        started = time.perf_counter() if started is None else started
        policy = self.policies.get(profile)
        if policy is None:
            self._unknown(profile)
        try:
            result = run_reclaim(policy, snapshot, asked, seed, self.fallbacks.get(profile))
        except ReclaimRequestError as error:
            raise InvalidRequestError(str(error), error.problems) from error
        except PolicyFault as fault:
            raise PolicyFailedError(str(fault)) from fault
        answered_by = policy if result.fallback is None else self.fallbacks[profile]
        decision = ReclaimDecision(
            **asdict(result),
            decision_id=uuid.uuid4().hex,
            cluster_id=snapshot.cluster_id,
            now=snapshot.now,
            profile=profile,
            policy=PolicyRef(name=answered_by.name, version=answered_by.version),
        )
        encoded = encode(decision)
        elapsed = time.perf_counter() - started
        self.metrics.decided(profile, "reclaim", elapsed, fell_back=result.fallback is not None)
        self.log.submit_decision(
            DecisionRecord(
                decision_id=decision.decision_id,
                cluster_id=decision.cluster_id,
                profile=decision.profile,
                created_at=datetime.now(UTC),
                now=decision.now,
                stages=[Stage.RECLAIM.value],
                policies={Stage.RECLAIM.value: to_builtins(decision.policy)},
                snapshot=logged_snapshot if logged_snapshot is not None else snapshot,
                decision=encoded,
                latency_ms=elapsed * 1000.0,
                fallback=to_builtins(result.fallback) if result.fallback else None,
                caller=caller,
            )
        )
        return decision, encoded


def _asked(request: ReclaimRequestBody) -> ReclaimRequest:
    """The core's request, or a 422 naming the field when not exactly one of the two is given."""
    if request.count is not None and request.node_ids is not None:
        raise InvalidRequestError(
            "give count or node_ids, not both",
            [Problem(path="node_ids", message="not allowed together with count")],
        )
    if request.count is None and request.node_ids is None:
        raise InvalidRequestError(
            "give count (how many loaned servers) or node_ids (which ones)",
            [Problem(path="count", message="count or node_ids is required")],
        )
    node_ids = tuple(request.node_ids) if request.node_ids is not None else None
    return ReclaimRequest(count=request.count, node_ids=node_ids)
