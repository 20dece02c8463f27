"""A decision's CPU budget: past it, plain heuristics finish the decision and it says so."""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from policies.capacity import FreeCapacity
from policies.decision import JobStatus, Stage
from policies.engine import Pipeline
from policies.model import Job, Snapshot, decode_snapshot
from policies.placement.consolidated import Consolidated, ConsolidatedParams
from policies.profiles import Profile, load_profiles
from policies.protocols import Context, NoParams, PlacementOutcome
from policies.registry import PolicySpec, Registry, build_registry
from tests.policies.builders import job, node, snap, statuses
from tests.policies.checks import assert_valid_decision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SLOW_CALL_S = 0.004


class SlowPlacement:
    """Consolidated placement that spends a few milliseconds of CPU on every call."""

    name: ClassVar[str] = "slow"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Consolidated, slowly."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params
        self.calls = 0

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        self.calls += 1
        until = time.thread_time() + SLOW_CALL_S
        while time.thread_time() < until:
            pass
        return Consolidated(ConsolidatedParams()).place(ctx, job, workers, free)


def pipeline(**fields: object) -> Pipeline:
    registry = Registry([*build_registry().specs(), PolicySpec(SlowPlacement)])
    return Pipeline.build(Profile.model_validate({"name": "under-test", **fields}), registry)


def twenty_jobs() -> Snapshot:
    return snap([node(f"n{i}") for i in range(4)], [job(f"j{i:02d}") for i in range(20)])


def test_placement_past_the_budget_hands_the_remaining_jobs_to_first_fit() -> None:
    snapshot = twenty_jobs()
    slow = pipeline(placement={"name": "slow"})
    decision = slow.decide(snapshot, cpu_budget_s=5 * SLOW_CALL_S)
    assert decision.fallback is not None
    assert decision.fallback.policy == "first_fit"
    assert "CPU budget of 20 ms ran out in placement" in decision.fallback.reason
    assert "'first_fit' took over from 'slow'" in decision.fallback.reason
    assert decision.policies["placement"].name == "first_fit"
    # The slow policy placed the first jobs; the heuristic placed the others.
    placements = slow.placement
    assert isinstance(placements, SlowPlacement)
    assert 1 <= placements.calls < 20
    assert set(statuses(decision).values()) == {JobStatus.STARTED}
    assert_valid_decision(snapshot, decision)


def test_a_profiles_own_fallback_answers_when_the_budget_runs_out() -> None:
    decision = pipeline(
        placement={"name": "slow"}, fallback={"placement": {"name": "spread"}}
    ).decide(twenty_jobs(), cpu_budget_s=2 * SLOW_CALL_S)
    assert decision.fallback is not None
    assert decision.fallback.policy == "spread"
    assert decision.policies["placement"].name == "spread"


def test_without_a_budget_a_slow_policy_answers_every_call() -> None:
    slow = pipeline(placement={"name": "slow"})
    decision = slow.decide(twenty_jobs())
    assert decision.fallback is None
    placements = slow.placement
    assert isinstance(placements, SlowPlacement)
    assert placements.calls == 20


def test_oasis_past_the_budget_admits_by_accept_all_and_keeps_its_state_consistent() -> None:
    snapshot = decode_snapshot((EXAMPLES / "large.json").read_bytes())
    oasis = Pipeline.build(load_profiles(build_registry())["oasis"], build_registry())
    outcome = oasis.run(snapshot, seed=1, cpu_budget_s=0.01)
    decision = outcome.decision
    assert decision.fallback is not None
    assert decision.fallback.policy.split(", ")[0] == "accept_all"
    assert "ran out in admission" in decision.fallback.reason
    assert "'accept_all' took over from 'oasis'" in decision.fallback.reason
    assert all(entry.admitted for entry in decision.admission)
    assert "oasis" in outcome.state
    assert_valid_decision(snapshot, decision)


def test_a_profile_of_plain_heuristics_goes_on_unchanged_past_the_budget() -> None:
    plain = pipeline(
        ordering={"name": "fifo", "params": {"backfill": True}}, placement={"name": "first_fit"}
    )
    snapshot = twenty_jobs()
    spent = plain.decide(snapshot, decision_id="d", cpu_budget_s=0.0)
    unbudgeted = plain.decide(snapshot, decision_id="d")
    assert spent.fallback is None
    assert spent == unbudgeted
