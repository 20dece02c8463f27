"""Dispatches: which sub-accelerator starts each inference request's next layer, answered
like a decision.

The same path as a reclaim: the raw body is validated straight into its model, the
profile's dispatch policy and fallback (built at start-up by
:func:`policies.dispatch.run.build_dispatch`, as the accelerator simulator builds them)
answer through :func:`policies.dispatch.run.run_dispatch`, which checks the answer and
explains every request, and a record goes to the write-behind decision log with stages
`["dispatch"]`. Neither the database nor Redis is touched on the request path.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from msgspec.structs import asdict

from app.errors import InvalidSnapshotError, NotFoundError, PolicyFailedError
from app.metrics import Metrics
from app.schemas import DispatchRequestBody
from app.services.decisions import LogSink, SnapshotLimits, decode_body
from policies.decision import PolicyRef, Stage
from policies.dispatch.model import DispatchDecision, DispatchSnapshot, dispatch_problems
from policies.dispatch.run import DispatchPair, build_dispatch, run_dispatch
from policies.engine import PolicyFault
from policies.learned.models import ModelProvider
from policies.model import Problem, encode, to_builtins
from policies.profiles import Profile
from policies.protocols import learned_model_key
from policies.registry import Registry
from storage.records import DecisionRecord


class DispatchService:
    def __init__(
        self,
        registry: Registry,
        profiles: dict[str, Profile],
        log: LogSink,
        metrics: Metrics,
        *,
        limits: SnapshotLimits | None = None,
        models: ModelProvider | None = None,
    ) -> None:
        self.limits = limits or SnapshotLimits()
        self.registry = registry
        self.profiles = profiles
        self.models = models
        self.pairs: dict[str, DispatchPair] = build_dispatch(registry, profiles, models)
        self.log = log
        self.metrics = metrics

    def rebuild(self, changed: set[str]) -> None:
        """Rebuild every pair when a learned dispatch policy's active model changed."""
        keys = {
            key
            for pair in self.pairs.values()
            if (key := learned_model_key(pair.policy)) is not None
        }
        if keys & changed:
            self.pairs = build_dispatch(self.registry, self.profiles, self.models)

    def dispatch(self, body: bytes, caller: str | None = None) -> bytes:
        """Answer a dispatch request given as raw JSON; return the answer as JSON bytes."""
        started = time.perf_counter()
        request = decode_body(body, DispatchRequestBody)
        pair = self.pairs.get(request.profile)
        if pair is None:
            known = ", ".join(sorted(self.pairs))
            raise NotFoundError(f"unknown profile {request.profile!r}; known: {known}")
        check_dispatch_snapshot(request.snapshot, self.limits)
        try:
            result, answered_by = run_dispatch(pair.policy, request.snapshot, pair.fallback)
        except PolicyFault as fault:
            raise PolicyFailedError(str(fault)) from fault
        decision = DispatchDecision(
            **asdict(result),
            decision_id=uuid.uuid4().hex,
            system_id=request.snapshot.system_id,
            now=request.snapshot.now,
            profile=request.profile,
            policy=PolicyRef(name=answered_by.name, version=_version(answered_by)),
        )
        encoded = encode(decision)
        elapsed = time.perf_counter() - started
        self.metrics.decided(
            request.profile, "dispatch", elapsed, fell_back=result.fallback is not None
        )
        self.log.submit_decision(
            DecisionRecord(
                decision_id=decision.decision_id,
                cluster_id=decision.system_id,
                profile=decision.profile,
                created_at=datetime.now(UTC),
                now=decision.now,
                stages=[Stage.DISPATCH.value],
                policies={Stage.DISPATCH.value: to_builtins(decision.policy)},
                snapshot=request.snapshot,
                decision=encoded,
                latency_ms=elapsed * 1000.0,
                fallback=to_builtins(result.fallback) if result.fallback else None,
                caller=caller,
            )
        )
        return encoded


def _version(policy: object) -> str:
    """The policy's version, and for a learned one the weights it served (`1+shipped-…`)."""
    version = str(getattr(policy, "version", ""))
    model_version = getattr(policy, "model_version", None)
    return f"{version}+{model_version}" if isinstance(model_version, str) else version


def check_dispatch_snapshot(snapshot: DispatchSnapshot, limits: SnapshotLimits) -> None:
    """422 for a snapshot over the size limits or with cross-field problems, each at its path."""
    sizes = (
        (
            "snapshot.requests",
            len(snapshot.requests),
            limits.inference_requests,
            "ARBITER_MAX_REQUESTS",
        ),
        ("snapshot.accelerators", len(snapshot.accelerators), limits.nodes, "ARBITER_MAX_NODES"),
    )
    problems = [
        Problem(path=path, message=f"{size:,} items; at most {limit:,} ({setting})")
        for path, size, limit, setting in sizes
        if size > limit
    ]
    if not problems:
        problems = [
            Problem(path=f"snapshot.{p.path}", message=p.message)
            for p in dispatch_problems(snapshot)
        ]
    if problems:
        raise InvalidSnapshotError(
            f"{len(problems)} problem(s) in the snapshot; first: "
            f"{problems[0].path}: {problems[0].message}",
            problems,
        )
