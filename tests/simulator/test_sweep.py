"""Grids of simulations: the same rows wherever they run, the bound, the seeds folded."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import pytest

from simulator.paths import clusters_dir, traces_dir
from simulator.sweep import (
    Grid,
    InProcess,
    Point,
    ProcessPool,
    RayCluster,
    Runner,
    SweepError,
    process_runner,
    ray_runner,
    run_point,
    run_sequential,
    same_results,
    summarise,
)
from simulator.sweep_cli import (
    add_runner_arguments,
    add_sweep_arguments,
    run_sweep,
    runner_from_args,
)
from simulator.traces import read_trace

# The ITP fortnight queues from its first jobs on; 40 of them keep each run short.
TRACE = str(traces_dir() / "itp_cluster04.2w-day14.csv")
CLUSTER = str(clusters_dir() / "itp.json")


def small_grid() -> Grid:
    return Grid(
        cases=[(TRACE, CLUSTER)],
        profiles=["fifo", "tiresias"],
        seeds=[0, 1],
        loads=[1.0, 4.0],
        max_jobs=40,
    )


def test_a_grid_gives_the_same_rows_in_process_on_processes_and_on_ray() -> None:
    points = small_grid().points()
    sequential = run_sequential(points)
    on_processes = process_runner(2)(points)
    on_ray = ray_runner("local", num_cpus=2)(points)

    assert len(sequential) == 8
    assert same_results(sequential, on_processes)
    assert same_results(sequential, on_ray)
    # The rows differ where the points do: seeds draw machine speeds, loads move arrivals.
    assert len({json.dumps(r["avg_jct_s"]) for r in sequential}) > 1


def test_the_runner_options_pick_the_runner_and_never_more_processes_than_tasks() -> None:
    parser = argparse.ArgumentParser()
    add_runner_arguments(parser, default_processes=1, what="episodes")

    def runner(argv: list[str], tasks: int | None = None) -> Runner:
        return runner_from_args(parser.parse_args(argv), tasks)

    assert isinstance(runner([]), InProcess)
    pool = runner(["--processes", "4"], tasks=3)
    assert isinstance(pool, ProcessPool)
    assert pool.processes == 3
    assert isinstance(runner(["--processes", "4"], tasks=1), InProcess)
    cluster = runner(["--ray", "10.0.0.1:6379"])
    assert isinstance(cluster, RayCluster)
    assert cluster.address == "10.0.0.1:6379"
    with pytest.raises(SystemExit):
        parser.parse_args(["--processes", "2", "--ray", "local"])


def test_the_points_are_every_combination_in_a_fixed_order() -> None:
    points = small_grid().points()

    assert [(p.load, p.profile, p.seed) for p in points] == [
        (load, profile, seed)
        for load in (1.0, 4.0)
        for profile in ("fifo", "tiresias")
        for seed in (0, 1)
    ]


def test_the_no_queueing_bound_is_the_mean_recorded_duration_of_completed_jobs() -> None:
    row = run_point(
        Point(trace=TRACE, cluster=CLUSTER, profile="fifo", max_jobs=30, perf_mode="ideal")
    )
    durations = [job.duration_s for job in read_trace(TRACE, 30)]

    assert row["jobs_completed"] == 30
    assert row["bound_s"] == pytest.approx(statistics.fmean(durations))
    # Under the ideal model a job runs exactly its recorded time: only waiting adds to it.
    assert row["jct_vs_bound"] == pytest.approx(
        (row["bound_s"] + row["avg_queue_s"]) / row["bound_s"]
    )


def test_summaries_fold_the_seeds_of_each_setting_into_mean_and_spread() -> None:
    def row(profile: str, seed: int, jct: float) -> dict[str, Any]:
        return {
            "trace": TRACE,
            "cluster": CLUSTER,
            "profile": profile,
            "seed": seed,
            "max_jobs": None,
            "perf_mode": "measured",
            "load": 1.0,
            "workload": {},
            "avg_jct_s": jct,
        }

    rows = [row("fifo", 0, 100.0), row("sjf", 0, 50.0), row("fifo", 1, 140.0), row("sjf", 1, 50.0)]
    fifo, sjf = summarise(rows, keys=["avg_jct_s"])

    assert (fifo.setting["profile"], fifo.seeds) == ("fifo", 2)
    assert fifo.mean["avg_jct_s"] == 120.0
    assert fifo.spread["avg_jct_s"] == pytest.approx(statistics.stdev([100.0, 140.0]))
    assert (sjf.mean["avg_jct_s"], sjf.spread["avg_jct_s"]) == (50.0, 0.0)


def test_a_grid_with_an_unknown_workload_option_names_it() -> None:
    grid = Grid(cases=[(TRACE, CLUSTER)], profiles=["fifo"], workloads=[{"elastic": 0.5}])

    with pytest.raises(SweepError, match=r"unknown workload options \['elastic'\]"):
        grid.points()


def test_a_grid_with_an_empty_axis_is_refused() -> None:
    with pytest.raises(SweepError, match="profiles axis is empty"):
        Grid(cases=[(TRACE, CLUSTER)], profiles=[]).points()


def test_the_sweep_command_prints_every_row_and_the_summary_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    add_sweep_arguments(parser)
    args = parser.parse_args(
        ["--case", TRACE, CLUSTER, "--profile", "fifo", "--seeds", "0", "1",
         "--vary", "elastic_fraction=0,0.5", "--max-jobs", "20", "--processes", "1", "--json"]
    )  # fmt: skip

    assert run_sweep(args) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["results"]) == 4
    assert {r["workload"]["elastic_fraction"] for r in payload["results"]} == {0, 0.5}
    assert [s["seeds"] for s in payload["summary"]] == [2, 2]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--seeds", "-1", "must be from 0 to 2147483647: -1"),
        ("--max-jobs", "-2", "must be 0 or more: -2"),
    ],
)
def test_the_sweep_command_refuses_an_option_out_of_range_naming_it(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    add_sweep_arguments(parser)

    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--case", TRACE, CLUSTER, "--profile", "fifo", option, value])

    assert exited.value.code == 2
    assert f"argument {option}: {says}" in capsys.readouterr().err
