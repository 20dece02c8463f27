"""Shadow mode: a candidate profile decides on live traffic, beside the served one, unseen.

`ARBITER_SHADOW` maps a served profile to a shadow profile, optionally pinned to
a stored model version of its learned policies (`drf=dl2`, `drf=dl2@20261121-1`).
Every decision served under a shadowed profile is also computed by the shadow
pipeline on one background thread, after the response is on its way, and logged
in the same `decisions` row (`shadow` column):

    {"profile", "model_version"?, "policies", "decision", "latency_ms", "fallback"}

or `{"profile", "error"}` when the shadow failed, or `{"profile", "skipped"}` when
more than `ARBITER_SHADOW_BACKLOG` were waiting (the served record is then logged
at once). The served answer never waits for, or depends on, the shadow.

A shadow that follows the active version swaps with it; a pinned one loads its
version once (retrying every `models_check_interval_s` until it exists, so a shadow
can be pinned to a version a retraining is about to store). A stateful shadow
profile reads the cluster's policy state but never writes it: only the served
decision happened.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from policies.decision import Decision, Stage
from policies.engine import Pipeline
from policies.model import Snapshot, to_builtins
from policies.profiles import Profile
from storage.records import DecisionRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShadowTarget:
    """The profile that shadows a served one, and the model version it is pinned to."""

    profile: str
    version: str | None = None

    @classmethod
    def parse(cls, text: str) -> ShadowTarget:
        profile, at, version = text.partition("@")
        return cls(profile=profile, version=version if at else None)


def shadow_targets(
    config: Mapping[str, str], profiles: Mapping[str, Profile]
) -> dict[str, ShadowTarget]:
    """Served profile → shadow target; ValueError naming any unknown profile."""
    targets: dict[str, ShadowTarget] = {}
    known = ", ".join(sorted(profiles))
    for served, text in config.items():
        target = ShadowTarget.parse(text)
        for name in (served, target.profile):
            if name not in profiles:
                raise ValueError(f"ARBITER_SHADOW names unknown profile {name!r}; known: {known}")
        targets[served] = target
    return targets


StateLoader = Callable[[str, tuple[str, ...]], dict[str, JsonValue]]
PipelineSource = Callable[[str], Pipeline | str]
"""Served profile → its shadow pipeline now, or why there is none."""
Sink = Callable[[DecisionRecord], None]


class ShadowDecider:
    """Computes shadow decisions on one background thread and hands the records on."""

    def __init__(
        self,
        targets: Mapping[str, ShadowTarget],
        pipeline_for: PipelineSource,
        load_state: StateLoader,
        sink: Sink,
        backlog: int,
    ) -> None:
        self.targets = dict(targets)
        self._pipeline_for = pipeline_for
        self._load_state = load_state
        self._sink = sink
        self._backlog = backlog
        self._pending = 0
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arbiter-shadow")

    def shadows(self, profile: str) -> bool:
        return profile in self.targets

    def submit(
        self,
        record: DecisionRecord,
        snapshot: Snapshot,
        stages: tuple[Stage, ...] | None,
        seed: int,
    ) -> None:
        """Queue the shadow of `record`; the record reaches the sink after it (never lost)."""
        target = self.targets[record.profile]
        with self._lock:
            full = self._pending >= self._backlog
            if not full:
                self._pending += 1
        if full:
            self._sink(
                dataclasses.replace(
                    record,
                    shadow={"profile": target.profile, "skipped": "shadow backlog full"},
                )
            )
            return
        try:
            self._executor.submit(self._run, record, snapshot, stages, seed, target)
        except RuntimeError:  # shut down: the served record still goes to the log
            with self._lock:
                self._pending -= 1
            self._sink(record)

    def stop(self) -> None:
        """Finish the queued shadows (their records reach the sink), then stop."""
        self._executor.shutdown(wait=True)

    def _run(
        self,
        record: DecisionRecord,
        snapshot: Snapshot,
        stages: tuple[Stage, ...] | None,
        seed: int,
        target: ShadowTarget,
    ) -> None:
        try:
            shadow = self._decide(record, snapshot, stages, seed, target)
        except Exception as error:
            logger.warning(
                "shadow %s of decision %s failed: %s", target.profile, record.decision_id, error
            )
            shadow = {"profile": target.profile, "error": f"{type(error).__name__}: {error}"}
        finally:
            with self._lock:
                self._pending -= 1
        self._sink(dataclasses.replace(record, shadow=shadow))

    def _decide(
        self,
        record: DecisionRecord,
        snapshot: Snapshot,
        stages: tuple[Stage, ...] | None,
        seed: int,
        target: ShadowTarget,
    ) -> dict[str, Any]:
        pipeline = self._pipeline_for(record.profile)
        if isinstance(pipeline, str):
            return {"profile": target.profile, "error": pipeline}
        started = time.perf_counter()
        decision: Decision
        if pipeline.state_keys:
            state = self._load_state(snapshot.cluster_id, pipeline.state_keys)
            decision = pipeline.run(
                snapshot, stages, state=state, decision_id=record.decision_id, seed=seed
            ).decision
        else:
            decision = pipeline.decide(snapshot, stages, decision_id=record.decision_id, seed=seed)
        latency_ms = (time.perf_counter() - started) * 1000.0
        shadow: dict[str, Any] = {
            "profile": target.profile,
            "policies": to_builtins(decision.policies),
            "decision": to_builtins(decision),
            "latency_ms": latency_ms,
            "fallback": to_builtins(decision.fallback),
        }
        if target.version is not None:
            shadow["model_version"] = target.version
        return shadow
