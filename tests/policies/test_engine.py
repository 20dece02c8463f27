"""Behaviour of the engine: preemption, quotas, fallbacks and faults."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from policies.capacity import FreeCapacity
from policies.decision import JobStatus, ScalingResult, Stage
from policies.engine import Pipeline, PolicyFault
from policies.model import (
    Assignment,
    Job,
    JobState,
    Snapshot,
    Tenant,
    decode_snapshot,
    snapshot_problems,
)
from policies.profiles import Profile, load_profiles
from policies.protocols import Context, NoParams, Ordering, PlacementOutcome
from policies.registry import PolicySpec, Registry, build_registry
from tests.policies.builders import (
    choice,
    decide,
    job,
    node,
    reasons,
    running,
    snap,
    statuses,
)
from tests.policies.checks import assert_valid_decision


class ExplodingPlacement:
    """A placement policy with a bug: it raises on every call."""

    name: ClassVar[str] = "exploding"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "Raises."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        raise RuntimeError("placement bug")


class BusyGpuPlacement(ExplodingPlacement):
    """Always answers GPU 0 of the first node, free or not."""

    name: ClassVar[str] = "busy_gpu"

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        node_id = free.node_ids()[0]
        return PlacementOutcome(assignments=(Assignment(node_id=node_id, gpu_indices=(0,)),))


class DroppingOrdering:
    """An ordering with a bug: it forgets the last job."""

    name: ClassVar[str] = "dropping"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "Loses a job."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        return Ordering(job_ids=tuple(j.id for j in jobs[:-1]))


class RepeatingOrdering:
    """An ordering with a bug: it reverses the jobs and names the first one twice, in
    place of the second (as many ids as jobs, out of their order)."""

    name: ClassVar[str] = "repeating"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "Names a job twice."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        ids = [j.id for j in reversed(jobs)]
        ids[-2] = ids[-1]
        return Ordering(job_ids=tuple(ids))


class OversizedScaling:
    """A scaling policy with a bug: one worker more than each job's maximum."""

    name: ClassVar[str] = "oversized"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = "Breaks bounds."
    source: ClassVar[str] = "tests"
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        return [ScalingResult(job_id=j.id, workers=j.hi + 1) for j in jobs]


class StayingGatherer(ExplodingPlacement):
    """Gathers by answering the spread placement a job already has (no fewer nodes)."""

    name: ClassVar[str] = "staying_gatherer"
    gathers: ClassVar[bool] = True

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        return PlacementOutcome(reason="places nothing")

    def gather(self, ctx: Context, job: Job, free: FreeCapacity) -> PlacementOutcome:
        return PlacementOutcome(assignments=job.placement)


def registry_with_faults() -> Registry:
    faulty = [
        ExplodingPlacement,
        BusyGpuPlacement,
        StayingGatherer,
        DroppingOrdering,
        RepeatingOrdering,
        OversizedScaling,
    ]
    return Registry([*build_registry().specs(), *(PolicySpec(cls) for cls in faulty)])


def pipeline(**fields: object) -> Pipeline:
    profile = Profile.model_validate({"name": "under-test", **fields})
    return Pipeline.build(profile, registry_with_faults())


def two_jobs() -> Snapshot:
    return snap([node("n0"), node("n1")], [job("a", workers=4), job("b", workers=8)])


def test_engine_falls_back_when_a_policy_raises() -> None:
    snapshot = two_jobs()
    decision = pipeline(
        placement={"name": "exploding"}, fallback={"placement": {"name": "consolidated"}}
    ).decide(snapshot)
    assert decision.fallback is not None
    assert decision.fallback.policy == "consolidated"
    assert "placement bug" in decision.fallback.reason
    assert decision.policies["placement"].name == "consolidated"
    # The fallback answers for every job of the decision, not only the first.
    assert statuses(decision) == {"a": JobStatus.STARTED, "b": JobStatus.STARTED}
    assert_valid_decision(snapshot, decision)


def test_engine_falls_back_when_an_ordering_breaks_its_contract() -> None:
    decision = pipeline(
        ordering={"name": "dropping"}, fallback={"ordering": {"name": "fifo"}}
    ).decide(two_jobs())
    assert decision.fallback is not None
    assert "must answer each of its 2 jobs exactly once" in decision.fallback.reason
    assert decision.ordering == ("a", "b")


def test_engine_falls_back_when_an_ordering_names_a_job_twice_out_of_order() -> None:
    snapshot = snap(
        [node("n0"), node("n1")], [job("a", workers=2), job("b", workers=2), job("c", workers=2)]
    )
    decision = pipeline(
        ordering={"name": "repeating"}, fallback={"ordering": {"name": "fifo"}}
    ).decide(snapshot)
    assert decision.fallback is not None
    assert (
        "must answer each of its 3 jobs exactly once (got 3; missing ['b'], unexpected [])"
        in decision.fallback.reason
    )
    assert decision.ordering == ("a", "b", "c")


def test_engine_raises_policy_fault_when_a_policy_raises_without_fallback() -> None:
    with pytest.raises(PolicyFault, match=r"exploding.*placement bug") as caught:
        pipeline(placement={"name": "exploding"}).decide(two_jobs())
    assert caught.value.stage is Stage.PLACEMENT


def test_engine_raises_policy_fault_for_invalid_scaling_without_fallback() -> None:
    with pytest.raises(PolicyFault, match=r"5 workers for job 'a' breaks its bounds \[4, 4\]"):
        pipeline(scaling={"name": "oversized"}).decide(two_jobs())


def test_engine_raises_policy_fault_when_placement_gives_a_busy_gpu() -> None:
    snapshot = snap([node("n0")], [running("holder", {"n0": (0,)}), job("new")])
    with pytest.raises(PolicyFault, match="not free"):
        pipeline(placement={"name": "busy_gpu"}).decide(snapshot)


def test_engine_raises_when_the_fallback_fails_too() -> None:
    with pytest.raises(PolicyFault, match="exploding"):
        pipeline(
            placement={"name": "busy_gpu"},
            fallback={"placement": {"name": "exploding"}},
        ).decide(snap([node("n0")], [running("holder", {"n0": (0,)}), job("new")]))


def test_engine_preemption_reason_names_the_ordering() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("long", {"n0": tuple(range(8))}, estimated_duration_s=9000),
            job("short", workers=8, estimated_duration_s=10),
        ],
    )
    decision = decide(snapshot, "srtf")
    (note,) = decision.preemptions
    assert note.job_id == "long"
    assert note.reason == "preempted for higher-priority jobs (1 ahead in srtf order)"


def test_engine_preempts_a_job_on_an_unhealthy_node() -> None:
    snapshot = snap(
        [node("n0"), node("sick", healthy=False)],
        [running("stranded", {"sick": (0, 1)}), running("fine", {"n0": (0, 1)})],
    )
    decision = decide(snapshot, "fifo")
    assert statuses(decision) == {"stranded": JobStatus.PREEMPTED, "fine": JobStatus.RUNNING}
    assert "'sick' is unhealthy" in reasons(decision)["stranded"]


def test_engine_undoes_a_preemption_nobody_needed() -> None:
    # "wide" (two 3-GPU workers) wins the run set, so "spare" is preempted, but
    # "wide" cannot be placed (no node has two 3-GPU holes): "spare" keeps its GPUs.
    snapshot = snap(
        [node("n0", gpus=4), node("n1", gpus=4)],
        [
            running("keep", {"n0": (0, 1)}, estimated_duration_s=900),
            running("spare", {"n1": (0, 1)}, estimated_duration_s=1000),
            job("wide", workers=2, gpus_per_worker=3, estimated_duration_s=10),
        ],
    )
    decision = decide(snapshot, "srtf")
    assert statuses(decision)["spare"] is JobStatus.RUNNING
    assert statuses(decision)["wide"] is JobStatus.PENDING
    assert decision.preemptions == ()


def test_engine_keeps_a_tenant_within_quota_when_undoing_a_preemption() -> None:
    # "newcomer" takes the tenant's whole quota on n1; "old" is preempted for it,
    # and although its GPUs on n0 stay free, restoring it would break the quota.
    snapshot = snap(
        [node("n0", gpus=2), node("n1", gpus=4)],
        [
            running("old", {"n0": (0, 1)}, tenant="t", estimated_duration_s=9000),
            job("newcomer", workers=4, tenant="t", estimated_duration_s=10),
        ],
        tenants=(Tenant(id="t", gpu_quota=4),),
    )
    decision = decide(snapshot, "srtf")
    assert statuses(decision) == {"newcomer": JobStatus.STARTED, "old": JobStatus.PREEMPTED}
    assert_valid_decision(snapshot, decision)


def test_engine_counts_non_preemptible_jobs_against_quota_when_choosing_who_runs() -> None:
    # Tenant t's "pinned" job cannot be preempted and holds 4 of its 6 GPUs, so
    # "t-short" cannot run; the run set must go to "u-short" and keep "u-long".
    snapshot = snap(
        [node("n0", gpus=4), node("n1", gpus=4), node("n2", gpus=4)],
        [
            running("pinned", {"n0": (0, 1, 2, 3)}, tenant="t", preemptible=False,
                    estimated_duration_s=9000),
            running("u-long", {"n1": (0, 1, 2, 3)}, tenant="u", estimated_duration_s=8000),
            job("t-short", workers=4, tenant="t", estimated_duration_s=10),
            job("u-short", workers=4, tenant="u", estimated_duration_s=20),
        ],
        tenants=(Tenant(id="t", gpu_quota=6),),
    )  # fmt: skip
    decision = decide(snapshot, "srtf")
    status = statuses(decision)
    assert status["u-long"] is JobStatus.RUNNING
    assert status["u-short"] is JobStatus.STARTED
    assert status["t-short"] is JobStatus.PENDING
    assert decision.preemptions == ()


def test_engine_does_not_undo_a_preemption_whose_cpus_were_taken() -> None:
    # "old" is preempted for two shorter jobs; "cpu-hungry" then takes all of n0's
    # CPUs beside old's GPUs, and "unplaceable" fails, so old's GPUs stay free but
    # it cannot run without CPUs.
    snapshot = snap(
        [node("n0", cpus=8)],
        [
            running("old", {"n0": (4, 5, 6, 7)}, cpus_per_worker=1, estimated_duration_s=9000),
            job("cpu-hungry", workers=4, cpus_per_worker=2, estimated_duration_s=10),
            job("unplaceable", workers=4, gpu_memory_gb=100, estimated_duration_s=20),
        ],
    )
    decision = decide(snapshot, "srtf")
    status = statuses(decision)
    assert status["cpu-hungry"] is JobStatus.STARTED
    assert status["old"] is JobStatus.PREEMPTED
    assert_valid_decision(snapshot, decision)


def test_engine_places_a_job_without_cpu_needs_beside_jobs_that_overcommit_cpus() -> None:
    snapshot = snap(
        [node("n0", cpus=4)],
        [running("greedy", {"n0": (0,)}, cpus_per_worker=8), job("gpu-only", workers=2)],
    )
    decision = decide(snapshot, "fifo")
    assert statuses(decision)["gpu-only"] is JobStatus.STARTED


def test_snapshot_problems_flag_partial_workers_on_a_node() -> None:
    split = Job(
        id="split",
        state=JobState.RUNNING,
        gpus_per_worker=2,
        placement=(
            Assignment(node_id="n0", gpu_indices=(0,)),
            Assignment(node_id="n1", gpu_indices=(0,)),
        ),
    )
    snapshot = Snapshot(nodes=(node("n0"), node("n1")), jobs=(split,))
    paths = [p.path for p in snapshot_problems(snapshot)]
    assert paths == ["jobs[0].placement[0].gpu_indices", "jobs[0].placement[1].gpu_indices"]


def test_engine_answers_only_the_stages_asked_for() -> None:
    full = decide(two_jobs(), "fifo")
    partial = Pipeline.build(Profile(name="fifo"), build_registry()).decide(
        two_jobs(), [Stage.ORDERING]
    )
    assert partial.stages == (Stage.ADMISSION, Stage.ORDERING)
    assert partial.ordering == full.ordering
    assert partial.placement == ()
    assert {e.reason for e in partial.explanations} == {"placement not requested in this decision"}


def test_decision_names_each_stages_policy_and_version() -> None:
    decision = decide(two_jobs(), "optimus")
    assert {stage: (ref.name, ref.version) for stage, ref in decision.policies.items()} == {
        "admission": ("accept_all", "1"),
        "ordering": ("srtf", "1"),
        "scaling": ("optimus", "1"),
        "placement": ("consolidated", "1"),
    }


@pytest.mark.parametrize("profile", ["fifo", "tiresias"])
def test_a_job_no_node_could_ever_hold_is_told_so(profile: str) -> None:
    snapshot = snap(
        [node("n0"), node("n1")],
        [
            job("giant-worker", gpus_per_worker=64, submit_time=1),
            job("too-many", workers=17, submit_time=2),
            job("fits", workers=2, submit_time=3),
        ],
    )

    said = reasons(decide(snapshot, profile))

    assert said["giant-worker"].startswith("can never fit: a worker needs 64 GPUs")
    assert said["too-many"].startswith("can never fit: needs at least 17 GPUs")
    assert not said["fits"].startswith("can never fit")


SMALL_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "small.json"
ALL_PROFILES = load_profiles(build_registry())


@pytest.mark.parametrize("name", sorted(ALL_PROFILES))
def test_a_decision_leaves_no_reference_cycles_behind(name: str) -> None:
    # A round's working state (free capacity, per-job dicts, placements) must go when
    # the round ends. Caught in a reference cycle, it waits for the cyclic collector:
    # a simulation then held a third more memory at its peak and ran 15 % slower.
    snapshot = decode_snapshot(SMALL_EXAMPLE.read_bytes())
    pipeline = Pipeline.build(ALL_PROFILES[name], build_registry())
    pipeline.run(snapshot)  # first-use caches and lazy imports are not the round's
    gc.collect()
    gc.disable()
    try:
        pipeline.run(snapshot)
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0


# -- gathering spread jobs ---------------------------------------------------------------------
GATHERING = choice("consolidated", gather_spread_jobs=True)


def _spread_over_two() -> list[Job]:
    """ "spread" holds one GPU on each of a and b, whose other GPUs are taken."""
    return [
        running("spread", {"a": (0,), "b": (0,)}, attained_service_gpu_s=50_000),
        running("fills-a", {"a": (1, 2, 3)}, attained_service_gpu_s=10),
        running("fills-b", {"b": (1, 2, 3)}, attained_service_gpu_s=10),
    ]


def test_gathering_moves_a_job_spread_over_two_nodes_onto_one_with_room() -> None:
    snapshot = snap([node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)], _spread_over_two())
    decision = decide(snapshot, "tiresias", placement=GATHERING)
    placed = {e.job_id: e.assignments for e in decision.placement}
    assert placed["spread"] == (Assignment(node_id="c", gpu_indices=(0, 1)),)
    assert statuses(decision)["spread"] is JobStatus.MOVED
    assert reasons(decision)["spread"] == (
        "moved onto 2 GPUs on 1 node from 2 nodes (a restart from its checkpoint)"
    )
    assert decision.preemptions == ()
    assert_valid_decision(snapshot, decision)


def test_a_profile_that_does_not_gather_leaves_a_spread_job_where_it_runs() -> None:
    snapshot = snap([node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)], _spread_over_two())
    decision = decide(snapshot, "fifo")
    assert statuses(decision)["spread"] is JobStatus.RUNNING
    assert {e.job_id: e.assignments for e in decision.placement}["spread"] == (
        snapshot.jobs_by_id["spread"].placement
    )


def test_gathering_keeps_the_gpus_a_job_holds_on_the_node_it_gathers_onto() -> None:
    # a has two more free GPUs beside the one "spread" holds: the best fit for its two
    # GPUs, its own counted free, is a (three free) rather than the empty c (four).
    snapshot = snap(
        [node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)],
        [
            running("spread", {"a": (0,), "b": (0,)}, attained_service_gpu_s=50_000),
            running("on-a", {"a": (3,)}, attained_service_gpu_s=10),
            running("fills-b", {"b": (1, 2, 3)}, attained_service_gpu_s=10),
        ],
    )
    decision = decide(snapshot, "tiresias", placement=GATHERING)
    placed = {e.job_id: e.assignments for e in decision.placement}
    assert placed["spread"] == (Assignment(node_id="a", gpu_indices=(0, 1)),)


def test_gathering_takes_only_gpus_that_no_job_was_given_this_round() -> None:
    # The newcomer takes c, the only node with room: the spread job stays spread.
    snapshot = snap(
        [node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)],
        [*_spread_over_two(), job("newcomer", workers=4)],
    )
    decision = decide(snapshot, "tiresias", placement=GATHERING)
    assert statuses(decision)["newcomer"] is JobStatus.STARTED
    assert statuses(decision)["spread"] is JobStatus.RUNNING
    assert_valid_decision(snapshot, decision)


def test_a_job_that_no_single_node_could_hold_is_never_gathered() -> None:
    snapshot = snap(
        [node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)],
        [running("wide", {"a": (0, 1, 2, 3), "b": (0, 1)}, attained_service_gpu_s=50_000)],
    )
    decision = decide(snapshot, "tiresias", placement=GATHERING)
    assert statuses(decision)["wide"] is JobStatus.RUNNING


def test_a_move_frees_gpus_that_a_job_earlier_in_the_order_gathers_onto() -> None:
    # "first" (least attained service, first in the order) needs four GPUs on one node
    # and finds none; "second" moves to c, which leaves a whole for "first": the engine
    # asks again, so that asking once more with nothing changed would move nothing.
    snapshot = snap(
        [node("a", gpus=4), node("b", gpus=4), node("c", gpus=2), node("d", gpus=4)],
        [
            running("first", {"a": (0, 1), "d": (0, 1)}, attained_service_gpu_s=100),
            running("second", {"a": (2,), "b": (0,)}, attained_service_gpu_s=200),
            running("fills-b", {"b": (1, 2, 3)}, attained_service_gpu_s=10),
            running("fills-d", {"d": (2, 3)}, attained_service_gpu_s=10),
        ],
    )
    decision = decide(snapshot, "tiresias", placement=GATHERING)
    placed = {e.job_id: e.assignments for e in decision.placement}
    assert placed["second"] == (Assignment(node_id="c", gpu_indices=(0, 1)),)
    assert placed["first"] == (Assignment(node_id="a", gpu_indices=(0, 1, 2, 3)),)
    assert_valid_decision(snapshot, decision)


def test_a_gather_onto_more_than_one_node_is_the_placement_policys_fault() -> None:
    snapshot = snap([node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)], _spread_over_two())
    with pytest.raises(PolicyFault, match="gathered job 'spread' as 2 GPUs on 2 nodes"):
        pipeline(placement={"name": "staying_gatherer"}).decide(snapshot)
    # With a fallback, the fallback answers and the spread job keeps its GPUs.
    decision = pipeline(
        placement={"name": "staying_gatherer"},
        fallback={"placement": {"name": "consolidated"}},
    ).decide(snapshot)
    assert decision.fallback is not None
    assert statuses(decision)["spread"] is JobStatus.RUNNING
    assert_valid_decision(snapshot, decision)


def test_tiresias_is_the_shipped_profile_that_gathers() -> None:
    # Pinned: gathering adds rounds in the simulator and moves running jobs, so a profile
    # that gains or loses it changes its results (docs/results.md, section `tiresias`).
    registry = build_registry()
    profiles = load_profiles(registry)
    gathering = sorted(name for name, p in profiles.items() if Pipeline.build(p, registry).gathers)
    assert gathering == ["tiresias"]
    snapshot = snap([node("a", gpus=4), node("b", gpus=4), node("c", gpus=4)], _spread_over_two())
    assert statuses(decide(snapshot, "tiresias"))["spread"] is JobStatus.MOVED
