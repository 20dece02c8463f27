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
from policies.model import Problem, encode, to_builtins
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
        policy = self.policies.get(request.profile)
        if policy is None:
            known = ", ".join(sorted(self.policies))
            raise NotFoundError(f"unknown profile {request.profile!r}; known: {known}")
        asked = _asked(request)
        check_snapshot(request.snapshot, self.limits)
        try:
            result = run_reclaim(
                policy,
                request.snapshot,
                asked,
                request.seed,
                self.fallbacks.get(request.profile),
            )
        except ReclaimRequestError as error:
            raise InvalidRequestError(str(error), error.problems) from error
        except PolicyFault as fault:
            raise PolicyFailedError(str(fault)) from fault
        answered_by = policy if result.fallback is None else self.fallbacks[request.profile]
        decision = ReclaimDecision(
            **asdict(result),
            decision_id=uuid.uuid4().hex,
            cluster_id=request.snapshot.cluster_id,
            now=request.snapshot.now,
            profile=request.profile,
            policy=PolicyRef(name=answered_by.name, version=answered_by.version),
        )
        encoded = encode(decision)
        elapsed = time.perf_counter() - started
        self.metrics.decisions.labels(request.profile, "reclaim").inc()
        self.metrics.decision_seconds.labels(request.profile).observe(elapsed)
        if result.fallback is not None:
            self.metrics.fallbacks.labels(request.profile).inc()
        self.log.submit_decision(
            DecisionRecord(
                decision_id=decision.decision_id,
                cluster_id=decision.cluster_id,
                profile=decision.profile,
                created_at=datetime.now(UTC),
                now=decision.now,
                stages=[Stage.RECLAIM.value],
                policies={Stage.RECLAIM.value: to_builtins(decision.policy)},
                snapshot=raw_snapshot(body),
                decision=encoded,
                latency_ms=elapsed * 1000.0,
                fallback=to_builtins(result.fallback) if result.fallback else None,
                caller=caller,
            )
        )
        return encoded


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
