"""The stepping API (reset/step) that learned policies will train in, and decision checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import pytest
from msgspec.structs import replace

from policies.decision import Decision, PlacementEntry, ScalingResult, Stage
from policies.engine import Pipeline
from policies.model import (
    Assignment,
    Job,
    Snapshot,
    ThroughputObservation,
    decode_snapshot,
    encode,
)
from policies.profiles import load_profiles
from policies.protocols import Context, NoParams, ScalingPolicy
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from policies.registry import build_registry
from simulator.core import (
    InvalidDecisionError,
    SimOptions,
    Simulation,
    SimulationError,
    check_decision,
    decision_is_valid,
)
from simulator.deciders import EngineDecider
from simulator.metrics import TIMING_KEYS
from simulator.perf import PerfOptions
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions, make_jobs
from tests.simulator.helpers import cluster, group, trace

SPEC = cluster(group(2, 4, "V100"))


def _sim() -> Simulation:
    rows = trace(("a", 0, 2, 100), ("b", 0, 2, 50), ("c", 10, 4, 30))
    jobs = make_jobs(rows, WorkloadOptions(model_mix="lm", elastic_fraction=1.0))
    return Simulation(jobs, SPEC, perf=PerfOptions(machine_variation=False))


def test_step_by_step_equals_run() -> None:
    decider = EngineDecider.named("optimus")
    sim = _sim()
    snapshot = sim.reset(seed=0)
    steps = 0
    while snapshot is not None:
        # The snapshot is a valid, self-contained API input: it survives a JSON round trip.
        assert decode_snapshot(encode(snapshot)) == snapshot
        decision = decider(snapshot, sim.round_seed(), f"d{steps}")
        snapshot, done = sim.step(decision)
        assert done == (snapshot is None)
        steps += 1
    stepped = sim.result()
    assert sim.done
    assert steps > 0
    ran = _sim().run(decider)
    assert [r.row() for r in stepped.jobs] == [r.row() for r in ran.jobs]
    assert ran.metrics["decisions"] == steps


def test_first_snapshot_shows_the_first_arrivals() -> None:
    sim = _sim()
    snapshot = sim.reset()
    assert snapshot is not None
    assert snapshot.now == 0
    assert [j.id for j in snapshot.jobs] == ["a", "b"]
    a = snapshot.jobs[0]
    assert (a.total_work, a.estimated_duration_s, a.model, a.min_workers, a.max_workers) == (
        100,
        100,
        "lm",
        1,
        4,
    )
    assert a.speedup[2] < 2.0  # the family's measured speed-up, as a hint for scaling


def test_a_gpu_given_twice_is_refused() -> None:
    sim = _sim()
    snapshot = sim.reset()
    assert snapshot is not None
    good = EngineDecider.named("fifo")(snapshot, 0, "x")
    node = snapshot.nodes[0].id
    same = (Assignment(node_id=node, gpu_indices=(0, 1)),)
    bad = replace(
        good,
        placement=(
            PlacementEntry(job_id="a", assignments=same),
            PlacementEntry(job_id="b", assignments=same),
        ),
    )
    problems = check_decision(snapshot, bad)
    assert any("GPU 0 of" in p and "given to 'a' and 'b'" in p for p in problems)
    with pytest.raises(InvalidDecisionError, match="given to"):
        sim.step(bad)


def test_running_job_must_be_kept_or_preempted() -> None:
    sim = _sim()
    decider = EngineDecider.named("fifo")
    snapshot = sim.reset()
    assert snapshot is not None
    snapshot, _ = sim.step(decider(snapshot, 0, "x"))
    assert snapshot is not None
    assert any(j.state == "running" for j in snapshot.jobs)
    decision = decider(snapshot, 0, "y")
    dropped: Decision = replace(decision, placement=(), preemptions=())
    assert any("neither placed nor preempted" in p for p in check_decision(snapshot, dropped))
    outside = replace(
        decision,
        placement=(
            *decision.placement,
            PlacementEntry(
                job_id="c", assignments=(Assignment(node_id="nowhere", gpu_indices=(0,)),)
            ),
        ),
    )
    assert any("unknown node" in p for p in check_decision(snapshot, outside))


def test_step_without_a_pending_decision_is_an_error() -> None:
    sim = _sim()
    with pytest.raises(SimulationError, match="no decision is pending"):
        sim.step(EngineDecider.named("fifo")(Snapshot(), 0, "x"))


@pytest.mark.parametrize("profile", ["fifo", "tiresias", "optimus"])
def test_the_round_check_agrees_with_the_full_check(profile: str) -> None:
    """The simulator's per-round check passes exactly the decisions `check_decision` does."""
    decider = EngineDecider.named(profile)
    sim = _sim()
    snapshot = sim.reset(seed=0)
    rounds = 0
    while snapshot is not None:
        decision = decider(snapshot, sim.round_seed(), f"d{rounds}")
        holdings = sim.holdings()
        assert check_decision(snapshot, decision) == []
        assert decision_is_valid(snapshot, decision, holdings)
        for bad in _broken(snapshot, decision):
            assert check_decision(snapshot, bad), bad
            assert not decision_is_valid(snapshot, bad, holdings), bad
        snapshot, _ = sim.step(decision)
        rounds += 1
    assert rounds > 2


def _broken(snapshot: Snapshot, decision: Decision) -> list[Decision]:
    """Ways to spoil a valid decision, each one `check_decision` names."""
    out = [replace(decision, now=decision.now + 1)]
    entries = decision.placement
    running = {j.id for j in snapshot.jobs if j.state == "running"}
    if running:
        out.append(replace(decision, placement=(), preemptions=()))
    if entries:
        out.append(replace(decision, placement=(*entries, entries[0])))
        first = entries[0]
        out.append(
            replace(
                decision,
                placement=(
                    *entries[1:],
                    PlacementEntry(
                        job_id=first.job_id,
                        assignments=(Assignment(node_id="nowhere", gpu_indices=(0,)),),
                    ),
                ),
            )
        )
    kept = [e for e in entries if e.job_id in running]
    waiting = [j for j in snapshot.jobs if j.state != "running" and j.id not in running]
    if kept and waiting:
        # A waiting job given a GPU that a kept job holds.
        taken = kept[0].assignments
        out.append(
            replace(
                decision,
                placement=(*entries, PlacementEntry(job_id=waiting[0].id, assignments=taken)),
            )
        )
    return out


@pytest.mark.parametrize("profile", ["fifo", "tiresias", "optimus"])
def test_the_kept_snapshot_is_the_one_built_from_the_jobs(profile: str) -> None:
    """Between rounds the simulator keeps the snapshot and applies only what changed;
    every round it still shows exactly the jobs alive, in submission order, each with
    the state, GPUs and service the simulator holds for it (a loaded run with
    preemptions, resizes, parameter servers and completions)."""
    spec = SyntheticSpec(
        jobs=40,
        arrivals_per_hour=60.0,
        gpu_mix={1: 0.4, 2: 0.3, 4: 0.3},
        median_duration_s=900.0,
        duration_sigma=1.0,
    )
    jobs = make_jobs(
        generate(spec, seed=5), WorkloadOptions(elastic_fraction=0.5, ps_fraction=0.3), seed=5
    )
    order = {j.id: j.index for j in jobs}
    sim = Simulation(jobs, SPEC, options=SimOptions(check_snapshots=True), seed=5)
    decider = EngineDecider.named(profile)
    snapshot = sim.reset()
    admitted: set[str] = set()
    rounds = 0
    while snapshot is not None:
        records = {r.job_id: r for r in sim.result().jobs if r.status == "unfinished"}
        ids = [j.id for j in snapshot.jobs]
        assert ids == sorted(records, key=order.__getitem__)
        held = {
            (a.node_id, g): j.id for j in snapshot.jobs for a in j.placement for g in a.gpu_indices
        }
        assert held == sim.holdings().gpus
        for job in snapshot.jobs:
            record = records[job.id]
            assert (job.state == "running") == bool(job.placement)
            assert job.attained_service_gpu_s == record.gpu_s
            assert job.executed_time_s == record.run_s
            if job.id in admitted or job.state != "pending":
                assert job.admitted
        decision = decider(snapshot, sim.round_seed(), f"d{rounds}")
        admitted |= {e.job_id for e in decision.admission if e.admitted}
        snapshot, _ = sim.step(decision)
        rounds += 1
    assert rounds > 10


class _AlwaysObserved:
    """A decider that takes throughput reports without saying whether it learns from them."""

    def __init__(self, inner: EngineDecider) -> None:
        self.inner = inner
        self.reports = 0

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        return self.inner(snapshot, seed, decision_id)

    def observe(self, observations: Sequence[ThroughputObservation]) -> None:
        self.reports += len(observations)
        self.inner.observe(observations)

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        return self.inner.reclaim(snapshot, request, seed)


def test_throughput_reports_are_worked_out_only_for_a_decider_that_learns_from_them() -> None:
    """A profile without a feedback learner gets no reports, and its run is the same."""
    assert EngineDecider.named("dual-agent").learns_from_feedback
    assert not EngineDecider.named("tiresias").learns_from_feedback
    observed = _AlwaysObserved(EngineDecider.named("tiresias"))
    rows = trace(("a", 0, 2, 100), ("b", 0, 4, 50), ("c", 10, 4, 30), ("d", 20, 2, 80))
    jobs = make_jobs(rows, WorkloadOptions(model_mix="lm"))
    with_reports = Simulation(jobs, SPEC, perf=PerfOptions(machine_variation=True)).run(observed)
    without = Simulation(jobs, SPEC, perf=PerfOptions(machine_variation=True)).run(
        EngineDecider.named("tiresias")
    )
    assert observed.reports > 0
    assert [r.row() for r in with_reports.jobs] == [r.row() for r in without.jobs]

    def untimed(metrics: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}

    assert untimed(with_reports.metrics) == untimed(without.metrics)


class _ResizesEveryRound:
    """Scaling that moves every job between its two smallest counts each round."""

    name = "resizes-every-round"
    version = "1"
    stage = Stage.SCALING
    summary = "test policy"
    source = "test"
    Params = NoParams

    def __init__(self) -> None:
        self.rounds = 0

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        self.rounds += 1
        out = []
        for job in jobs:
            counts = job.allowed_worker_counts()
            workers = counts[self.rounds % 2] if len(counts) > 1 else counts[0]
            out.append(ScalingResult(job_id=job.id, workers=workers, ps=job.ps, reason="test"))
        return out


@pytest.mark.parametrize("restarts", [True, False])
def test_a_policy_that_restarts_jobs_faster_than_they_restart_ends_the_run(
    restarts: bool,
) -> None:
    # One elastic hour-long job; an ImageNet job takes 250 s to restart (Sia's figure), the
    # round comes every 60 s, and the policy resizes it every round: it never works again.
    jobs = make_jobs(
        trace(("a", 0, 2, 3600)), WorkloadOptions(model_mix="imagenet", elastic_fraction=1.0)
    )
    sim = Simulation(
        jobs,
        SPEC,
        perf=PerfOptions(machine_variation=False, restarts=restarts),
        options=SimOptions(stall_limit_s=86400.0),
    )
    registry = build_registry()
    pipeline = dataclasses.replace(
        Pipeline.build(load_profiles(registry)["fifo"], registry),
        scaling=cast(ScalingPolicy, _ResizesEveryRound()),
    )

    result = sim.run(
        lambda snapshot, seed, decision_id: pipeline.decide(
            snapshot, seed=seed, decision_id=decision_id, explain=False
        )
    )

    if restarts:
        # Stopped a day after its last work, as a run where nothing runs is; not after
        # an endless series of rounds.
        assert result.metrics["jobs_unfinished"] == 1
        assert 86400.0 < sim.now < 86400.0 + 2 * 250.0
    else:
        # Free restarts: the same policy lets the job work between rounds, and it finishes.
        assert result.metrics["jobs_completed"] == 1
