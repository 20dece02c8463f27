"""Invariants of every run, for every shipped profile: conservation, once-only completion,
no job faster than its floor."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import pytest

from simulator.bounds import floor_s, floors_s
from simulator.core import SimOptions, Simulation
from simulator.deciders import EngineDecider, shipped_profiles
from simulator.metrics import TIMING_KEYS, SimulationResult
from simulator.perf import PerfOptions
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions, make_jobs
from tests.simulator.helpers import cluster, group

# Two kinds of node on two racks, 24 GPUs, under a synthetic load well above capacity.
SMALL = cluster(group(2, 8, "V100", rack_size=1), group(2, 4, "P100"))
SPEC = SyntheticSpec(
    jobs=60,
    arrivals_per_hour=40.0,
    gpu_mix={1: 0.5, 2: 0.2, 4: 0.2, 8: 0.1},
    median_duration_s=900.0,
    duration_sigma=1.0,
)
WORKLOAD = WorkloadOptions(elastic_fraction=0.5, ps_fraction=0.3)


def _run(name: str, mode: str, seed: int = 3) -> tuple[Simulation, SimulationResult]:
    jobs = make_jobs(generate(SPEC, seed=seed), WORKLOAD, seed=seed)
    sim = Simulation(
        jobs,
        SMALL,
        perf=PerfOptions.for_mode(mode),  # type: ignore[arg-type]
        options=SimOptions(check_snapshots=True, round_period_s=120.0),
        seed=seed,
    )
    return sim, sim.run(EngineDecider.named(name))


@functools.cache
def _shared_run(name: str, mode: str) -> tuple[Simulation, SimulationResult]:
    """`_run` at the default seed, once per session: several invariants read the same run."""
    return _run(name, mode)


def strip(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics without the wall-clock ones, which differ from run to run."""
    return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}


@pytest.mark.parametrize("name", sorted(shipped_profiles()))
@pytest.mark.parametrize("mode", ["measured", "ideal"])
def test_every_job_completes_once_and_gpus_are_conserved(name: str, mode: str) -> None:
    sim, result = _shared_run(name, mode)
    ids = [r.job_id for r in result.jobs]
    assert len(ids) == len(set(ids)) == SPEC.jobs
    statuses = {r.status for r in result.jobs}
    assert statuses <= {"completed", "rejected"}, statuses
    m = result.metrics
    assert m["jobs_completed"] + m["jobs_rejected"] == SPEC.jobs
    for record in result.jobs:
        if record.status == "completed":
            assert record.finish_s is not None
            assert record.first_start_s is not None
            assert record.submit_s <= record.first_start_s <= record.finish_s
            assert record.queue_s is not None
            assert record.queue_s >= -1e-6
        else:
            assert record.finish_s is None
            assert record.gpu_s == 0.0
    # GPU-seconds held never exceed what the cluster had, at any instant or in total.
    series = result.series
    assert all(b <= c for b, c in zip(series.busy_gpus, series.capacity_gpus, strict=True))
    assert 0.0 <= m["gpu_utilization"] <= 1.0
    held = sum(r.gpu_s for r in result.jobs)
    assert held == pytest.approx(m["busy_gpu_hours"] * 3600.0, rel=1e-9)
    assert held <= SMALL.training_gpus() * m["makespan_s"] + 1e-6
    assert m["cost_usd"] == pytest.approx(sum(r.cost_usd for r in result.jobs), rel=1e-9)
    assert not sim._owner, "GPUs still held after the run"


@pytest.mark.parametrize("name", sorted(shipped_profiles()))
@pytest.mark.parametrize("mode", ["measured", "ideal"])
def test_no_job_finishes_sooner_than_its_floor(name: str, mode: str) -> None:
    sim, result = _shared_run(name, mode)
    floors = floors_s(sim.model, sim.specs)
    completed = [r for r in result.jobs if r.status == "completed"]
    assert completed
    for record in completed:
        jct = record.jct_s
        assert jct is not None
        assert jct >= floors[record.index] * (1.0 - 1e-9), (record.job_id, jct)


def test_floor_is_met_by_a_rigid_job_alone_on_the_ideal_model() -> None:
    job = make_jobs(generate(SPEC, seed=5), WorkloadOptions(), seed=5)[0]
    sim = Simulation([job], SMALL, perf=PerfOptions.for_mode("ideal"), seed=5)
    [record] = sim.run(EngineDecider.named("fifo")).jobs
    assert floor_s(sim.model, job) == pytest.approx(job.duration_s, rel=1e-12)
    assert record.jct_s == pytest.approx(job.duration_s, rel=1e-9)


def test_an_elastic_job_floor_counts_its_largest_size() -> None:
    rigid = make_jobs(generate(SPEC, seed=5), WorkloadOptions(), seed=5)[0]
    elastic = replace(rigid, workers=1, min_workers=1, max_workers=4, gpus_per_worker=1)
    sim = Simulation([elastic], SMALL, perf=PerfOptions.for_mode("ideal"), seed=5)
    # Ideal speed is proportional to workers, 1 at the requested count: four times as fast.
    assert floor_s(sim.model, elastic) == pytest.approx(elastic.duration_s / 4, rel=1e-12)


@pytest.mark.parametrize("name", ["fifo", "srtf", "tiresias"])
def test_ideal_rigid_job_uses_exactly_its_recorded_gpu_seconds(name: str) -> None:
    jobs = make_jobs(generate(SPEC, seed=5), WorkloadOptions(), seed=5)
    sim = Simulation(jobs, SMALL, perf=PerfOptions.for_mode("ideal"), seed=5)
    result = sim.run(EngineDecider.named(name))
    for spec, record in zip(jobs, result.jobs, strict=True):
        assert record.status == "completed"
        # No restart cost, no slowdown: preempted or not, a job holds workers x duration.
        assert record.gpu_s == pytest.approx(spec.workers * spec.duration_s, rel=1e-9)
        assert record.run_s == pytest.approx(spec.duration_s, rel=1e-9)


def test_same_seed_same_metrics_and_records() -> None:
    _, first = _run("tiresias", "measured", seed=11)
    _, second = _run("tiresias", "measured", seed=11)
    assert strip(first.metrics) == strip(second.metrics)
    assert [r.row() for r in first.jobs] == [r.row() for r in second.jobs]
    assert first.series == second.series
    _, other = _run("tiresias", "measured", seed=12)
    assert strip(other.metrics) != strip(first.metrics)


def test_reset_replays_the_same_run() -> None:
    jobs = make_jobs(generate(SPEC, seed=2), WORKLOAD, seed=2)
    sim = Simulation(jobs, SMALL, seed=2)
    decider = EngineDecider.named("optimus")
    first = sim.run(decider)
    second = sim.run(decider)  # run() starts over from reset()
    assert [r.row() for r in first.jobs] == [r.row() for r in second.jobs]
