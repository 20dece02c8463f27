"""Behaviour of the ordering policies, alone and through the engine."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from pydantic import JsonValue

from policies.decision import JobStatus
from policies.model import Job, Snapshot
from policies.ordering.tiresias import Tiresias, TiresiasParams
from policies.protocols import Context
from policies.registry import PolicyParamsError, build_registry
from tests.policies.builders import ctx, decide, job, node, reasons, running, snap, statuses

REGISTRY = build_registry()


def order(policy: str, snapshot: Snapshot, **params: object) -> list[str]:
    return list(REGISTRY.ordering(policy, params).order(ctx(snapshot), list(snapshot.jobs)).job_ids)


def test_fifo_serves_running_jobs_first_then_by_submit_time_then_snapshot_order() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("late", submit_time=30),
            job("early", submit_time=10),
            running("old", {"n0": (0,)}, submit_time=50),
            job("tie-b", submit_time=20),
            job("tie-a", submit_time=20),
        ],
    )
    # Same-second submissions keep the snapshot's order, not their ids' order.
    assert order("fifo", snapshot) == ["old", "early", "tie-b", "tie-a", "late"]


@pytest.mark.parametrize("policy", ["fifo", "sjf", "srtf", "tiresias"])
def test_same_second_submissions_keep_snapshot_order_whatever_the_ids(policy: str) -> None:
    ids = ["z", "a", "m", "b"]
    snapshot = snap([node("n0")], [job(i, submit_time=5) for i in ids])
    assert order(policy, snapshot) == ids
    assert order(policy, snap([node("n0")], [job(i, submit_time=5) for i in reversed(ids)])) == (
        list(reversed(ids))
    )


def _blocked_head() -> Snapshot:
    return snap(
        [node("n0")],
        [
            running("half", {"n0": (0, 1, 2, 3)}, submit_time=0),
            job("big", workers=8, submit_time=1),
            job("small", workers=2, submit_time=2),
        ],
    )


def test_fifo_head_of_line_blocks_without_backfill() -> None:
    decision = decide(_blocked_head(), "fifo")
    assert statuses(decision)["big"] is JobStatus.PENDING
    assert statuses(decision)["small"] is JobStatus.PENDING
    assert "waiting behind job 'big'" in reasons(decision)["small"]


def test_fifo_backfill_lets_small_job_start() -> None:
    decision = decide(_blocked_head(), "fifo-backfill")
    assert statuses(decision)["big"] is JobStatus.PENDING
    assert statuses(decision)["small"] is JobStatus.STARTED


def test_sjf_runs_shortest_first() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("long", workers=8, submit_time=1, estimated_duration_s=300),
            job("short", workers=8, submit_time=2, estimated_duration_s=100),
            job("middle", workers=8, submit_time=3, estimated_duration_s=200),
        ],
    )
    decision = decide(snapshot, "sjf")
    assert decision.ordering == ("short", "middle", "long")
    assert statuses(decision)["short"] is JobStatus.STARTED
    assert statuses(decision)["middle"] is JobStatus.PENDING


def test_sjf_puts_jobs_without_an_estimate_last() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("unknown", submit_time=0),
            job("known", submit_time=5, estimated_duration_s=50_000),
        ],
    )
    assert order("sjf", snapshot) == ["known", "unknown"]


def test_sjf_never_preempts_a_running_job() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("long", {"n0": tuple(range(8))}, estimated_duration_s=10_000),
            job("short", workers=8, estimated_duration_s=10),
        ],
    )
    decision = decide(snapshot, "sjf")
    assert statuses(decision)["long"] is JobStatus.RUNNING
    assert statuses(decision)["short"] is JobStatus.PENDING
    assert decision.preemptions == ()


def _long_running_short_waiting(preemptible: bool = True) -> Snapshot:
    return snap(
        [node("n0")],
        [
            running(
                "long",
                {"n0": tuple(range(8))},
                estimated_duration_s=10_000,
                executed_time_s=100,
                preemptible=preemptible,
            ),
            job("short", workers=8, estimated_duration_s=60, submit_time=50),
        ],
        now=200,
    )


def test_srtf_preempts_longer_running_job() -> None:
    decision = decide(_long_running_short_waiting(), "srtf")
    assert decision.ordering == ("short", "long")
    assert statuses(decision)["long"] is JobStatus.PREEMPTED
    assert statuses(decision)["short"] is JobStatus.STARTED
    assert [note.job_id for note in decision.preemptions] == ["long"]
    assert "srtf order" in decision.preemptions[0].reason


def test_srtf_spares_a_non_preemptible_job() -> None:
    decision = decide(_long_running_short_waiting(preemptible=False), "srtf")
    assert statuses(decision)["long"] is JobStatus.RUNNING
    assert statuses(decision)["short"] is JobStatus.PENDING


def test_srtf_ranks_by_remaining_not_total_time() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("fresh", estimated_duration_s=500, submit_time=0),
            job("nearly-done", estimated_duration_s=1000, executed_time_s=900, submit_time=1),
            job("unknown", submit_time=-1),
        ],
        now=1000,
    )
    assert order("srtf", snapshot) == ["nearly-done", "fresh", "unknown"]


def test_tiresias_demotes_a_job_past_its_queue_threshold() -> None:
    policy = Tiresias(TiresiasParams())
    snapshot = snap(
        [node("n0")],
        [
            job("served", submit_time=0, attained_service_gpu_s=18_000),
            job("almost", submit_time=1, attained_service_gpu_s=17_999),
            job("new", submit_time=2),
        ],
        now=3000,
    )
    by_id = snapshot.jobs_by_id
    assert policy.queue(ctx(snapshot), by_id["almost"]) == 0
    assert policy.queue(ctx(snapshot), by_id["served"]) == 1
    assert order("tiresias", snapshot) == ["almost", "new", "served"]


def test_tiresias_keeps_fifo_within_a_queue() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("later-less-served", submit_time=5, attained_service_gpu_s=0),
            job("earlier-more-served", submit_time=1, attained_service_gpu_s=3000),
        ],
    )
    # Plain LAS would put the less-served job first; the discretized queues do not.
    assert order("tiresias", snapshot) == ["earlier-more-served", "later-less-served"]


def test_tiresias_uses_one_queue_per_threshold_and_one_more() -> None:
    params = TiresiasParams(queue_thresholds_gpu_s=(100.0, 1000.0))
    policy = Tiresias(params)
    snapshot = snap(
        [node("n0")],
        [
            job("q0", attained_service_gpu_s=99),
            job("q1", attained_service_gpu_s=500),
            job("q2", attained_service_gpu_s=5000),
        ],
    )
    assert [policy.queue(ctx(snapshot), j) for j in snapshot.jobs] == [0, 1, 2]


SHORT_THRESHOLD = (3250.0,)
"""The authors' simulator's threshold: the starvation cases below are sized on it."""


def _starving() -> Snapshot:
    # "starved" ran 1,000 s long ago and has waited 99,000 s since submission:
    # more than 10 x its executed time, so the guard lifts it out of queue 1.
    return snap(
        [node("n0")],
        [
            job("fresh", submit_time=50_000),
            job("starved", submit_time=0, executed_time_s=1000, attained_service_gpu_s=8000),
        ],
        now=100_000,
    )


def test_tiresias_starvation_guard_promotes_a_long_waiting_job() -> None:
    snapshot = _starving()
    starved = snapshot.jobs_by_id["starved"]
    assert Tiresias(TiresiasParams()).queue(ctx(snapshot), starved) == 0
    assert order("tiresias", snapshot) == ["starved", "fresh"]


def test_tiresias_starvation_guard_can_be_turned_off() -> None:
    assert order(
        "tiresias", _starving(), starvation_factor=0, queue_thresholds_gpu_s=SHORT_THRESHOLD
    ) == ["fresh", "starved"]


def test_tiresias_does_not_promote_a_job_that_has_not_waited_long_enough() -> None:
    # Waited 100,000 - 60,000 - 5,000 = 35,000 s < 10 x 5,000 s executed.
    recent: Job = job(
        "recent", submit_time=60_000, executed_time_s=5000, attained_service_gpu_s=9e3
    )
    snapshot = snap([node("n0")], [recent], now=100_000)
    policy = Tiresias(TiresiasParams(queue_thresholds_gpu_s=SHORT_THRESHOLD))
    assert policy.queue(ctx(snapshot), recent) == 1


def test_tiresias_preempts_a_job_in_a_lower_queue() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("veteran", {"n0": tuple(range(8))}, attained_service_gpu_s=50_000),
            job("newcomer", workers=8, submit_time=10),
        ],
        now=100,
    )
    decision = decide(snapshot, "tiresias")
    assert statuses(decision)["veteran"] is JobStatus.PREEMPTED
    assert statuses(decision)["newcomer"] is JobStatus.STARTED


@pytest.mark.parametrize("thresholds", [[7200.0, 3600.0], [3600.0, 3600.0], [0.0]])
def test_tiresias_refuses_thresholds_that_are_not_positive_and_ascending(
    thresholds: list[float],
) -> None:
    with pytest.raises(PolicyParamsError, match="queue_thresholds_gpu_s"):
        REGISTRY.ordering("tiresias", {"queue_thresholds_gpu_s": thresholds})


def _kept(snapshot: Snapshot, state: dict[str, JsonValue]) -> Context:
    return replace(ctx(snapshot), state=MappingProxyType({"tiresias": state}))


def test_tiresias_remembers_a_promotion_with_the_counters_it_resets() -> None:
    snapshot = _starving()
    policy = Tiresias(TiresiasParams())
    decision = decide(snapshot, "tiresias")
    # Pending time = 100,000 - 0 - 1,000 at the promotion.
    assert policy.commit(ctx(snapshot), decision) == {"starved": [8000.0, 1000.0, 99_000.0]}


def test_tiresias_keeps_a_promoted_job_on_top_until_it_earns_the_first_threshold_again() -> None:
    policy = Tiresias(TiresiasParams(queue_thresholds_gpu_s=SHORT_THRESHOLD))
    promoted_at: list[JsonValue] = [8000.0, 1000.0, 99_000.0]
    # Since the promotion it ran 300 s on 8 GPUs (2,400 GPU-s): still the top queue,
    # though its totals alone (10,400 GPU-s, 99,000 s waited vs 1,300 s run) no longer
    # say it starves.
    after = job("starved", submit_time=0, executed_time_s=1300, attained_service_gpu_s=10_400)
    snapshot = snap([node("n0")], [after], now=100_300)
    assert policy.queue(_kept(snapshot, {"starved": promoted_at}), after) == 0
    # Another 200 s (4,000 GPU-s since the promotion): back to queue 1, and without the
    # memory it would be promoted again at once by its totals.
    later = job("starved", submit_time=0, executed_time_s=1500, attained_service_gpu_s=12_000)
    snapshot = snap([node("n0")], [later], now=100_500)
    assert policy.queue(_kept(snapshot, {"starved": promoted_at}), later) == 1
    assert policy.queue(ctx(snapshot), later) == 0


def test_tiresias_promotes_again_only_after_waiting_the_factor_times_its_new_run() -> None:
    policy = Tiresias(TiresiasParams(queue_thresholds_gpu_s=SHORT_THRESHOLD))
    promoted_at: list[JsonValue] = [8000.0, 1000.0, 99_000.0]
    # 500 s run since the promotion; then pending for 4,000 s (< 10 x 500): not yet.
    waiting = job("starved", submit_time=0, executed_time_s=1500, attained_service_gpu_s=12_000)
    early = snap([node("n0")], [waiting], now=104_500)
    assert policy.queue(_kept(early, {"starved": promoted_at}), waiting) == 1
    # Pending 5,000 s since its last promotion = 10 x 500 s: promoted again, state renewed.
    late = snap([node("n0")], [waiting], now=105_500)
    kept = _kept(late, {"starved": promoted_at})
    assert policy.queue(kept, waiting) == 0
    assert policy.commit(kept, decide(late, "tiresias")) == {
        "starved": [12_000.0, 1500.0, 104_000.0]
    }


def test_tiresias_forgets_promotions_of_jobs_that_left_and_ignores_malformed_state() -> None:
    snapshot = snap([node("n0")], [job("fresh", submit_time=5)], now=10)
    kept = _kept(snapshot, {"gone": [1.0, 2.0, 3.0], "fresh": "not offsets"})
    policy = Tiresias(TiresiasParams())
    assert policy.queue(kept, snapshot.jobs[0]) == 0
    assert policy.commit(kept, decide(snapshot, "tiresias")) == {}
