"""OASiS: prices, the schedule subroutine, admission, scaling and the state they keep."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from pydantic import JsonValue

from policies.admission.oasis import OasisAdmission
from policies.common.oasis import (
    STATE_KEY,
    Market,
    OasisParams,
    OasisState,
    Plan,
    Segment,
    load_state,
    model_job,
    plan_from_details,
    price,
)
from policies.decision import AdmissionResult, JobStatus, Stage, Verdict
from policies.engine import Outcome, Pipeline
from policies.model import (
    Assignment,
    Job,
    JobState,
    SigmoidUtility,
    Snapshot,
    StepUtility,
    Utility,
    convert,
    decode_snapshot,
    encode,
)
from policies.profiles import load_profiles
from policies.protocols import Context, NoParams, StateValue
from policies.registry import build_registry
from policies.scaling.oasis import OasisScaling
from tests.policies.builders import job, next_snapshot, node, running, snap
from tests.policies.checks import assert_valid_decision
from tests.strategies import snapshots

REGISTRY = build_registry()
SLOT = 600.0


def params(**fields: object) -> OasisParams:
    base: dict[str, object] = {"slot_s": SLOT, "horizon_slots": 6}
    return OasisParams.model_validate({**base, **fields})


def pipeline(**fields: object) -> Pipeline:
    profile = load_profiles(REGISTRY)["oasis"]
    admission = profile.admission.model_copy(update={"params": {"slot_s": SLOT, **fields}})
    return Pipeline.build(profile.model_copy(update={"admission": admission}), REGISTRY)


def judge(
    snapshot: Snapshot, state: Mapping[str, JsonValue] | None = None, **fields: object
) -> dict[str, AdmissionResult]:
    pending = [j for j in snapshot.jobs if j.state is JobState.PENDING and not j.admitted]
    context = Context(snapshot=snapshot, state=dict(state or {}))
    results = OasisAdmission(params(**fields)).admit(context, pending)
    return {r.job_id: r for r in results}


def pending(job_id: str, **fields: object) -> Job:
    return job(job_id, admitted=False, **fields)


def plan_in(verdict: AdmissionResult) -> Plan:
    return convert(verdict.details["plan"], Plan)


def plans(outcome: Outcome) -> dict[str, Plan]:
    return dict(load_state(outcome.state[STATE_KEY], SLOT).jobs)


# -- prices ---------------------------------------------------------------------------------------


def test_price_is_the_floor_when_idle_and_the_ceiling_when_full() -> None:
    floor, ceiling = np.array([1.0, 0.5, 0.0]), np.array([64.0, 8.0, 0.0])
    capacity = np.array([8.0, 32.0, 0.0])

    assert price(np.zeros(3), capacity, floor, ceiling) == pytest.approx([1.0, 0.5, 0.0])
    assert price(capacity, capacity, floor, ceiling) == pytest.approx([64.0, 8.0, 0.0])
    # Exponential in between: half used is the geometric mean of floor and ceiling.
    half = price(capacity / 2, capacity, floor, ceiling)
    assert half[:2] == pytest.approx([8.0, 2.0])
    # Overcommitted by running jobs, or no capacity at all: the ceiling, never more.
    assert price(capacity * 3, capacity, floor, ceiling)[:2] == pytest.approx([64.0, 8.0])
    assert price(np.ones(3), np.zeros(3), floor, ceiling)[:2] == pytest.approx([64.0, 8.0])


def test_price_rises_with_committed_use() -> None:
    floor, ceiling, capacity = np.array([0.1]), np.array([100.0]), np.array([8.0])
    prices = [float(price(np.array([g]), capacity, floor, ceiling)[0]) for g in range(9)]
    assert prices == sorted(prices)
    assert prices[0] == pytest.approx(0.1)
    assert prices[-1] == pytest.approx(100.0)


# -- the schedule subroutine on a hand-sized instance ------------------------------------------


def _hand_sized() -> Snapshot:
    """One 2-GPU node; one GPU busy for the first slot; a job worth 10 by t = 1200 s."""
    return snap(
        [node("n0", gpus=2)],
        [
            running("busy", {"n0": (0,)}, estimated_duration_s=SLOT),
            pending(
                "a",
                workers=1,
                max_workers=2,
                estimated_duration_s=2 * SLOT,
                utility=StepUtility(value=10.0, deadline_s=2 * SLOT),
            ),
        ],
    )


def test_hand_sized_instance_waits_for_the_idle_slot() -> None:
    # Bounds (no implied utilities): U = 10 per GPU (value / one worker's GPU);
    # L = 10 / (4 · 1 type · 2 GPU-slots) = 1.25. Finishing by t = 1200 s:
    #   1 worker now (GPU half used: 1.25 · 8^0.5 = 3.54) + 1 next slot (1.25): 4.79
    #   2 workers next slot at the floor price: 2 · 1.25 = 2.50   <- best, payoff 7.5
    # Two workers now do not fit (one GPU is busy).
    verdict = judge(_hand_sized(), implied_value_per_gpu_hour=0)["a"]

    assert verdict.verdict is Verdict.ADMIT
    details = verdict.details
    assert details["floor"] == {"gpu": pytest.approx(1.25), "cpu": 0.0, "memory": 0.0}
    assert details["ceiling"] == {"gpu": pytest.approx(10.0), "cpu": 0.0, "memory": 0.0}
    assert details["cost"] == pytest.approx(2.5)
    assert details["utility"] == pytest.approx(10.0)
    assert details["payoff"] == pytest.approx(7.5)
    assert details["completion_s"] == pytest.approx(2 * SLOT)
    assert details["binding_resource"] == "gpu"
    assert plan_in(verdict).segments == (
        Segment(first=1, until=2, workers=2, ps=0, nodes=(("n0", 2, 0),)),
    )
    assert "in slot 1" in verdict.reason


def test_hand_sized_instance_starts_now_when_the_deadline_needs_it() -> None:
    # Deadline at the end of the first slot: only 1 worker now + ... cannot finish, and 2
    # workers now do not fit; a deadline at 1200 s with work 1800 s forces 1 now + 2 next.
    snapshot = snap(
        [node("n0", gpus=2)],
        [
            running("busy", {"n0": (0,)}, estimated_duration_s=SLOT),
            pending(
                "a",
                workers=1,
                max_workers=2,
                estimated_duration_s=3 * SLOT,
                utility=StepUtility(value=10.0, deadline_s=2 * SLOT),
            ),
        ],
    )
    verdict = judge(snapshot, implied_value_per_gpu_hour=0)["a"]

    assert verdict.verdict is Verdict.ADMIT
    assert [(s.first, s.workers) for s in plan_in(verdict).segments] == [(0, 1), (1, 2)]


def _short(duration_s: float, utility: Utility, now: float) -> Snapshot:
    """An idle one-GPU node and a one-worker job submitted now."""
    return snap(
        [node("n0", gpus=1)],
        [pending("a", submit_time=now, estimated_duration_s=duration_s, utility=utility)],
        now=now,
    )


def test_a_job_shorter_than_the_rest_of_the_slot_is_valued_when_its_work_is_done() -> None:
    # 60 s of work, worth nothing after 120 s, with 300 s of the slot left: at the
    # slot's end it is worth nothing, but it is done long before.
    now = 1.5 * SLOT
    snapshot = _short(60.0, StepUtility(value=10.0, deadline_s=120.0), now)

    verdict = judge(snapshot, implied_value_per_gpu_hour=0)["a"]

    assert verdict.verdict is Verdict.ADMIT
    assert verdict.details["utility"] == pytest.approx(10.0)
    # Done after its 60 s (units round the work up and the slot's work down: a few s).
    assert now + 60.0 <= verdict.details["completion_s"] <= now + 70.0
    assert plan_in(verdict).segments[0].first == 1  # the current slot: starts now


def test_valued_at_the_slot_end_a_job_whose_utility_is_gone_within_the_slot_is_rejected() -> None:
    # The paper's slotted valuation, kept as an option: the same job is worth nothing.
    now = 1.5 * SLOT
    snapshot = _short(60.0, StepUtility(value=10.0, deadline_s=120.0), now)

    verdict = judge(snapshot, implied_value_per_gpu_hour=0, completion_value="slot_end")["a"]

    assert verdict.verdict is Verdict.REJECT


def test_a_job_longer_than_the_rest_of_the_slot_starts_now_when_finishing_sooner_pays() -> None:
    # 0.8 of a slot of work with half a slot left, on an idle node whose price is
    # nearly nothing: starting now finishes 0.3 slot into the next one, waiting for it
    # 0.8 slot in; the utility lost by waiting outweighs paying for two slots.
    now = 1.5 * SLOT
    utility = SigmoidUtility(value=10.0, midpoint_s=1.6 * SLOT)
    snapshot = _short(0.8 * SLOT, utility, now)

    started = judge(snapshot, implied_value_per_gpu_hour=0)["a"]
    waited = judge(snapshot, implied_value_per_gpu_hour=0, completion_value="slot_end")["a"]

    assert started.verdict is Verdict.ADMIT
    assert [(s.first, s.until) for s in plan_in(started).segments] == [(1, 3)]
    assert started.details["completion_s"] == pytest.approx(now + 0.8 * SLOT, abs=0.05 * SLOT)
    assert started.details["utility"] == pytest.approx(utility.value_at(0.8 * SLOT), rel=0.02)
    # Valued at the end of the slot it falls in, both finish in the next slot: the
    # cheaper schedule, waiting for it, wins.
    assert waited.verdict is Verdict.ADMIT
    assert [(s.first, s.until) for s in plan_in(waited).segments] == [(2, 3)]
    assert waited.details["completion_s"] == pytest.approx(3 * SLOT)


def test_rejects_a_job_whose_utility_cannot_cover_the_priced_cost() -> None:
    snapshot = snap(
        [node("n0", gpus=8)],
        [
            running(
                "big",
                {"n0": (0, 1, 2, 3, 4, 5, 6)},
                estimated_duration_s=100 * SLOT,
                utility=StepUtility(value=1000.0, deadline_s=1e9),
            ),
            pending(
                "cheap",
                estimated_duration_s=SLOT,
                utility=StepUtility(value=0.001, deadline_s=1e6),
            ),
        ],
    )
    verdict = judge(snapshot, implied_value_per_gpu_hour=0)["cheap"]

    assert verdict.verdict is Verdict.REJECT
    details = verdict.details
    assert details["utility"] == pytest.approx(0.001)
    cost = details["cost"]
    assert isinstance(cost, float)
    assert cost > 0.001
    assert details["binding_resource"] == "gpu"
    assert "plan" not in details
    assert "utility 0.001" in verdict.reason
    assert f"priced cost {cost:.4g}" in verdict.reason
    assert "binding resource is gpu" in verdict.reason


def test_rejects_a_job_that_cannot_finish_within_the_horizon() -> None:
    snapshot = snap([node("n0", gpus=1)], [pending("long", estimated_duration_s=10 * SLOT)])
    verdict = judge(snapshot)["long"]
    assert verdict.verdict is Verdict.REJECT
    assert "more than the horizon of 6" in verdict.reason


def test_rejects_a_job_no_node_can_hold() -> None:
    snapshot = snap([node("n0", gpus=4)], [pending("wide", gpus_per_worker=8)])
    verdict = judge(snapshot)["wide"]
    assert verdict.verdict is Verdict.REJECT
    assert "no schedulable node can hold one worker" in verdict.reason


def test_defers_when_no_training_node_is_schedulable() -> None:
    snapshot = snap([node("n0", healthy=False)], [pending("a")])
    assert judge(snapshot)["a"].verdict is Verdict.DEFER


def test_jobs_without_utility_are_rejected_when_none_is_implied() -> None:
    snapshot = snap([node("n0")], [pending("a")])
    assert judge(snapshot)["a"].verdict is Verdict.ADMIT
    verdict = judge(snapshot, implied_value_per_gpu_hour=0)["a"]
    assert verdict.verdict is Verdict.REJECT
    assert "states no utility" in verdict.reason


def test_later_arrivals_pay_the_prices_earlier_ones_raised() -> None:
    jobs = [pending(f"j{i}", submit_time=float(i), estimated_duration_s=SLOT) for i in range(5)]
    verdicts = judge(snap([node("n0", gpus=4)], jobs), horizon_slots=1)
    costs = [float(str(verdicts[f"j{i}"].details["cost"])) for i in range(4)]
    assert all(verdicts[f"j{i}"].verdict is Verdict.ADMIT for i in range(4))
    assert costs == sorted(costs)
    assert len(set(costs)) == 4
    # The fifth finds the single slot full.
    assert verdicts["j4"].verdict is Verdict.REJECT
    assert "binding resource is gpu" in verdicts["j4"].reason


# -- parameter servers -------------------------------------------------------------------------


def test_parameter_servers_follow_the_ratio_and_bottleneck_at_max_ps() -> None:
    elastic = job("ps", workers=2, min_workers=1, max_workers=4, ps=1, max_ps=1, workers_per_ps=2.0)
    model = model_job(elastic, StepUtility(value=1.0, deadline_s=1.0), False, params())
    assert model.counts.tolist() == [1, 2, 3, 4]
    assert model.ps.tolist() == [1, 1, 1, 1]  # ⌈y/2⌉ capped at max_ps = 1
    # One server feeds two workers: beyond two, extra workers add nothing.
    assert model.speed.tolist() == pytest.approx([0.5, 1.0, 1.0, 1.0])

    free = job("free-ps", workers=2, max_workers=4, ps=1, workers_per_ps=2.0)
    model = model_job(free, StepUtility(value=1.0, deadline_s=1.0), False, params())
    assert model.ps.tolist() == [1, 2, 2]
    assert model.speed.tolist() == pytest.approx([1.0, 1.5, 2.0])


def test_parameter_servers_go_where_capacity_is_left() -> None:
    snapshot = snap(
        [node("gpu", gpus=4, cpus=4), node("cpu", gpus=0, cpus=16)],
        [
            pending(
                "a",
                workers=2,
                cpus_per_worker=2.0,
                ps=1,
                ps_cpus=8.0,
                estimated_duration_s=SLOT,
            )
        ],
    )
    verdict = judge(snapshot)["a"]
    assert verdict.verdict is Verdict.ADMIT
    (segment,) = plan_in(verdict).segments
    assert segment.nodes == (("cpu", 0, 1), ("gpu", 2, 0))
    assert (segment.workers, segment.ps) == (2, 1)


# -- capacity -------------------------------------------------------------------------------------


def _commitments_past_capacity(
    snapshot: Snapshot, before: OasisState, after: OasisState, oasis: OasisParams
) -> list[tuple[int, str, int]]:
    """(slot, node, resource) of future slots where this round's new plans overfill.

    Compares the use OASiS counts on `snapshot` with the state before and after the
    round: wherever the new plans add use, the total must stay within capacity. The
    current slot is the engine's (it places the real GPUs), so it is left out; and
    load OASiS did not plan (jobs admitted elsewhere, started later) is not its doing.
    """
    bounds = (np.ones(3), np.ones(3) * 10)
    was = Market.build(snapshot, oasis, before, bounds)
    now = Market.build(snapshot, oasis, after, bounds)
    added = now.used[1:] - was.used[1:]
    over = np.argwhere((added > 1e-6) & (now.used[1:] > now.capacity[None] + 1e-6))
    return [(int(t) + 1, now.node_ids[h], int(k)) for t, h, k in over]


def test_admitted_schedules_never_exceed_capacity_in_a_crowded_cluster() -> None:
    oasis = params(horizon_slots=12)
    jobs = [
        pending(
            f"j{i}",
            submit_time=float(i),
            workers=1 + i % 3,
            max_workers=4,
            estimated_duration_s=SLOT * (1 + i % 5),
            cpus_per_worker=4.0,
            ps=i % 2,
            ps_cpus=6.0,
        )
        for i in range(40)
    ]
    snapshot = snap([node("n0", gpus=4, cpus=16), node("n1", gpus=8, cpus=24)], jobs)
    outcome = pipeline(horizon_slots=12).run(snapshot)
    state = load_state(outcome.state[STATE_KEY], oasis.slot_s)

    assert 0 < len(state.jobs) < len(jobs), "some jobs are admitted, not all"
    # Nothing else is planned here: every future slot is within capacity outright.
    market = Market.build(snapshot, oasis, state, (np.ones(3), np.ones(3) * 10))
    assert (market.used[1:] <= market.capacity[None] + 1e-6).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots(), advance_s=st.sampled_from([0.0, SLOT, 3 * SLOT]))
def test_admitted_schedules_never_exceed_capacity_over_rounds(
    snapshot: Snapshot, advance_s: float
) -> None:
    oasis = params()
    kept: dict[str, StateValue] = {}
    for _ in range(3):
        before = load_state(kept.get(STATE_KEY), oasis.slot_s)
        outcome = pipeline().run(snapshot, state=kept)
        assert_valid_decision(snapshot, outcome.decision)
        after = load_state(outcome.state[STATE_KEY], oasis.slot_s)
        assert _commitments_past_capacity(snapshot, before, after, oasis) == []
        kept.update(outcome.state)
        snapshot = next_snapshot(snapshot, outcome.decision, advance_s)


# -- scaling and the state across rounds ---------------------------------------------------------


def test_scaling_runs_the_committed_schedule_slot_by_slot() -> None:
    oasis = pipeline(implied_value_per_gpu_hour=0, horizon_slots=6)
    snapshot = _hand_sized()
    first = oasis.run(snapshot)
    scaled = {r.job_id: r for r in first.decision.scaling}
    assert scaled["a"].workers == 0
    assert "starts it in slot 1" in scaled["a"].reason
    assert {e.job_id: e.status for e in first.decision.explanations}["a"] is JobStatus.PENDING

    # Next slot: the busy job is gone, the caller marks "a" admitted.
    later = Snapshot(
        now=SLOT,
        nodes=snapshot.nodes,
        jobs=(replace(snapshot.jobs_by_id["a"], admitted=True),),
    )
    second = oasis.run(later, state=first.state)
    (scaling,) = second.decision.scaling
    assert scaling.workers == 2
    assert "OASiS schedule: 2 workers in slot 1" in scaling.reason
    assert {e.job_id: e.status for e in second.decision.explanations}["a"] is JobStatus.STARTED


def test_scaling_reports_parameter_servers_of_the_schedule() -> None:
    snapshot = snap(
        [node("n0", gpus=8, cpus=64)],
        [pending("a", workers=4, ps=2, ps_cpus=2.0, estimated_duration_s=SLOT)],
    )
    outcome = pipeline().run(snapshot)
    (scaling,) = outcome.decision.scaling
    assert (scaling.workers, scaling.ps) == (4, 2)


def test_scaling_without_a_schedule_keeps_running_jobs_and_runs_others_as_requested() -> None:
    snapshot = snap(
        [node("n0")],
        [running("r", {"n0": (0, 1)}, max_workers=4), job("w", workers=3)],
    )
    context = Context(snapshot=snapshot)
    results = OasisScaling(NoParams()).scale(context, list(snapshot.jobs))
    assert [(r.job_id, r.workers) for r in results] == [("r", 2), ("w", 3)]
    assert all("no committed schedule" in r.reason for r in results)


def test_a_job_committed_earlier_is_not_judged_twice() -> None:
    oasis = pipeline()
    snapshot = snap([node("n0", gpus=2)], [pending("a", estimated_duration_s=SLOT)])
    first = oasis.run(snapshot)
    # The caller did not record the verdict: the job comes back unadmitted.
    second = oasis.run(snapshot, state=first.state)
    (verdict,) = second.decision.admission
    assert verdict.admitted
    assert "already committed" in verdict.reason
    assert verdict.details["plan"] == first.decision.admission[0].details["plan"]


def test_a_verdict_hands_its_plan_on_as_is_and_shows_it_as_json() -> None:
    oasis = pipeline()
    snapshot = snap([node("n0", gpus=2)], [pending("a", estimated_duration_s=SLOT)])
    (verdict,) = oasis.run(snapshot).decision.admission
    plan = verdict.details["plan"]
    # The stages after admission read the Plan itself, no JSON round trip.
    assert isinstance(plan, Plan)
    assert plan_from_details(verdict.details) is plan
    # The decision shows it as the JSON object a plan encodes to.
    shown = orjson.loads(encode(verdict))["details"]["plan"]
    assert shown == orjson.loads(encode(plan))
    assert shown["segments"][0]["nodes"] == [["n0", 1, 0]]
    # A plan given as JSON data (a verdict built elsewhere) is validated; a bad one is not read.
    assert plan_from_details({"plan": shown}) == plan
    assert plan_from_details({"plan": {"segments": "none"}}) is None
    assert plan_from_details({}) is None


def test_commit_drops_finished_jobs_and_cuts_the_past() -> None:
    oasis = pipeline()
    snapshot = snap(
        [node("n0", gpus=2)],
        [
            pending("a", estimated_duration_s=3 * SLOT, submit_time=0.0),
            pending("b", estimated_duration_s=3 * SLOT, submit_time=1.0),
        ],
    )
    first = oasis.run(snapshot)
    assert sorted(plans(first)) == ["a", "b"]

    # One slot later "b" has finished (gone from the snapshot); "a" still runs.
    a_running = replace(
        snapshot.jobs_by_id["a"],
        admitted=True,
        state=JobState.RUNNING,
        placement=(Assignment(node_id="n0", gpu_indices=(1,)),),
    )
    later = Snapshot(now=SLOT, nodes=snapshot.nodes, jobs=(a_running,))
    second = oasis.run(later, state=first.state)
    kept = plans(second)
    assert list(kept) == ["a"]
    assert all(s.until > 1 for s in kept["a"].segments)


def test_the_current_slot_is_overwritten_by_what_runs() -> None:
    oasis = pipeline()
    snapshot = snap(
        [node("n0", gpus=4)],
        [pending("a", workers=2, estimated_duration_s=4 * SLOT)],
    )
    first = oasis.run(snapshot)
    # The engine placed it (both workers on n0, GPUs 0 and 1), whatever the plan's layout.
    (entry,) = first.decision.placement
    current = plans(first)["a"].segments[0]
    assert (current.first, current.until) == (0, 1)
    assert current.workers == sum(len(a.gpu_indices) for a in entry.assignments)
    assert current.nodes == tuple((a.node_id, len(a.gpu_indices), 0) for a in entry.assignments)

    # Then the job really runs with one worker only (say the caller shrank it): that wins.
    shrunk = replace(
        snapshot.jobs_by_id["a"],
        admitted=True,
        state=JobState.RUNNING,
        min_workers=1,
        placement=(Assignment(node_id="n0", gpu_indices=(3,)),),
    )
    second = oasis.run(
        Snapshot(now=10.0, nodes=snapshot.nodes, jobs=(shrunk,)),
        [Stage.ADMISSION],
        state=first.state,
    )
    current = plans(second)["a"].segments[0]
    assert (current.first, current.workers, current.nodes) == (0, 1, (("n0", 1, 0),))


def test_state_of_another_slot_length_is_dropped_but_keeps_its_bounds() -> None:
    outcome = pipeline().run(snap([node("n0")], [pending("a")]))
    state = load_state(outcome.state[STATE_KEY], SLOT)
    assert state.jobs
    other = load_state(outcome.state[STATE_KEY], 2 * SLOT)
    assert other.jobs == {}
    assert other.floor == state.floor


def test_unreadable_state_starts_afresh() -> None:
    assert load_state({"version": 99, "nonsense": True}, SLOT) == OasisState(slot_s=SLOT)
    verdict = judge(snap([node("n0")], [pending("a")]), state={STATE_KEY: [1, 2, 3]})["a"]
    assert verdict.verdict is Verdict.ADMIT


def test_state_is_stored_as_json_and_read_back_as_it_was() -> None:
    outcome = pipeline().run(snap([node("n0")], [pending("a", ps=1, ps_cpus=1.0)]))
    kept = outcome.state[STATE_KEY]
    # The commit hands back the Struct (a simulator keeps it as is); the service stores
    # the JSON it encodes to, and a round reads that back to the same state.
    assert isinstance(kept, OasisState)
    stored = orjson.loads(encode(kept))
    assert stored["jobs"]["a"]["segments"]
    assert load_state(stored, SLOT) == kept
    assert load_state(kept, SLOT) is kept


def test_running_jobs_outside_oasis_load_the_prices_for_their_remaining_time() -> None:
    snapshot = snap(
        [node("n0", gpus=2)],
        [running("r", {"n0": (0, 1)}, estimated_duration_s=2.5 * SLOT)],
    )
    market = Market.build(snapshot, params(), OasisState(slot_s=SLOT), (np.ones(3), np.ones(3) * 4))
    assert market.used[:, 0, 0].tolist() == [2, 2, 2, 0, 0, 0]


def test_oasis_decides_the_large_example_admitting_most_of_its_backlog() -> None:
    # Its speed is a benchmark (`make bench-engine`), not asserted here.
    path = Path(__file__).resolve().parents[2] / "examples" / "large.json"
    snapshot = decode_snapshot(path.read_text())
    profile = load_profiles(REGISTRY)["oasis"]
    outcome = Pipeline.build(profile, REGISTRY).run(snapshot)

    assert_valid_decision(snapshot, outcome.decision)
    assert len(outcome.decision.admission) > 500
    assert sum(a.admitted for a in outcome.decision.admission) > 500
    assert len(encode(outcome.state)) < 2_000_000
