"""Invariants over every registered policy and every profile, on generated snapshots.

Each profile's decisions must satisfy :func:`assert_valid_decision`; each policy
must keep its own stage contract when called directly. Parametrized from the
registry and the profiles, so a new policy or profile is covered without
touching this file.
"""

from __future__ import annotations

import copy
import itertools
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.capacity import CapacityError, FreeCapacity
from policies.common.reclaim import run_reclaim
from policies.decision import AdmissionResult, ScalingResult, Stage
from policies.engine import Pipeline
from policies.model import (
    Assignment,
    Job,
    JobState,
    Node,
    Snapshot,
    Tenant,
    Topology,
    convert,
    encode,
    to_builtins,
)
from policies.profiles import Profile, load_profiles
from policies.protocols import (
    AdmissionPolicy,
    DispatchPolicy,
    Ordering,
    OrderingPolicy,
    PlacementOutcome,
    PlacementPolicy,
    ReclaimPolicy,
    ScalingPolicy,
    StateValue,
    policy_fits_fullest,
)
from policies.reclaim_models import ReclaimRequest
from policies.registry import PolicySpec, build_registry
from tests.policies.builders import ctx, next_snapshot
from tests.policies.checks import assert_valid_decision, assert_valid_reclaim
from tests.strategies import loaned_snapshots, snapshots

REGISTRY = build_registry()
SPECS = REGISTRY.specs()
PROFILES = list(load_profiles(REGISTRY).values())

# Placements that find a fit whenever the nodes' room adds up (complete for all-or-none).
COMPLETE_PLACEMENTS = {"consolidated", "spread", "first_fit", "random", "loan_aware"}

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _spec_id(spec: PolicySpec) -> str:
    return f"{spec.stage.value}:{spec.name}"


def _judged(snapshot: Snapshot) -> list[Job]:
    pending = [j for j in snapshot.jobs if j.state is JobState.PENDING and not j.admitted]
    return sorted(pending, key=lambda j: j.submit_time)


def _schedulable(snapshot: Snapshot) -> list[Job]:
    return [j for j in snapshot.jobs if j.state is not JobState.PENDING or j.admitted]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
@FAST
@given(snapshot=snapshots())
def test_every_profile_keeps_the_decision_invariants(profile: Profile, snapshot: Snapshot) -> None:
    decision = Pipeline.build(profile, REGISTRY).decide(snapshot, decision_id="x", seed=7)
    assert_valid_decision(snapshot, decision)
    assert decision.fallback is None


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
@settings(max_examples=20, deadline=None)
@given(snapshot=snapshots(), stages=st.sampled_from([[Stage.ADMISSION], [Stage.SCALING]]))
def test_every_profile_answers_a_subset_of_stages(
    profile: Profile, snapshot: Snapshot, stages: list[Stage]
) -> None:
    decision = Pipeline.build(profile, REGISTRY).decide(snapshot, stages, decision_id="x")
    assert Stage.PLACEMENT not in decision.stages
    assert_valid_decision(snapshot, decision)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
@settings(max_examples=20, deadline=None)
@given(snapshot=snapshots())
def test_every_profile_is_deterministic(profile: Profile, snapshot: Snapshot) -> None:
    pipeline = Pipeline.build(profile, REGISTRY)
    first = pipeline.decide(snapshot, decision_id="x", seed=3)
    again = Pipeline.build(profile, REGISTRY).decide(snapshot, decision_id="x", seed=3)
    assert to_builtins(first) == to_builtins(again)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots(), advance_s=st.sampled_from([0.0, 600.0, 7200.0]))
def test_every_profile_keeps_the_invariants_over_rounds_with_its_state(
    profile: Profile, snapshot: Snapshot, advance_s: float
) -> None:
    """Rounds as a caller runs them: state kept and fed back, decisions applied, clock on."""
    pipeline = Pipeline.build(profile, REGISTRY)
    kept: dict[str, StateValue] = {}
    for round_number in range(3):
        outcome = pipeline.run(snapshot, state=kept, decision_id=f"r{round_number}", seed=1)
        assert_valid_decision(snapshot, outcome.decision)
        assert outcome.decision.fallback is None
        # Stateless profiles write nothing; stateful ones write what encodes to JSON.
        assert set(outcome.state) <= set(pipeline.state_keys)
        stored = orjson.loads(encode(outcome.state))
        assert set(stored) == set(outcome.state)
        # The same round from the same kept state decides the same way, whether the
        # state was kept in memory (a simulator) or stored as JSON and read back (the
        # service).
        as_stored = orjson.loads(encode(kept))
        for state in (kept, as_stored):
            again = pipeline.run(snapshot, state=state, decision_id=f"r{round_number}", seed=1)
            assert to_builtins(again.decision) == to_builtins(outcome.decision)
            assert to_builtins(again.state) == to_builtins(outcome.state)
        kept.update(outcome.state)
        snapshot = next_snapshot(snapshot, outcome.decision, advance_s)


@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_every_policy_describes_itself(spec: PolicySpec) -> None:
    cls: Any = spec.cls
    for text in (spec.name, cls.version, cls.summary, cls.source):
        assert isinstance(text, str)
        assert text
    assert cls.__module__.split(".")[1] == spec.stage.value, "a policy lives under its stage"
    schema = spec.params_schema()
    for field, info in schema.get("properties", {}).items():
        assert info.get("description"), f"{spec.name}.{field} needs a description"
    with pytest.raises(ValueError, match=spec.name):
        spec.parse_params({"no_such_param": 1})
    assert isinstance(
        REGISTRY.create(spec.stage, spec.name),
        {
            Stage.ADMISSION: AdmissionPolicy,
            Stage.ORDERING: OrderingPolicy,
            Stage.SCALING: ScalingPolicy,
            Stage.PLACEMENT: PlacementPolicy,
            Stage.RECLAIM: ReclaimPolicy,
            Stage.DISPATCH: DispatchPolicy,
        }[spec.stage],
    )


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.ADMISSION), ids=_spec_id)
@FAST
@given(snapshot=snapshots())
def test_admission_policies_judge_each_job_once(spec: PolicySpec, snapshot: Snapshot) -> None:
    policy = REGISTRY.admission(spec.name)
    jobs = _judged(snapshot)
    results = policy.admit(ctx(snapshot), jobs)
    assert all(isinstance(r, AdmissionResult) and r.reason for r in results)
    assert sorted(r.job_id for r in results) == sorted(j.id for j in jobs)


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.ORDERING), ids=_spec_id)
@FAST
@given(snapshot=snapshots())
def test_ordering_policies_return_a_permutation(spec: PolicySpec, snapshot: Snapshot) -> None:
    policy = REGISTRY.ordering(spec.name)
    jobs = _schedulable(snapshot)
    result = policy.order(ctx(snapshot), jobs)
    assert isinstance(result, Ordering)
    assert sorted(result.job_ids) == sorted(j.id for j in jobs)
    # Same jobs in another order: same answer (the order is a function of the jobs).
    assert policy.order(ctx(snapshot), list(reversed(jobs))).job_ids == result.job_ids


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.SCALING), ids=_spec_id)
@FAST
@given(snapshot=snapshots())
def test_scaling_policies_answer_accepted_counts(spec: PolicySpec, snapshot: Snapshot) -> None:
    policy = REGISTRY.scaling(spec.name)
    jobs = _schedulable(snapshot)
    results = policy.scale(ctx(snapshot), jobs)
    assert all(isinstance(r, ScalingResult) for r in results)
    assert sorted(r.job_id for r in results) == sorted(j.id for j in jobs)
    by_id = snapshot.jobs_by_id
    for r in results:
        assert r.workers == 0 or by_id[r.job_id].accepts_workers(r.workers), r
    # Running jobs on usable nodes keep running: scaling alone never preempts them.
    nodes = snapshot.nodes_by_id
    workers = {r.job_id: r.workers for r in results}
    for job in jobs:
        usable = all(nodes[a.node_id].schedulable_for_training for a in job.placement)
        if job.state is JobState.RUNNING and usable:
            assert workers[job.id] > 0, job.id


def _free_after_running(snapshot: Snapshot) -> FreeCapacity:
    free = FreeCapacity.for_training(snapshot)
    for job in snapshot.jobs:
        if job.state is JobState.RUNNING:
            free.take_held([(job, job.placement)])
    return free


def _state(free: FreeCapacity) -> list[tuple[str, tuple[int, ...], float, float]]:
    return [
        (n, free.free_gpus(n), free.free_cpus(n), free.free_memory_gb(n)) for n in free.node_ids()
    ]


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.PLACEMENT), ids=_spec_id)
@FAST
@given(snapshot=snapshots(), seed=st.integers(0, 3))
def test_placement_policies_place_all_or_none_without_touching_free(
    spec: PolicySpec, snapshot: Snapshot, seed: int
) -> None:
    policy = REGISTRY.placement(spec.name)
    fits_fullest = policy_fits_fullest(policy)
    for job in snapshot.jobs:
        if job.state is JobState.RUNNING:
            continue
        for workers in {job.allowed_worker_counts()[0], job.workers}:
            free = _free_after_running(snapshot)
            before = _state(free)
            outcome = policy.place(ctx(snapshot, seed), job, workers, free)
            assert isinstance(outcome, PlacementOutcome)
            assert _state(free) == before, "placement must not modify free capacity"
            if fits_fullest:
                # The declaration lets the engine commit FreeCapacity.fullest_fit without
                # asking the policy: its answer must be exactly that, wherever that fits.
                fit = free.fullest_fit(job, workers * job.gpus_per_worker)
                if fit is not None:
                    assert outcome.assignments == fit
                    assert not outcome.details
            room = sum(fit for _, fit in free.candidate_nodes(job))
            if outcome.placed:
                gpus = sum(len(a.gpu_indices) for a in outcome.assignments)
                assert gpus == workers * job.gpus_per_worker
                try:
                    free.take(job, outcome.assignments)
                except CapacityError as error:  # pragma: no cover - the assertion message
                    pytest.fail(f"{spec.name} gave GPUs it may not: {error}")
            else:
                assert outcome.reason
                if spec.name in COMPLETE_PLACEMENTS:
                    assert room < workers, "room enough, yet no placement"


def test_the_default_placement_declares_its_best_fit_to_the_engine() -> None:
    assert policy_fits_fullest(REGISTRY.placement("consolidated"))


def _asking_for_every_job(pipeline: Pipeline) -> Pipeline:
    """The pipeline with its placement policy as it is but undeclared: asked for every job."""
    asked = copy.copy(pipeline.placement)
    object.__setattr__(asked, "fits_fullest", False)
    return replace(pipeline, placement=asked)


@pytest.mark.parametrize(
    "profile",
    [p for p in PROFILES if policy_fits_fullest(Pipeline.build(p, REGISTRY).placement)],
    ids=lambda p: p.name,
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots(), budget=st.sampled_from(["none", "lasting", "spent"]))
def test_a_decision_is_the_same_whether_the_engine_commits_the_best_fit_or_asks(
    profile: Profile, snapshot: Snapshot, budget: str
) -> None:
    # Without a CPU budget, with one that lasts, and with one spent at the first check
    # (placement then hands over to its budget fallback, which declares nothing).
    budget_s = {"none": None, "lasting": 3600.0, "spent": 1e-9}[budget]
    pipeline = Pipeline.build(profile, REGISTRY)
    decisions = []
    for each in (pipeline, _asking_for_every_job(pipeline)):
        with _cpu_clock_racing() if budget == "spent" else nullcontext():
            decisions.append(each.decide(snapshot, decision_id="x", seed=5, cpu_budget_s=budget_s))
    committed, asked = decisions
    assert to_builtins(committed) == to_builtins(asked)


def _cpu_clock_racing() -> AbstractContextManager[Any]:
    """The thread's CPU clock a second further on at every read: a budget of a nanosecond
    is spent at its first check, whatever the machine's clock resolution (on the real
    clock, the check at which it trips would depend on it)."""
    return mock.patch("time.thread_time", side_effect=map(float, itertools.count()))


# Any cluster, and clusters whose running jobs spread over loaned servers.
_RECLAIM_SNAPSHOTS = st.one_of(snapshots(max_nodes=8), loaned_snapshots())


def _loaned(snapshot: Snapshot) -> list[str]:
    return [n.id for n in snapshot.nodes if n.loaned]


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.RECLAIM), ids=_spec_id)
@FAST
@given(snapshot=_RECLAIM_SNAPSHOTS, count=st.integers(1, 5), seed=st.integers(0, 3))
def test_reclaim_policies_keep_the_reclaim_contract(
    spec: PolicySpec, snapshot: Snapshot, count: int, seed: int
) -> None:
    policy = REGISTRY.reclaim(spec.name)
    request = ReclaimRequest(count=count)

    result = policy.reclaim(ctx(snapshot, seed), request)

    assert_valid_reclaim(snapshot, request, result)
    # Pure: the same snapshot, request and seed give the same answer.
    assert policy.reclaim(ctx(snapshot, seed), request) == result


@pytest.mark.parametrize("spec", REGISTRY.specs(Stage.RECLAIM), ids=_spec_id)
@FAST
@given(snapshot=_RECLAIM_SNAPSHOTS, data=st.data())
def test_reclaim_policies_return_exactly_the_servers_named(
    spec: PolicySpec, snapshot: Snapshot, data: st.DataObject
) -> None:
    loaned = _loaned(snapshot)
    if not loaned:
        return
    named = data.draw(st.lists(st.sampled_from(loaned), min_size=1, unique=True))
    request = ReclaimRequest(node_ids=tuple(named))

    result = REGISTRY.reclaim(spec.name).reclaim(ctx(snapshot), request)

    assert_valid_reclaim(snapshot, request, result)
    assert sorted(result.servers) == sorted(named)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
@settings(max_examples=20, deadline=None)
@given(snapshot=_RECLAIM_SNAPSHOTS, count=st.integers(1, 4))
def test_every_profile_answers_a_checked_reclaim(
    profile: Profile, snapshot: Snapshot, count: int
) -> None:
    policy = REGISTRY.reclaim(profile.reclaim.name, profile.reclaim.params)
    request = ReclaimRequest(count=count)

    result = run_reclaim(policy, snapshot, request, seed=5)

    assert_valid_reclaim(snapshot, request, result)
    assert result.fallback is None


def _large_snapshot() -> Snapshot:
    """512 nodes x 8 GPUs, 2,000 jobs (a quarter running, many elastic), 3 tenants."""
    nodes = [
        Node(id=f"n{i}", gpu_type="V100", gpus=8, topology=Topology(rack=f"r{i // 32}"))
        for i in range(512)
    ]
    jobs: list[Job] = []
    cursor = 0
    for i in range(2000):
        tenant = ("alpha", "beta", "gamma")[i % 3]
        elastic = i % 2 == 0
        fields: dict[str, object] = {
            "id": f"j{i}",
            "tenant": tenant,
            "submit_time": float(i),
            "workers": 2,
            "min_workers": 1 if elastic else 2,
            "max_workers": 16 if elastic else 2,
            "estimated_duration_s": 600.0 + 37.0 * (i % 50),
            "attained_service_gpu_s": 100.0 * (i % 90),
            "admitted": True,
        }
        if i % 4 == 0 and cursor < 500:
            fields["state"] = JobState.RUNNING
            fields["placement"] = (Assignment(node_id=f"n{cursor}", gpu_indices=(0, 1)),)
            cursor += 1
        jobs.append(convert(fields, Job))
    tenants = (Tenant(id="alpha", weight=2.0), Tenant(id="beta"), Tenant(id="gamma", gpu_quota=600))
    return Snapshot(now=10_000.0, nodes=tuple(nodes), jobs=tuple(jobs), tenants=tenants)


@pytest.mark.parametrize("profile", ["drf", "optimus", "tiresias", "srtf", "oasis"])
def test_profiles_give_valid_decisions_on_a_large_snapshot(profile: str) -> None:
    snapshot = _large_snapshot()
    pipeline = Pipeline.build(load_profiles(REGISTRY)[profile], REGISTRY)

    decision = pipeline.decide(snapshot, decision_id="big")

    assert_valid_decision(snapshot, decision)
    assert decision.placement
