"""Golden traces: a handful of jobs on one 4-GPU node, completion times worked out by hand."""

from __future__ import annotations

import pytest

from policies.profiles import PolicyChoice, Profile
from simulator.core import SimOptions
from simulator.deciders import EngineDecider
from simulator.metrics import SimulationResult
from simulator.perf import PerfOptions
from tests.simulator.helpers import cluster, finish_times, group, profile, run, trace

ONE_NODE = cluster(group(1, 4))


def test_fifo_golden_trace_strict_order() -> None:
    rows = trace(
        ("A", 0, 2, 100),
        ("B", 10, 4, 50),
        ("C", 20, 2, 30),
        ("D", 30, 1, 10),
    )
    result = run(rows, ONE_NODE, EngineDecider(profile("fifo")))
    # t=0    A starts on 2 GPUs                      -> A finishes 0 + 100 = 100
    # t=10   B needs 4, only 2 free: B waits (head of the queue)
    # t=20   C fits in the 2 free GPUs, but strict FIFO keeps it behind B
    # t=30   D likewise waits behind B
    # t=100  A done; B starts on all 4 GPUs          -> B finishes 100 + 50 = 150
    # t=150  B done; C (2 GPUs) and D (1 GPU) start  -> C 150 + 30 = 180, D 150 + 10 = 160
    assert finish_times(result) == {"A": 100.0, "B": 150.0, "C": 180.0, "D": 160.0}
    m = result.metrics
    # JCT = finish - submit: A 100, B 140, C 160, D 130 -> mean 132.5
    assert m["avg_jct_s"] == pytest.approx(132.5)
    # Queueing = JCT - run time: A 0, B 90, C 130, D 120 -> mean 85
    assert m["avg_queue_s"] == pytest.approx(85.0)
    assert m["makespan_s"] == 180.0
    assert m["preemptions"] == 0
    # GPU-seconds held: 2*100 + 4*50 + 2*30 + 1*10 = 470 of 4 GPUs * 180 s = 720
    assert m["gpu_utilization"] == pytest.approx(470 / 720)
    # Price 3.6 USD per GPU-hour = 0.001 USD per GPU-second
    assert m["cost_usd"] == pytest.approx(0.47)


def test_fifo_backfill_lets_small_jobs_pass() -> None:
    rows = trace(("A", 0, 2, 100), ("B", 10, 4, 50), ("C", 20, 2, 30))
    result = run(rows, ONE_NODE, EngineDecider(profile("fifo", backfill=True)))
    # t=20   C backfills the 2 free GPUs             -> C finishes 20 + 30 = 50
    # t=100  A done; B starts                        -> B finishes 100 + 50 = 150
    assert finish_times(result) == {"A": 100.0, "B": 150.0, "C": 50.0}


def test_srtf_golden_trace_preempts_and_resumes() -> None:
    rows = trace(("A", 0, 2, 100), ("B", 10, 4, 20), ("C", 20, 2, 30))
    result = run(rows, ONE_NODE, EngineDecider(profile("srtf")))
    # Estimates are the recorded durations (perfect), ideal model (no restart cost).
    # t=0    A starts on 2 GPUs (remaining 100)
    # t=10   B arrives, remaining 20 < A's 90, needs all 4 GPUs: A is preempted
    #        (10 s of work kept) and B starts        -> B finishes 10 + 20 = 30
    # t=20   C arrives (remaining 30): B (10 left) holds every GPU, C waits
    # t=30   B done; C (30) and A (90) fit together  -> C 30 + 30 = 60, A 30 + 90 = 120
    assert finish_times(result) == {"A": 120.0, "B": 30.0, "C": 60.0}
    m = result.metrics
    assert m["preemptions"] == 1
    # JCT: A 120, B 20, C 40 -> mean 60
    assert m["avg_jct_s"] == pytest.approx(60.0)
    a = next(r for r in result.jobs if r.job_id == "A")
    assert (a.preemptions, a.restarts, a.run_s) == (1, 1, 100.0)


def test_srtf_golden_trace_pays_restart_cost_in_measured_model() -> None:
    rows = trace(("A", 0, 2, 100), ("B", 10, 4, 20), ("C", 20, 2, 30))
    # The generic family: linear speed-up, no locality or type effect; machine variation
    # off, so only the restart cost (Pollux's 30 s for every job) differs from ideal.
    perf = PerfOptions(machine_variation=False)
    result = run(rows, ONE_NODE, EngineDecider(profile("srtf")), perf=perf)
    # t=30   A resumes but makes no progress until 30 + 30 = 60 -> A 60 + 90 = 150
    #        C starts for the first time: no restart cost      -> C 30 + 30 = 60
    assert finish_times(result) == {"A": 150.0, "B": 30.0, "C": 60.0}
    a = next(r for r in result.jobs if r.job_id == "A")
    # Held GPUs 10 s before the preemption and 120 s after (30 of them restarting).
    assert a.run_s == 130.0
    assert a.gpu_s == 2 * 130.0


def test_tiresias_golden_trace_demotes_by_attained_service() -> None:
    rows = trace(("A", 0, 4, 1000), ("B", 100, 4, 50))
    decider = EngineDecider(profile("tiresias", queue_thresholds_gpu_s=[1000.0]))
    result = run(rows, ONE_NODE, decider, options=SimOptions(round_period_s=0))
    # t=0    A starts on all 4 GPUs
    # t=100  B arrives; A has 4 * 100 = 400 GPU-s < 1000: both in queue 0, A is older,
    #        so A keeps running and B waits (event-driven rounds only: period 0)
    # t=1000 A done (B was never served: no timer round to demote A at 250 s)
    #                                                -> B 1000 + 50 = 1050
    assert finish_times(result) == {"A": 1000.0, "B": 1050.0}
    # With a 60 s timer, the round at t=300 sees A at 1200 GPU-s (queue 1) and B in
    # queue 0: A is preempted, B runs 300..350, A resumes at 350 with 700 s of work
    # left (ideal model: no restart cost)              -> A 350 + 700 = 1050
    timed = run(rows, ONE_NODE, decider, options=SimOptions(round_period_s=60))
    assert finish_times(timed) == {"A": 1050.0, "B": 350.0}
    assert timed.metrics["preemptions"] == 1


def _spread_then_room(placement: PolicyChoice) -> SimulationResult:
    """D (2 GPUs) starts over both 2-GPU nodes at t=20, when A frees a GPU of node 0;
    at t=30 C's end leaves node 1 room for all of D. Generic family, machine variation
    off: spreading costs nothing, a restart Pollux's 30 s."""
    rows = trace(("A", 0, 1, 20), ("B", 0, 1, 1000), ("C", 0, 1, 30), ("D", 1, 2, 100))
    perf = PerfOptions(machine_variation=False)
    profile = Profile(name="test-fifo", placement=placement)
    return run(rows, cluster(group(2, 2)), EngineDecider(profile), perf=perf)


def test_a_job_gathered_onto_one_node_restarts_there_in_the_measured_model() -> None:
    gathering = PolicyChoice(name="consolidated", params={"gather_spread_jobs": True})
    result = _spread_then_room(gathering)
    # t=0    A and B fill node 0 (best fit), C takes a GPU of node 1
    # t=1    D needs 2 GPUs, 1 is free: D waits (strict order)
    # t=20   A done: one GPU free on each node, D starts over both
    # t=30   C done: node 1 has room for all of D, D moves there and restarts
    #        (10 s of work kept; Pollux's 30 s restart)  -> D 60 + 90 = 150
    assert finish_times(result) == {"A": 20.0, "B": 1000.0, "C": 30.0, "D": 150.0}
    d = next(r for r in result.jobs if r.job_id == "D")
    assert (d.preemptions, d.restarts) == (0, 1)


def test_a_spread_job_stays_spread_without_gathering() -> None:
    result = _spread_then_room(PolicyChoice(name="consolidated"))
    # D starts over both nodes at t=20 and stays there: 20 + 100 = 120, no restart.
    assert finish_times(result)["D"] == 120.0
    d = next(r for r in result.jobs if r.job_id == "D")
    assert d.restarts == 0
