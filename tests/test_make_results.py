"""`make results`: whole traces over seeds, each row a sweep point, ties called as ties."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from evidence.make_results import (
    CASES,
    COMPARE_SEEDS,
    MIN_COMPRESSION,
    PAIR_SEEDS,
    Case,
    Plan,
    compare,
    demand,
    main,
    observations,
    tables,
)
from simulator.cluster import load_cluster
from simulator.metrics import TIMING_KEYS
from simulator.runner import RunConfig, simulate
from simulator.sweep import Summary, run_point
from simulator.traces import TraceJob, compress_arrivals, read_trace
from simulator.workload import WorkloadOptions

HELIOS = "helios_venus.1w-2020-06-01.csv"


def _job(i: int, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(job_id=f"j{i}", submit_time_s=submit, num_gpus=gpus, duration_s=duration)


def test_the_loaded_variant_compresses_arrivals_until_demand_meets_the_cluster() -> None:
    # 40 GPU-hours offered over 10 hours: 4 GPUs busy on average.
    rows = [_job(0, 0.0, 4, 36_000.0), _job(1, 36_000.0, 4, 0.0)]
    light = demand(rows, cluster_gpus=10)
    assert light.offered_gpus == pytest.approx(4.0)
    # 0.9 of 10 GPUs wanted: gaps divided by 9 / 4 = 2.25.
    assert light.compression() == pytest.approx(2.25)
    # A trace that already fills its cluster is still compressed to a harder variant.
    assert demand(rows, cluster_gpus=4).compression() == MIN_COMPRESSION


def test_every_shared_fortnight_and_week_has_a_loaded_variant() -> None:
    whole = {c.trace for c in CASES if c.loaded is not None}
    assert {
        "philly.2w-2017-10-02.csv",
        HELIOS,
        "itp_cluster04.2w-day14.csv",
        "alibaba_openb.2w-day135.csv",
    } <= whole
    assert all(len(c.loaded.seeds) >= COMPARE_SEEDS for c in CASES if c.loaded is not None)


def test_a_plan_can_compare_two_profiles_over_seeds_and_show_the_rest_once() -> None:
    plan = Plan(only=("fifo", "tiresias"), skip=("oasis",), others_once=True)
    runs = plan.runs(mixed_types=False)
    seeds: dict[str, list[int]] = {}
    for name, seed in runs:
        seeds.setdefault(name, []).append(seed)
    assert seeds["fifo"] == seeds["tiresias"] == [0, 1, 2]
    assert seeds["sjf"] == seeds["drf"] == [0]
    assert "oasis" not in seeds
    assert "dual-agent" not in seeds  # mixed-type profiles only where types differ
    # The recorded tables that queue compare Tiresias with FIFO over seeds.
    queueing = ("philly.2w-2017-10-02.csv", HELIOS, "itp_cluster04.2w-day14.csv")
    for case in CASES:
        if case.trace in queueing:
            assert {"fifo", "tiresias"} <= set(case.recorded.only)
            assert len(case.recorded.seeds) >= COMPARE_SEEDS


def test_tiresias_and_fifo_run_over_ten_seeds_where_a_run_is_cheap() -> None:
    plan = Plan(only=("fifo", "tiresias", "sjf"), wide=("fifo", "tiresias"))
    seeds: dict[str, list[int]] = {}
    for name, seed in plan.runs(mixed_types=False):
        seeds.setdefault(name, []).append(seed)
    assert seeds["fifo"] == seeds["tiresias"] == list(PAIR_SEEDS) == list(range(10))
    assert seeds["sjf"] == [0, 1, 2]
    # Seeds asked for on the command line narrow every profile alike.
    assert {s for _, s in plan.runs(mixed_types=False, seeds=[4])} == {4}
    for case in CASES:
        plans = [case.recorded, *([case.loaded] if case.loaded else [])]
        for plan in plans:
            wide = {n for n, s in plan.runs(mixed_types=True) if s == max(PAIR_SEEDS)}
            if case.trace == "philly.2w-2017-10-02.csv":
                assert not wide  # minutes per run: three seeds
            else:
                assert wide == {"fifo", "tiresias"}


def test_a_row_is_a_direct_simulation_of_its_point() -> None:
    srtf = Plan(seeds=(1,), only=("srtf",))
    case = Case(HELIOS, "helios_venus.json", "a test window", recorded=srtf, loaded=srtf)
    loaded = tables([case], scale=0.02)[1]
    (point,) = loaded.points
    assert point.load > 1.0
    assert point.max_jobs is not None

    rows = compress_arrivals(read_trace(point.trace, point.max_jobs), point.load)
    config = RunConfig(seed=1, workload=WorkloadOptions())
    (run,) = simulate(rows, load_cluster(point.cluster), ["srtf"], config)
    row = run_point(point)

    direct = {k: v for k, v in run.result.metrics.items() if k not in TIMING_KEYS}
    assert {k: row[k] for k in direct} == direct


def _summary(*per_seed: float) -> Summary:
    return Summary(
        setting={"profile": "x"},
        seeds=len(per_seed),
        mean={"avg_jct_s": statistics.fmean(per_seed)},
        spread={"avg_jct_s": statistics.stdev(per_seed) if len(per_seed) > 1 else None},
        by_seed={seed: {"avg_jct_s": v} for seed, v in enumerate(per_seed)},
    )


def test_a_difference_within_the_spread_of_the_per_seed_differences_is_a_tie() -> None:
    # Seeds change the jobs and machines a lot, each profile's runs of a seed alike:
    # 10 s less on every seed is a real difference although the seeds spread by 100 s.
    assert compare(_summary(100.0, 200.0, 300.0), _summary(110.0, 210.0, 310.0))[0] == "lower"
    assert compare(_summary(120.0, 220.0, 320.0), _summary(110.0, 210.0, 310.0))[0] == "higher"
    assert compare(_summary(100.0, 200.0, 300.0), _summary(101.0, 199.0, 302.0))[0] == "tie"
    assert compare(_summary(100.0), _summary(200.0))[0] == "few seeds"


def test_rows_over_different_seeds_are_compared_on_the_seeds_both_ran() -> None:
    # FIFO over ten seeds, a profile over the first three: seeds 3-9 are much faster
    # for FIFO, which must show neither in the change against the three-seed row nor
    # in which row is the lowest.
    fifo = _summary(100.0, 110.0, 120.0, *[10.0] * 7)
    other = _summary(90.0, 99.0, 108.0)
    verdict, said = compare(other, fifo)
    assert verdict == "lower"
    assert "-10.0 %" in said
    assert "paired over seeds" in said
    # The lowest row is chosen on the seeds every compared row ran, too.
    rows = [_shown(fifo, "fifo"), _shown(other, "sjf")]
    lines = observations(rows)
    assert any("**sjf**" in line for line in lines), lines
    # A sentence's queueing figures are those of the shared seeds as well (here each
    # seed's queueing equals its JCT).
    queued = [
        replace(s, by_seed={k: {**v, "avg_queue_s": v["avg_jct_s"]} for k, v in s.by_seed.items()})
        for s in rows
    ]
    said = next(line for line in observations(queued) if line.startswith("sjf vs fifo"))
    assert "mean queueing 99 s vs 110 s" in said, said


def _shown(s: Summary, profile: str) -> Summary:
    """`s` as a row of `profile` that ran every job (with a no-queueing bound)."""
    return replace(
        s, setting={"profile": profile}, mean={**s.mean, "bound_s": 1.0, "jct_vs_bound": 1.0}
    )


def test_a_small_run_renders_the_bound_column_and_calls_ties(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    kept = "<!-- section:dl2 -->\nDL2's own evidence\n<!-- /section:dl2 -->\n"
    out.write_text("# old tables\n\n" + kept, encoding="utf-8")
    argv = ["--trace", HELIOS, "--scale", "0.01", "--profile", "fifo", "--profile", "sjf"]
    argv += ["--seeds", "0", "1", "2", "--processes", "1", "--out", str(out)]

    assert main([*argv, "--json", str(tmp_path / "rows.json")]) == 0
    text = out.read_text(encoding="utf-8")

    assert "| profile | seeds | JCT ÷ bound |" in text
    assert "recorded arrivals" in text
    assert "arrivals compressed ×" in text
    assert "No-queueing bound (mean recorded duration)" in text
    # The window's first 40 jobs never wait: FIFO and SJF run them identically.
    assert "sjf vs fifo: mean JCT a tie" in text
    assert kept in text
    assert "# old tables" not in text

    again = tmp_path / "again.md"
    assert main([*argv[:-2], "--out", str(again), "--from-json", str(tmp_path / "rows.json")]) == 0
    tables_only = text.split("<!-- section:")[0].rstrip()
    assert again.read_text(encoding="utf-8").rstrip() == tables_only


def test_plans_narrow_to_the_profiles_and_seeds_asked_for() -> None:
    case = replace(CASES[0], trace=HELIOS, cluster="helios_venus.json")
    (recorded, loaded) = tables([case], scale=0.01, profiles=["fifo", "tiresias"], seeds=[4])
    assert {(p.profile, p.seed) for p in recorded.points} == {("fifo", 4), ("tiresias", 4)}
    assert loaded.load >= MIN_COMPRESSION
