"""Tiresias's evidence: where the Alibaba window's worst job ran, and how fast; what the
Helios week's change is made of."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evidence.evidence_tiresias import (
    AlibabaSeed,
    HeliosSeed,
    Stint,
    WorstJob,
    _helios_seed,
    _render_alibaba,
    _render_helios,
    _stints,
)
from simulator.metrics import JobRecord


def test_a_placement_speed_is_its_spread_its_slowest_machine_and_its_slowest_type() -> None:
    # The section explains a stint's speed by these three factors: they must be all of it
    # for a job at its requested size with no parameter servers.
    stints = _stints(2, "spread", "openb-pod-5038")
    assert [s.nodes for s in stints][-1] == 2
    for stint in stints:
        explained = stint.locality * stint.slowest_machine * stint.slowest_type
        assert stint.speed == pytest.approx(explained, rel=1e-9)
        assert stint.locality == (1.0 if stint.nodes == 1 else pytest.approx(0.518, abs=1e-3))
        assert not stint.types_measured  # no speed for `lm` on Alibaba's GPU types


def _record(job_id: str, finish_s: float, preemptions: int = 0) -> JobRecord:
    return JobRecord(
        index=0,
        job_id=job_id,
        tenant="default",
        family="lm",
        gpus=2,
        submit_s=0.0,
        recorded_duration_s=86_400.0,
        first_start_s=0.0,
        finish_s=finish_s,
        run_s=finish_s,
        gpu_s=2 * finish_s,
        preemptions=preemptions,
        restarts=preemptions,
        cost_usd=0.0,
        status="completed",
    )


def _stint(start_s: float, nodes: int, speed: float, *, measured: bool) -> Stint:
    return Stint(
        start_s=start_s,
        held="1 T4 + 1 T4" if nodes == 2 else "2 A10",
        nodes=nodes,
        speed=speed,
        locality=0.5 if nodes == 2 else 1.0,
        slowest_machine=0.9,
        slowest_type=1.0 if not measured else 0.8,
        types_measured=measured,
    )


def _section(spread_stints: list[Stint]) -> str:
    fifo_jobs = {"long": _record("long", 90_000.0), "other": _record("other", 100.0)}
    spread_jobs = {"long": _record("long", 400_000.0, 1), "other": _record("other", 100.0)}
    gathered_jobs = {"long": _record("long", 120_000.0, 1), "other": _record("other", 100.0)}
    jct_s = (
        {"fifo": 1_000.0, "tiresias": 880.0, "spread": 900.0, "one_node": 950.0},
        {"fifo": 1_000.0, "tiresias": 990.0, "spread": 1_100.0, "one_node": 1_000.0},
    )
    seeds = [
        AlibabaSeed(
            seed, {**jct, "fifo_gather": 990.0 + 5 * seed}, fifo_jobs, gathered_jobs, spread_jobs
        )
        for seed, jct in enumerate(jct_s)
    ]
    worst = WorstJob(
        seeds[1],
        "long",
        {
            "fifo": [_stint(0.0, 1, 1.0, measured=False)],
            "spread": spread_stints,
            "tiresias": [_stint(0.0, 1, 0.9, measured=False)],
        },
    )
    return "\n".join(_render_alibaba(seeds, worst))


def test_the_section_explains_the_placement_the_job_spent_longest_on() -> None:
    # 10,000 s on one node, then 390,000 s spread over two: the second is explained,
    # although the first came first and both are as slow as each other here.
    text = _section(
        [_stint(0.0, 1, 0.45, measured=False), _stint(10_000.0, 2, 0.45, measured=False)]
    )
    assert "The longest of these, 4.5 days from 10,000 s, ran at 0.45" in text
    assert "keeps 50 % of its speed spread this way" in text
    assert "its GPU types count as equal for it" in text


def test_measured_gpu_types_are_given_their_speed() -> None:
    text = _section([_stint(0.0, 2, 0.36, measured=True)])
    assert "its slowest GPU type runs at 0.80" in text
    assert "count as equal" not in text


def test_the_section_follows_the_worst_spread_job_under_the_shipped_tiresias() -> None:
    text = _section([_stint(0.0, 2, 0.45, measured=False)])
    assert "on seed 1, where Tiresias without gathering fared worst (+10.0 %)" in text
    assert "The shipped Tiresias ran it on 2 A10 on one node (0.90)" in text
    assert "finished 120,000 s after its arrival; the seed's change against FIFO is -1.0 %" in text


def test_the_shipped_tiresias_gathers_the_worst_seeds_spread_job_onto_one_node() -> None:
    stints = _stints(2, "tiresias", "openb-pod-5038")
    assert stints[-1].nodes == 1
    assert any(s.nodes == 2 for s in stints)  # it was spread, then gathered


def test_the_helios_split_adds_up_to_the_change_of_the_mean_jct() -> None:
    # Short jobs, the longer jobs' queueing and their run time, preempted or not: every
    # job's change counted once, so the four parts are the whole change.
    seed = _helios_seed(1, max_jobs=600)
    parts = seed.short_s + seed.queueing_longer_s + seed.running_kept_s
    parts += seed.running_preempted_s
    assert parts == pytest.approx(seed.tiresias_s - seed.fifo_s, abs=1e-6)


def _helios(seed: int, change: float) -> HeliosSeed:
    return HeliosSeed(
        seed=seed,
        jobs=4_089,
        machine_cov=0.1,
        fifo_s=1_000.0,
        tiresias_s=1_000.0 * (1 + change),
        fifo_alike_s=1_000.0,
        tiresias_alike_s=996.0,
        fifo_queue_s=90.0,
        short_s=-50.0,
        queueing_longer_s=-10.0,
        running_kept_s=1_000.0 * change + 60.0,
        running_preempted_s=0.0,
    )


def test_the_helios_text_says_more_seeds_decide_only_when_they_do() -> None:
    changes = [
        0.0022,
        -0.0138,
        0.0039,
        -0.0168,
        -0.0017,
        -0.0168,
        -0.0109,
        -0.018,
        -0.0097,
        -0.0218,
    ]
    seeds = [_helios(i, c) for i, c in enumerate(changes)]
    text = "\n".join(_render_helios(seeds))
    assert "three seeds cannot tell the two apart and 10 can" in text
    first_three = "over the first three alone (the whole-trace table's seeds until it ran ten)"
    assert f"{first_three}, lower in 1" in text
    tied = "\n".join(_render_helios([replace(s, tiresias_s=1_000.0) for s in seeds[:3]]))
    assert "cannot tell the two apart" not in tied
    assert "rests on how many seeds average the lottery out" in tied
