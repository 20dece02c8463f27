"""Inputs: the common trace schema, cluster specs, the synthetic generator, workload filling."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from policies.model import StepUtility
from simulator.cluster import ClusterSpecError, load_cluster
from simulator.paths import clusters_dir, traces_dir
from simulator.synthetic import SyntheticSpec, generate
from simulator.traces import (
    TraceError,
    TraceJob,
    compress_arrivals,
    read_trace,
    trace_from_rows,
    write_trace,
)
from simulator.workload import WorkloadError, WorkloadOptions, make_jobs

HEADER = (
    "job_id,submit_time_s,num_gpus,duration_s,gpu_type,user,status,vc,num_nodes,"
    "num_cpus,memory_mib,gpu_milli,qos,submit_datetime\n"
)


def _write(tmp_path: Path, body: str, name: str = "t.csv", header: str = HEADER) -> Path:
    path = tmp_path / name
    path.write_text(header + body, encoding="utf-8")
    return path


def test_reads_every_shared_trace_header_and_first_rows() -> None:
    files = sorted(traces_dir().glob("*.csv")) + sorted(traces_dir().glob("*.csv.gz"))
    assert len(files) >= 8
    for path in files:
        jobs = read_trace(path, max_jobs=50)
        assert len(jobs) == 50
        assert all(j.num_gpus >= 1 and j.duration_s > 0 for j in jobs)
        submits = [j.submit_time_s for j in jobs]
        assert submits == sorted(submits)


def test_gzip_and_plain_give_the_same_jobs(tmp_path: Path) -> None:
    rows = "a,0,1,10,,u1,completed,,,,,,,\nb,0,2,20.5,,u2,,vc,,,,500,,\n"
    plain = _write(tmp_path, rows)
    packed = tmp_path / "t.csv.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write(HEADER + rows)
    assert read_trace(plain) == read_trace(packed)
    first, second = read_trace(plain)
    assert (first.tenant, second.tenant, second.gpu_milli, second.duration_s) == (
        "u1",
        "u2",
        500,
        20.5,
    )
    assert (first.line, second.line) == (2, 3)


@pytest.mark.parametrize(
    ("body", "line", "field", "says"),
    [
        ("a,0,1,10,,,,,,,,,,\nb,5,two,10,,,,,,,,,,\n", 3, "num_gpus", "not a number"),
        ("a,0,1,10,,,,,,,,,,\nb,5,0,10,,,,,,,,,,\n", 3, "num_gpus", ">= 1"),
        ("a,0,1.5,10,,,,,,,,,,\n", 2, "num_gpus", "whole number"),
        ("a,0,1,0,,,,,,,,,,\n", 2, "duration_s", "> 0"),
        ("a,0,1,,,,,,,,,,,\n", 2, "duration_s", "required"),
        ("a,0,1,nan,,,,,,,,,,\n", 2, "duration_s", "not finite"),
        ("a,10,1,5,,,,,,,,,,\nb,3,1,5,,,,,,,,,,\n", 3, "submit_time_s", "sorted"),
        ("a,0,1,5,,,,,,,,,,\na,1,1,5,,,,,,,,,,\n", 3, "job_id", "twice"),
        (",0,1,5,,,,,,,,,,\n", 2, "job_id", "required"),
        ("a,0,1,5,,,,,,,,2000,,\n", 2, "gpu_milli", "exceeds 1000"),
        ("a,0,1,5,,,,,,,,,,,extra\n", 2, "row", "more cells"),
    ],
)
def test_bad_rows_name_file_line_and_field(
    tmp_path: Path, body: str, line: int, field: str, says: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    error = caught.value
    assert (error.line, error.field) == (line, field)
    assert str(path) in str(error)
    assert f"line {line}" in str(error)
    assert says in str(error)


@pytest.mark.parametrize("packed", [False, True])
def test_a_trace_that_is_not_utf8_names_the_line_of_the_first_bad_byte(
    tmp_path: Path, packed: bool
) -> None:
    # Past the text reader's first block, so its own line count would be wrong.
    rows = "".join(f"j{i},{i},1,5,,,,,,,,,,\n" for i in range(2000)).encode()
    raw = HEADER.encode() + rows + b"caf\xe9,3000,1,5,,,,,,,,,,\n"
    path = tmp_path / ("t.csv.gz" if packed else "t.csv")
    path.write_bytes(gzip.compress(raw) if packed else raw)

    with pytest.raises(TraceError) as caught:
        read_trace(path)

    assert caught.value.line == 2002
    assert caught.value.field is None
    assert str(caught.value) == f"{path}, line 2002: not UTF-8 text (byte 0xe9)"


def test_bad_header_is_reported_on_line_one(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="line 1, field 'duration_s'"):
        read_trace(_write(tmp_path, "a,0,1\n", header="job_id,submit_time_s,num_gpus\n"))
    with pytest.raises(TraceError, match="field 'colour': unknown column"):
        read_trace(
            _write(
                tmp_path,
                "a,0,1,5,red\n",
                header="job_id,submit_time_s,num_gpus,duration_s,colour\n",
            )
        )


def test_max_jobs_keeps_the_first_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, "a,0,1,5,,,,,,,,,,\nb,0,1,5,,,,,,,,,,\nc,1,1,5,,,,,,,,,,\n")
    assert [j.job_id for j in read_trace(path, max_jobs=2)] == ["a", "b"]


def test_synthetic_trace_round_trips_and_is_seeded(tmp_path: Path) -> None:
    spec = SyntheticSpec(jobs=500, arrivals_per_hour=60, gpu_mix={1: 3, 4: 1})
    jobs = generate(spec, seed=4)
    assert jobs == generate(spec, seed=4)
    assert jobs != generate(spec, seed=5)
    span_h = jobs[-1].submit_time_s / 3600
    assert 500 / span_h == pytest.approx(60, rel=0.15)  # Poisson: rate within noise
    assert {j.num_gpus for j in jobs} == {1, 4}
    path = tmp_path / "syn.csv.gz"
    write_trace(jobs, path)
    back = read_trace(path)
    assert [(j.job_id, j.submit_time_s, j.num_gpus, j.duration_s, j.user) for j in back] == [
        (j.job_id, j.submit_time_s, j.num_gpus, j.duration_s, j.user) for j in jobs
    ]


def test_every_shared_cluster_spec_builds_unique_nodes() -> None:
    specs = sorted(clusters_dir().glob("*.json"))
    assert len(specs) >= 8
    for path in specs:
        spec = load_cluster(path)
        nodes = spec.build_nodes()
        assert len({n.id for n in nodes}) == len(nodes) == sum(g.count for g in spec.node_groups)
        assert nodes == spec.build_nodes()  # deterministic
    philly = load_cluster(clusters_dir() / "philly.json")
    nodes = philly.build_nodes()
    assert nodes[0].id == "g0-p40-0000"
    assert nodes[0].topology.rack == "g0-r000"
    assert nodes[16].topology.rack == "g0-r001"
    assert nodes[60].id == "g1-p100-0000"
    assert nodes[60].topology.rack == "g1-r000"
    assert philly.reference_gpu_type() == "P40"
    assert philly.training_gpus() == 640


def test_bad_cluster_spec_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"name": "x", "node_groups": [{"count": 0}]}')
    with pytest.raises(ClusterSpecError, match=r"node_groups\.0\.count"):
        load_cluster(path)


@pytest.mark.parametrize("trace", ["philly", "alibaba_openb", "helios_venus", "itp"])
def test_a_traces_own_cluster_description_is_refused_naming_the_spec_to_pass(
    trace: str,
) -> None:
    description = traces_dir() / f"{trace}.cluster.json"
    with pytest.raises(ClusterSpecError) as refused:
        load_cluster(description)
    message = str(refused.value)
    assert "not a cluster to simulate" in message
    suggested = f"shared/clusters/{trace}.json"
    assert suggested in message
    assert (clusters_dir() / f"{trace}.json").is_file()  # the file it names exists


def test_trace_rows_given_inline_are_checked_like_a_files_rows() -> None:
    rows = [
        {"job_id": "a", "submit_time_s": 0, "num_gpus": 2, "duration_s": 60.5, "user": "u1"},
        {"job_id": "b", "submit_time_s": 10, "num_gpus": 1, "duration_s": 30},
    ]
    jobs = trace_from_rows(rows)
    assert [(j.job_id, j.num_gpus, j.duration_s, j.tenant) for j in jobs] == [
        ("a", 2, 60.5, "u1"),
        ("b", 1, 30.0, "default"),
    ]
    with pytest.raises(TraceError, match=r"line 1, field 'submit_time_s'.*earlier"):
        trace_from_rows([rows[1], rows[0]])
    with pytest.raises(TraceError, match=r"field 'colour': unknown column"):
        trace_from_rows([{**rows[0], "colour": "red"}])
    with pytest.raises(TraceError, match=r"field 'duration_s': is missing"):
        trace_from_rows([{"job_id": "a", "submit_time_s": 0, "num_gpus": 1}])


def test_workload_fill_is_per_job_and_independent_of_the_window() -> None:
    rows = generate(SyntheticSpec(jobs=200), seed=0)
    options = WorkloadOptions(elastic_fraction=0.5, ps_fraction=0.5, estimate_error=0.3)
    full = make_jobs(rows, options, seed=9)
    window = make_jobs(rows[100:], options, seed=9)
    assert [(j.family, j.min_workers, j.ps, j.estimate_s) for j in full[100:]] == [
        (j.family, j.min_workers, j.ps, j.estimate_s) for j in window
    ]
    assert len({j.family for j in full}) > 5
    elastic = [j for j in full if j.min_workers < j.max_workers]
    assert 60 < len(elastic) < 140
    assert all(j.min_workers <= j.workers <= j.max_workers for j in full)
    rigid = make_jobs(rows, WorkloadOptions(model_mix="gavel"), seed=9)
    assert {j.family for j in rigid} <= {"resnet18", "resnet50", "transformer", "lm"}
    assert all(j.estimate_s == j.duration_s and j.ps == 0 for j in rigid)
    with pytest.raises(WorkloadError, match="model mix"):
        make_jobs(rows, WorkloadOptions(model_mix="gpt5"))


def test_step_utility_pays_its_value_until_twice_the_recorded_run_time() -> None:
    rows = generate(SyntheticSpec(jobs=20), seed=0)
    jobs = make_jobs(rows, WorkloadOptions(utility="step"), seed=0)
    for job in jobs:
        assert isinstance(job.utility, StepUtility)
        value = job.workers * job.duration_s / 3600.0
        assert job.utility.value == pytest.approx(value)
        assert job.utility.value_at(2 * job.duration_s) == pytest.approx(value)
        assert job.utility.value_at(2 * job.duration_s + 1) == 0.0


def test_priority_utility_values_are_seeded_per_job_and_independent_of_size() -> None:
    rows = generate(SyntheticSpec(jobs=300), seed=0)
    options = WorkloadOptions(utility="sigmoid", utility_value="priority")
    full = make_jobs(rows, options, seed=4)
    window = make_jobs(rows[150:], options, seed=4)
    values = [j.utility.value for j in full if j.utility is not None]
    assert [j.utility for j in full[150:]] == [j.utility for j in window]
    assert all(1.0 <= v <= 10.0 for v in values)
    assert len(set(values)) == len(values)
    other = [j.utility.value for j in make_jobs(rows, options, seed=5) if j.utility is not None]
    assert other != values
    # The time scale is the job's own: half its value at twice its recorded run time.
    job = full[0]
    assert job.utility is not None
    assert job.utility.value_at(2 * job.duration_s) == pytest.approx(job.utility.value / 2)
    with pytest.raises(WorkloadError, match="utility_value"):
        make_jobs(rows, WorkloadOptions(utility="sigmoid", utility_value="cost"))  # type: ignore[arg-type]


def test_compressed_arrivals_keep_order_durations_and_the_first_arrival() -> None:
    rows = [
        TraceJob(job_id=i, submit_time_s=t, num_gpus=1, duration_s=d)
        for i, t, d in [("a", 100.0, 50.0), ("b", 100.0, 10.0), ("c", 400.0, 5.0)]
    ]
    out = compress_arrivals(rows, 3.0)
    assert [(r.job_id, r.submit_time_s, r.duration_s) for r in out] == [
        ("a", 100.0, 50.0),
        ("b", 100.0, 10.0),
        ("c", 200.0, 5.0),
    ]
    assert compress_arrivals([], 2.0) == []
