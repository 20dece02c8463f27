"""The benchmark scripts' own arithmetic: growth fits, target verdicts, memory sampling.

Light checks only; the benchmarks themselves are run by `make bench-engine`,
`make bench-growth` and `make bench-memory`, not by the test suite.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence import bench_placement_paths
from evidence.bench import histogram_quantile
from evidence.bench_engine import (
    Cell,
    format_row,
    fresh_snapshot,
    measure,
    parse_args,
    target_status,
    time_on_fresh_ms,
)
from evidence.bench_growth import (
    fit_exponent,
    growth_layout,
    parse_sizes,
    snapshot_bytes,
    timed_samples_ms,
)
from evidence.bench_instructions import (
    child_command,
    collected,
    first_thread,
    objects,
    per_decision,
)
from evidence.bench_instructions import main as count_instructions
from evidence.bench_memory import rss_bytes, sample_points
from evidence.generate_examples import WIDE_RANGES, wide_jobs_with_servers, widen_waiting_jobs
from evidence.runner import EXAMPLES, interpreter, over_seeds, percentile
from policies.model import Snapshot, convert, decode_snapshot, snapshot_problems


@pytest.mark.parametrize("exponent", [0.5, 1.0, 1.37, 2.0])
def test_fit_exponent_recovers_the_power_of_a_power_law(exponent: float) -> None:
    jobs = [50.0, 312.0, 1250.0, 5000.0, 20000.0]
    seconds = [2e-5 * x**exponent for x in jobs]
    assert fit_exponent(jobs, seconds) == pytest.approx(exponent, abs=1e-9)


def test_fit_exponent_averages_out_multiplicative_noise() -> None:
    jobs = [50.0, 312.0, 1250.0, 5000.0, 20000.0]
    noise = [1.1, 0.9, 1.05, 0.95, 1.0]  # ±10 %, as on a shared machine
    seconds = [3e-4 * x**1.5 * n for x, n in zip(jobs, noise, strict=True)]
    assert fit_exponent(jobs, seconds) == pytest.approx(1.5, abs=0.05)


def test_fit_exponent_needs_two_sizes() -> None:
    assert math.isnan(fit_exponent([100.0], [1.0]))
    assert math.isnan(fit_exponent([100.0, 100.0], [1.0, 2.0]))


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)


def test_the_interpreter_is_named_with_how_its_core_is_linked(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.write_text(
        "55d0c000-55d0c001 r--p 00000000 08:01 11 /opt/py/bin/python3.11\n"
        "7f00c000-7f00c001 r-xp 00000000 08:01 12 /opt/py/lib/libpython3.11.so.1.0\n"
        "7ffd0000-7ffd0001 rw-p 00000000 00:00 0 [stack]\n",
        encoding="utf-8",
    )
    linked_in = tmp_path / "linked-in"
    linked_in.write_text(
        "55d0c000-55d0c001 r--p 00000000 08:01 11 /usr/bin/python3.11\n"
        "7f00c000-7f00c001 r-xp 00000000 08:01 13 /usr/lib/libm.so.6\n",
        encoding="utf-8",
    )
    assert interpreter(shared).endswith(", libpython shared")
    assert interpreter(linked_in).endswith(", libpython in the executable")
    # Where the process's mappings cannot be read, the version alone.
    assert "libpython" not in interpreter(tmp_path / "absent")
    assert interpreter(tmp_path / "absent").startswith("CPython 3.")


def _cell(profile: str, snapshot: str, *rounds: list[float]) -> Cell:
    return Cell(
        profile=profile,
        snapshot=snapshot,
        run_ms=[list(r) for r in rounds],
        encode_ms=[0.5, 0.5],
        decode_ms=[2.0, 2.0],
        check_ms=[1.0, 1.0],
    )


def test_format_row_marks_a_target_met_at_the_limit() -> None:
    row = format_row(_cell("fifo", "large", [8.0, 9.0, 10.0, 11.0, 12.0]))
    columns = [c.strip() for c in row.strip("|").split("|")]
    assert columns[:6] == ["fifo", "large", "5", "10.00", "11.60", "8.00"]
    # Decode, check, encode, and their total with the decision's 10 ms.
    assert columns[-6:] == ["2.00", "1.00", "0.50", "13.50", "≤ 10 ms", "met"]


def test_format_row_marks_a_target_not_met() -> None:
    row = format_row(_cell("oasis", "large", [49.0, 52.0, 51.0, 60.0, 70.0]))
    assert row.endswith("| ≤ 50 ms | not met |")


def test_format_row_leaves_rows_without_a_target_unmarked() -> None:
    assert format_row(_cell("fifo", "small", [1.0] * 5)).endswith("| — | — |")
    assert format_row(_cell("spread", "large", [1.0] * 5)).endswith("| — | — |")


def test_repeated_rounds_report_the_median_of_their_p50s() -> None:
    cell = _cell("dl2", "large", [20.0] * 5, [30.0] * 5, [24.0] * 5)
    assert cell.p50_ms == pytest.approx(24.0)
    assert cell.min_ms == pytest.approx(20.0)
    assert target_status("dl2", "large", cell.p50_ms) == ("≤ 25 ms", "met")
    assert "20.00–30.00 (3 rounds)" in format_row(cell)


def test_growth_layout_has_the_asked_nodes_and_jobs() -> None:
    for nodes, jobs in parse_sizes("16:50,64:312,4096:20000"):
        layout = growth_layout(nodes, jobs)
        assert sum(rack.nodes for rack in layout.racks) == nodes
        assert layout.jobs == jobs
        assert {rack.kind.gpus for rack in layout.racks} == {8}
        assert sum(rack.inference_nodes for rack in layout.racks) == max(1, nodes // 32)


def test_the_smallest_growth_snapshot_decodes() -> None:
    snapshot = decode_snapshot(snapshot_bytes(16, 50, seed=1, cache_dir=None))
    assert len(snapshot.nodes) == 16
    assert len(snapshot.jobs) == 50


def test_memory_is_sampled_after_the_first_hundred_and_at_the_end() -> None:
    assert sample_points(200, 50) == [1, 50, 100, 150, 200]
    assert sample_points(10_000, 5_000) == [1, 100, 5_000, 10_000]
    assert sample_points(30, 1_000) == [1, 30]
    assert rss_bytes(os.getpid()) > 1 << 20


def test_histogram_quantile_is_the_bucket_bound_of_what_was_added() -> None:
    before = {0.01: 5.0, 0.03: 5.0, 0.05: 5.0, math.inf: 5.0}
    # 100 more decisions: 90 under 10 ms, 9 between 10 and 30 ms, 1 between 30 and 50 ms.
    after = {0.01: 95.0, 0.03: 104.0, 0.05: 105.0, math.inf: 105.0}
    assert histogram_quantile(before, after, 0.50) == 0.01
    assert histogram_quantile(before, after, 0.99) == 0.03
    assert histogram_quantile(before, after, 1.0) == 0.05
    assert histogram_quantile(after, after, 0.5) is None


def test_a_difference_over_seeds_is_called_only_beyond_its_spread() -> None:
    assert over_seeds([-10.0, -12.0, -8.0]) == (-1, -10.0, 2.0)
    assert over_seeds([10.0, 12.0, 8.0])[0] == 1
    assert over_seeds([-3.0, 1.0, 0.5])[0] == 0  # mean -0.5, spread 2.1: a tie
    assert over_seeds([-5.0, -5.0, -5.0])[0] == -1  # no spread at all: called
    assert over_seeds([-5.0])[0] == 0  # one seed has no spread to judge by


def test_widened_snapshots_give_every_nth_waiting_job_a_wide_accepted_range() -> None:
    data = json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))
    waiting = [j["id"] for j in data["jobs"] if j.get("state", "pending") == "pending"]
    wide = convert(widen_waiting_jobs(data, 3), Snapshot)
    by_id = {j.id: j for j in wide.jobs}
    widened = [i for i in waiting if by_id[i].hi - by_id[i].lo > 100]
    assert widened == waiting[::3]
    assert {(by_id[i].lo, by_id[i].hi, by_id[i].worker_step) for i in widened} == set(WIDE_RANGES)
    assert all(by_id[i].accepts_workers(by_id[i].workers) for i in widened)
    assert snapshot_problems(wide) == []
    assert data == json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))


def test_wide_jobs_with_servers_accept_thousands_of_counts_and_place_a_few_servers() -> None:
    data = json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))
    waiting = [j["id"] for j in data["jobs"] if j.get("state", "pending") == "pending"]
    changed = convert(wide_jobs_with_servers(data, 4), Snapshot)
    by_id = {j.id: j for j in changed.jobs}
    wide = [i for i in waiting if by_id[i].hi == 4096]
    assert wide == waiting[::4]
    for job_id in wide:
        job = by_id[job_id]
        assert (job.lo, job.workers, job.ps, job.max_ps, job.ps_cpus) == (1, 1, 2, 4, 1.0)
        assert len(job.allowed_worker_counts()) == 4096
    assert snapshot_problems(changed) == []
    assert data == json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))


def test_the_engine_benchmark_times_each_snapshot_and_its_variants() -> None:
    cells = measure(
        ["fifo"],
        [EXAMPLES / "small.json"],
        iterations=5,
        warmup=0,
        repeat=1,
        seed=0,
        widen=3,
        wide_servers=3,
    )
    assert sorted(c.snapshot for c in cells) == ["small", "small-wide", "small-wide-servers"]
    assert all(len(c.run_ms[0]) == 5 and min(c.run_ms[0]) > 0 for c in cells)


@pytest.mark.parametrize("option", ["--widen", "--wide-servers"])
def test_the_engine_benchmark_refuses_a_variant_of_every_zeroth_job(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args([option, "0"])
    assert f"{option} must be at least 1" in capsys.readouterr().err


def test_instruction_counts_are_read_from_callgrinds_summary() -> None:
    output = (
        "==41== Events    : Ir\n==41== Collected : 6688536998\n==41==\n==41== I   refs: 6,688\n"
    )
    assert collected(output) == 6_688_536_998
    with pytest.raises(RuntimeError, match="no single instruction count"):
        collected("==41== I   refs: 6,688\n")


def test_a_decisions_instructions_are_the_difference_of_two_runs_over_their_decisions() -> None:
    assert per_decision(7_000_000_000, 7_980_000_000, 10) == 98_000_000
    with pytest.raises(ValueError, match="1 or more"):
        per_decision(1, 2, 0)


def test_each_count_runs_one_child_under_callgrind_with_its_checkout() -> None:
    command = child_command(None, "tiresias", EXAMPLES / "large.json", 10)
    assert command[:3] == ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    assert command[-4:] == ["--child", "tiresias", str(EXAMPLES / "large.json"), "10"]
    other = child_command(EXAMPLES.parent, "fifo", EXAMPLES / "small.json", 0)
    assert other[-2:] == ["--checkout", str(EXAMPLES.parent)]


def test_each_timed_decision_gets_a_snapshot_made_for_it_before_the_clock_starts() -> None:
    # A snapshot keeps the lookups a decision builds on it: timing decisions on one
    # snapshot would skip work that every request's decision does.
    made: list[object] = []
    given: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    samples = time_on_fresh_ms(given.append, make, 4)
    assert len(samples) == 4
    assert given == made
    assert len({id(x) for x in given}) == 4
    growth_given: list[object] = []
    made.clear()
    assert len(timed_samples_ms(growth_given.append, 3, 60.0, make)) == 3
    assert growth_given == made


def test_a_fresh_snapshot_is_decoded_and_checked_as_the_service_has_it() -> None:
    raw = (EXAMPLES / "small.json").read_bytes()
    first, second = fresh_snapshot(raw), fresh_snapshot(raw)
    assert first == second
    assert first is not second
    assert first.jobs[0] is not second.jobs[0]
    # Checked: what the service's check leaves on a snapshot (its nodes by id, its jobs'
    # positions) is there, and nothing that a decision builds.
    assert set(first.__dict__) == {"nodes_by_id", "job_positions"}


def test_both_children_of_a_pair_prepare_as_many_snapshots() -> None:
    # The pair's difference is then the decisions alone, not their snapshots' decoding.
    for n in (0, 10):
        command = child_command(None, "fifo", EXAMPLES / "small.json", n, prepared=10)
        at = command.index("--prepared")
        assert command[at + 1] == "10"
        assert command[-4:] == ["--child", "fifo", str(EXAMPLES / "small.json"), str(n)]


def test_a_child_asked_for_its_profile_writes_it_where_it_is_told(tmp_path: Path) -> None:
    command = child_command(None, "oasis", EXAMPLES / "large.json", 3, tmp_path / "cg.3")
    assert command[2] == f"--callgrind-out-file={tmp_path / 'cg.3'}"


def test_a_request_through_the_app_is_counted_on_the_thread_that_sends_it(
    tmp_path: Path,
) -> None:
    command = child_command(
        None, "fifo", EXAMPLES / "small.json", 5, tmp_path / "cg", through_app=True
    )
    assert "--separate-threads=yes" in command
    assert command[-1] == "--through-app"
    # One profile per thread: the first thread's total is the sender's.
    (tmp_path / "cg-01").write_text("events: Ir\nsummary: 4051000\n", encoding="utf-8")
    (tmp_path / "cg-02").write_text("events: Ir\nsummary: 999999999\n", encoding="utf-8")
    assert first_thread(tmp_path / "cg") == 4_051_000
    (tmp_path / "empty-01").write_text("events: Ir\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="no total"):
        first_thread(tmp_path / "empty")


def test_a_request_through_the_app_is_answered_by_the_child() -> None:
    # The child's own run, without callgrind: a few requests, each answered 200 (it
    # raises otherwise), and the process ends at once, not through the shutdown.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evidence.bench_instructions",
            "--child",
            "fifo",
            str(EXAMPLES / "small.json"),
            "2",
            "--through-app",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_own_instructions_are_summed_per_shared_object() -> None:
    # callgrind's format: `ob=` and `cob=` name an object once, then by number; the cost
    # line after `calls=` is the callee's inclusive cost, not the caller's own.
    profile = """events: Ir
summary: 1000
ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) _PyEval_EvalFrameDefault
12 600
+2 100
cob=(2) /usr/lib/libc.so.6
cfn=(2) memcpy
calls=4 0
13 250
ob=(2)
fl=(2) memmove.S
fn=(2)
0 250
0
ob=(1)
fn=(1)
20 50
totals: 1000
"""
    found = objects(profile)
    assert found == {"libpython3.11.so.1.0": 750, "libc.so.6": 250}
    assert sum(found.values()) == 1000


def test_the_instruction_count_refuses_no_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        count_instructions(["--decisions", "0"])
    assert "--decisions: must be 1 or more" in capsys.readouterr().err


@pytest.mark.parametrize("busy", [True, False])
def test_the_placement_paths_benchmark_times_both_forms_on_the_same_picks(busy: bool) -> None:
    # It stops on a difference of the two forms' picks; here each worker count it times
    # fits, and both forms took some time.
    rows = bench_placement_paths.measure(16, number=2, repeat=1, busy=busy)
    assert rows
    for row in rows:
        assert 1 <= row.candidates <= 16
        assert 1 <= row.workers <= row.room
        assert row.arrays_us > 0
        assert row.list_us > 0
    assert rows[-1].workers == rows[-1].room  # the last asks for every worker that fits
