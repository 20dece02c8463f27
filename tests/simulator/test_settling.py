"""A pipeline that settles is asked on events only, and not on arrivals that have no room
to start; the rounds it is spared would have changed nothing: the same runs give the
same metrics, job records and time series."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from policies.decision import Decision, Stage
from policies.engine import Pipeline
from policies.model import Snapshot
from policies.profiles import PolicyChoice, Profile
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from policies.registry import build_registry
from simulator.deciders import EngineDecider, shipped_profiles
from simulator.metrics import TIMING_KEYS
from simulator.runner import build_simulation
from tests.golden.record import (
    SCENARIOS,
    Scenario,
    scenario_cluster,
    scenario_config,
    scenario_jobs,
)
from tests.simulator.helpers import cluster, finish_times, group, run, trace

SETTLING = sorted(name for name in shipped_profiles() if EngineDecider.named(name).settles)


class EveryRound:
    """The wrapped decider without its `settles`: the simulator asks it every round."""

    def __init__(self, inner: EngineDecider) -> None:
        self.inner = inner

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        return self.inner(snapshot, seed, decision_id)

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        return self.inner.reclaim(snapshot, request, seed)


def _outcome(
    scenario: Scenario, decider: Callable[[Snapshot, int, str], Decision]
) -> dict[str, Any]:
    """The run's metrics, every job's record (in the order the run finished them) and
    its time series."""
    jobs, cluster = scenario_jobs(scenario), scenario_cluster(scenario)
    result = build_simulation(jobs, cluster, scenario_config(scenario)).run(decider)
    series = result.series
    return {
        "metrics": {k: v for k, v in result.metrics.items() if k not in TIMING_KEYS},
        "records": [r.row() for r in result.jobs],
        "series": [series.t, series.waiting, series.running, series.busy_gpus],
    }


def _same_outcome(got: Any, want: Any) -> bool:
    """Everything but the count of decisions equal; floats to within rounding.

    Not bit for bit: the simulator adds a running job's progress up at every round it
    asks, so fewer rounds add the same progress in fewer, longer steps, and a sum of
    floats depends on how it is split (a completion moves by a few units in the last
    place, and the times that follow from it with it).
    """
    if isinstance(want, dict) and isinstance(got, dict):
        return set(got) == set(want) and all(
            key == "decisions" or _same_outcome(got[key], value) for key, value in want.items()
        )
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(map(_same_outcome, got, want))
    if isinstance(want, float) and isinstance(got, float):
        return bool(got == pytest.approx(want, rel=1e-9, abs=1e-9))
    return bool(got == want)


def test_the_profiles_that_settle_are_the_non_preemptive_rigid_ones() -> None:
    # Pinned: a policy declares `settles` on purpose, and a profile that gains or loses
    # it changes how often the simulator asks it.
    assert SETTLING == [
        "edf",
        "eft-greedy",
        "fcfs",
        "fifo",
        "fifo-backfill",
        "first-fit",
        "llf",
        "prema",
        "relmas",
        "sjf",
        "spread",
        "static",
    ]


@pytest.mark.parametrize("profile", ["tiresias", "srtf", "optimus", "drf", "random", "oasis"])
def test_a_profile_that_reads_the_clock_or_the_seed_or_rescales_does_not_settle(
    profile: str,
) -> None:
    assert not EngineDecider.named(profile).settles


def test_a_fallback_that_does_not_settle_keeps_the_pipeline_from_settling() -> None:
    registry = build_registry()
    plain = Profile(name="plain")
    guarded = Profile(name="guarded", fallback={Stage.ORDERING: PolicyChoice(name="tiresias")})
    assert Pipeline.build(plain, registry).settles
    assert not Pipeline.build(guarded, registry).settles


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_rounds_a_settling_pipeline_is_spared_change_no_outcome(
    scenario: Scenario,
) -> None:
    profiles = [p for p in (scenario.profiles or SETTLING) if p in SETTLING]
    assert profiles, f"{scenario.name}: no settling profile runs here"
    for profile in profiles:
        on_events = _outcome(scenario, EngineDecider.named(profile))
        every_round = _outcome(scenario, EveryRound(EngineDecider.named(profile)))
        assert on_events["metrics"]["decisions"] <= every_round["metrics"]["decisions"], profile
        assert _same_outcome(on_events, every_round), profile


def test_a_queueing_fifo_run_is_asked_fewer_rounds_than_the_timer_would_ask() -> None:
    philly = next(s for s in SCENARIOS if s.name == "philly")
    on_events = _outcome(philly, EngineDecider.named("fifo"))["metrics"]
    every_round = _outcome(philly, EveryRound(EngineDecider.named("fifo")))["metrics"]
    assert on_events["avg_queue_s"] > 0  # jobs wait, so the timer runs
    assert on_events["decisions"] < every_round["decisions"]


def test_an_arrival_with_no_room_to_start_is_not_asked_of_a_settling_profile() -> None:
    # One 8-GPU node: `hog` takes it for an hour; `small` arrives a minute later and
    # has no room until `hog` ends. Asked: `hog`'s arrival, then its completion (which
    # starts `small`). Not asked: `small`'s arrival and the timer while it waits.
    rows = trace(("hog", 0.0, 8, 3600.0), ("small", 60.0, 4, 600.0))
    spec = cluster(group(1, 8))
    settling = run(rows, spec, EngineDecider.named("fifo"))
    asked_always = run(rows, spec, EveryRound(EngineDecider.named("fifo")))
    assert settling.metrics["decisions"] == 2
    assert asked_always.metrics["decisions"] > 2
    finished = {"hog": 3600.0, "small": 4200.0}
    assert finish_times(settling) == finish_times(asked_always) == finished


def test_an_arrival_that_could_start_is_asked() -> None:
    rows = trace(("half", 0.0, 4, 3600.0), ("other-half", 60.0, 4, 600.0))
    result = run(rows, cluster(group(1, 8)), EngineDecider.named("fifo"))
    assert result.metrics["decisions"] == 2  # both arrivals; no one waits after
    assert finish_times(result) == {"half": 3600.0, "other-half": 660.0}
