"""`arbiter simulate` through `run_simulate` and `python -m simulator`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli import add_simulate_arguments, run_simulate
from simulator.metrics import METRIC_KEYS
from simulator.paths import clusters_dir, traces_dir

TRACE = str(traces_dir() / "helios_venus.1w-2020-06-01.csv")
CLUSTER = str(clusters_dir() / "helios_venus.json")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_simulate_arguments(parser)
    return parser.parse_args(list(argv))


def test_json_output_is_exactly_one_object_with_the_fixed_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = run_simulate(
        _args(
            "--trace",
            TRACE,
            "--cluster",
            CLUSTER,
            "--profile",
            "fifo",
            "--profile",
            "srtf",
            "--max-jobs",
            "40",
            "--seed",
            "3",
            "--json",
        )
    )
    out, err = capsys.readouterr()
    assert status == 0
    payload = json.loads(out)
    assert list(payload) == ["results"]
    assert [r["profile"] for r in payload["results"]] == ["fifo", "srtf"]
    for result in payload["results"]:
        assert set(METRIC_KEYS) <= set(result)
        assert result["jobs"] == 40
    assert out.count("\n") == 1
    assert err == ""


def test_out_dir_gets_report_plots_and_records(tmp_path: Path) -> None:
    out = tmp_path / "report"
    status = run_simulate(
        _args(
            "--trace",
            TRACE,
            "--cluster",
            CLUSTER,
            "--profile",
            "tiresias",
            "--max-jobs",
            "30",
            "--perf-model",
            "ideal",
            "--out",
            str(out),
            "--no-progress",
        )
    )
    assert status == 0
    names = {p.name for p in out.iterdir()}
    assert {"report.md", "metrics.json", "jct_cdf.png", "queue.png", "utilization.png"} <= names
    assert {"jobs-tiresias.csv", "series-tiresias.csv"} <= names
    lines = (out / "jobs-tiresias.csv").read_text().splitlines()
    assert len(lines) == 31
    assert lines[0].startswith("job_id,tenant,family")
    assert "| tiresias |" in (out / "report.md").read_text()
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_trace_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,x,5\n")
    status = run_simulate(_args("--trace", str(bad), "--cluster", CLUSTER, "--profile", "fifo"))
    assert status == 2
    assert f"{bad}, line 2, field 'num_gpus'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--max-jobs", "-3", "must be 0 or more: -3"),
        ("--seed", "-1", "must be from 0 to 2147483647: -1"),
        ("--seed", str(2**31), "must be from 0 to 2147483647: 2147483648"),
        ("--round-period", "nan", "not a finite number: 'nan'"),
        ("--round-period", "-5", "must be 0 or more: -5"),
        ("--inference-offset", "inf", "not a finite number: 'inf'"),
    ],
)
def test_an_option_out_of_range_is_refused_naming_it(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _args("--trace", TRACE, "--cluster", CLUSTER, "--profile", "fifo", option, value)

    assert exited.value.code == 2
    assert f"argument {option}: {says}" in capsys.readouterr().err


def test_an_estimate_error_that_is_not_a_number_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _args(
        "--trace", TRACE, "--cluster", CLUSTER, "--profile", "fifo", "--estimate-error", "nan"
    )

    assert run_simulate(args) == 2
    assert "estimate_error must be a finite number >= 0, not nan" in capsys.readouterr().err


def test_unknown_profile_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = run_simulate(_args("--trace", TRACE, "--cluster", CLUSTER, "--profile", "nope"))
    assert status == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err


def test_python_dash_m_simulator(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulator",
            "--trace",
            TRACE,
            "--cluster",
            CLUSTER,
            "--profile",
            "fifo",
            "--max-jobs",
            "10",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(done.stdout)["results"][0]["jobs_completed"] == 10


def test_loaning_and_utility_flags_reach_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    status = run_simulate(
        _args(
            "--trace",
            str(traces_dir() / "philly.2w-2017-10-02.csv"),
            "--cluster",
            str(clusters_dir() / "philly-loaning.json"),
            "--profile",
            "aryl",
            "--max-jobs",
            "30",
            "--elastic-fraction",
            "0.5",
            "--utility",
            "step",
            "--utility-value",
            "priority",
            "--loan-idle",
            "--json",
        )
    )
    out, _ = capsys.readouterr()
    assert status == 0
    (result,) = json.loads(out)["results"]
    assert result["utility"] > 0
    assert result["loaned_gpu_hours"] > 0  # idle inference servers were lent and used
    assert result["jobs_completed"] == 30
