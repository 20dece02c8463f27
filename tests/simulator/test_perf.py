"""The performance model: calibration to the trace, derived constants, locality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from policies.model import Assignment
from simulator.core import Simulation
from simulator.deciders import EngineDecider
from simulator.paths import perf_dir
from simulator.perf import (
    FAMILY_SOURCES,
    GENERIC,
    JobShape,
    PerfOptions,
    bind_cluster,
    load_perf_tables,
    machine_factors,
)
from simulator.runner import RunConfig, build_simulation
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions, make_jobs
from tests.simulator.helpers import cluster, group, profile, run, trace

NO_VARIATION = PerfOptions(machine_variation=False)


@pytest.mark.parametrize("family", [*FAMILY_SOURCES, GENERIC])
@pytest.mark.parametrize("gpus", [1, 3, 8, 16, 24])
def test_job_alone_finishes_in_its_recorded_duration(family: str, gpus: int) -> None:
    # Measured model (every effect on but machine variation, which is per node and
    # checked below); requested GPUs placed packed by the consolidated policy.
    spec = cluster(group(4, 8, "V100"), name="venus-like")
    rows = trace(("solo", 500, gpus, 12_345))
    result = run(rows, spec, EngineDecider(profile()), perf=NO_VARIATION, model_mix=family)
    record = result.jobs[0]
    assert record.first_start_s == 500
    assert record.finish_s == pytest.approx(500 + 12_345, rel=1e-12)


def test_machine_variation_scales_a_solo_job_by_its_node_speed() -> None:
    spec = cluster(group(4, 8, "V100"))
    jobs = make_jobs(trace(("solo", 0, 2, 1000)), WorkloadOptions(model_mix="lm"))
    sim = Simulation(jobs, spec, seed=7)
    result = sim.run(EngineDecider(profile()))
    node = next(iter(sim.model.node_factor))  # best fit on an empty cluster: the first node
    assert result.jobs[0].finish_s == pytest.approx(1000 / sim.model.node_factor[node])
    factors = list(sim.model.node_factor.values())
    assert len(set(factors)) == len(factors)
    assert all(0.5 < f < 2 for f in factors)


def test_a_run_config_can_have_one_effect_turned_off() -> None:
    # What an experiment that asks "is it the machines?" runs: the measured model, its
    # machine variation off, every other effect as configured.
    spec = cluster(group(4, 8, "V100"))
    jobs = make_jobs(trace(("solo", 0, 2, 1000)), WorkloadOptions(model_mix="lm"))
    config = RunConfig(seed=7)
    varied = build_simulation(jobs, spec, config).model
    alike = build_simulation(jobs, spec, config, perf=NO_VARIATION).model
    assert len(set(varied.node_factor.values())) == len(varied.node_factor)
    assert set(alike.node_factor.values()) == {1.0}
    assert alike.options.locality
    assert alike.options.restarts


def test_rack_share_zero_keeps_the_independent_factors() -> None:
    nodes = cluster(group(12, 4, "V100", rack_size=4)).build_nodes()
    sigma = math.sqrt(math.log1p(0.1**2))
    draws = np.random.default_rng([3, 0x5EED]).standard_normal(len(nodes))
    expected = {n.id: math.exp(sigma * float(z)) for n, z in zip(nodes, draws, strict=True)}
    assert machine_factors(nodes, 0.1, 0.0, 3) == expected


def test_rack_shared_factors_keep_the_spread_and_correlate_within_a_rack() -> None:
    # 400 racks of 2 nodes: the log factors' variance is the measured one, and two
    # nodes of one rack covary by the shared part of it.
    nodes = cluster(group(800, 4, "V100", rack_size=2)).build_nodes()
    cov, share = 0.1, 0.6
    logs = np.log([machine_factors(nodes, cov, share, 11)[n.id] for n in nodes])
    sigma2 = math.log1p(cov**2)
    assert logs.var() == pytest.approx(sigma2, rel=0.15)
    pairs = logs.reshape(-1, 2)
    within = float(np.mean((pairs[:, 0] - pairs[:, 0].mean()) * (pairs[:, 1] - pairs[:, 1].mean())))
    assert within / sigma2 == pytest.approx(share, abs=0.15)
    assert machine_factors(nodes, cov, share, 11) == machine_factors(nodes, cov, share, 11)
    assert machine_factors(nodes, cov, share, 11) != machine_factors(nodes, cov, share, 12)


def test_rack_share_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="machine_rack_share"):
        PerfOptions(machine_rack_share=1.5)


def test_derived_constants_follow_the_shared_tables() -> None:
    tables = load_perf_tables()
    restart = json.loads((perf_dir() / "restart_overheads.json").read_text())
    for name, (source, _) in FAMILY_SOURCES.items():
        family = tables.family(name)
        assert 0.5 <= family.doubling_efficiency <= 1.0
        assert 0.0 < family.spread_factor <= 1.0
        assert family.gpu_speed["V100"] == 1.0
        if source == "gavel":
            # Gavel measured K80 < P100 < V100 for every multi-GPU job type.
            assert family.gpu_speed["K80"] < family.gpu_speed["P100"] < 1.0
    assert tables.family("bert").restart_s == restart["sia_per_model"]["bert"]
    assert tables.family("resnet50").restart_s == restart["sia_per_model"]["imagenet"]
    assert tables.family("lm").restart_s == restart["sia_per_model"]["default"]
    assert tables.family(GENERIC).restart_s == restart["pollux_all_models"]
    # Locality: Gavel's LM is the most communication-bound job type it measured.
    assert tables.family("lm").spread_factor < 0.6
    assert 0.0 < tables.machine_cov < 0.5
    assert 0.3 < tables.colocation_median < 1.0
    ratios = [r for r, _ in tables.ps_efficiency]
    efficiencies = [e for _, e in tables.ps_efficiency]
    assert ratios == sorted(ratios)
    assert efficiencies == sorted(efficiencies)
    assert efficiencies[-1] <= 1.0


def test_rates_are_relative_to_the_packed_request() -> None:
    spec = cluster(group(4, 8, "V100"), group(4, 8, "K80"))
    nodes = spec.build_nodes()
    tables = load_perf_tables()
    model = bind_cluster(tables, NO_VARIATION, nodes, spec.reference_gpu_type(), seed=0)
    shape = JobShape(family="lm", gpus_per_worker=1, workers=4)
    v100, k80 = nodes[0].id, nodes[4].id
    packed = (Assignment(node_id=v100, gpu_indices=(0, 1, 2, 3)),)
    assert model.rate(shape, packed, 0) == pytest.approx(1.0)
    spread = tuple(Assignment(node_id=n.id, gpu_indices=(0,)) for n in nodes[:4])
    assert model.rate(shape, spread, 0) == pytest.approx(tables.family("lm").spread_factor)
    on_k80 = (Assignment(node_id=k80, gpu_indices=(0, 1, 2, 3)),)
    lm = tables.family("lm")
    assert model.rate(shape, on_k80, 0) == pytest.approx(lm.gpu_speed["K80"])
    half = (Assignment(node_id=v100, gpu_indices=(0, 1)),)
    assert model.rate(shape, half, 0) == pytest.approx(lm.speedup(2) / lm.speedup(4))
    ideal = bind_cluster(tables, PerfOptions.for_mode("ideal"), nodes, "V100", seed=0)
    assert ideal.rate(shape, on_k80, 0) == 1.0
    assert ideal.rate(shape, half, 0) == 0.5  # ideal: linear in workers
    assert ideal.rate(shape, spread, 0) == 1.0
    assert ideal.restart_s("lm") == 0.0


def test_speedup_curve_is_sublinear_and_increasing() -> None:
    lm = load_perf_tables().family("lm")
    values = [lm.speedup(n) for n in (1, 2, 4, 8, 16, 64)]
    assert values == sorted(values)
    assert values[0] == 1.0
    assert all(v <= n for v, n in zip(values, (1, 2, 4, 8, 16, 64), strict=False))
    assert lm.speedup(2) == pytest.approx(2 * lm.doubling_efficiency)
    assert math.isclose(lm.locality(8, 8), 1.0)
    assert lm.locality(8, 1) == pytest.approx(lm.spread_factor)


def test_consolidated_beats_spread_for_a_locality_sensitive_family() -> None:
    # 4-GPU jobs on 4-GPU nodes: consolidated keeps each on one node, spread deals one
    # GPU per node. Gavel's LM loses about half its speed when spread.
    spec = cluster(group(8, 4, "V100"))
    rows = generate(
        SyntheticSpec(jobs=40, arrivals_per_hour=20, gpu_mix={4: 1.0}, median_duration_s=1800),
        seed=1,
    )
    by_placement = {}
    for placement in ("consolidated", "spread"):
        decider = EngineDecider(profile("fifo", placement, backfill=True))
        result = run(rows, spec, decider, perf=PerfOptions(), model_mix="lm", seed=1)
        by_placement[placement] = result.metrics["avg_jct_s"]
    assert by_placement["consolidated"] < 0.9 * by_placement["spread"]
    # In the ideal model placement cannot matter.
    ideal = {
        placement: run(
            rows, spec, EngineDecider(profile("fifo", placement, backfill=True)), model_mix="lm"
        ).metrics["avg_jct_s"]
        for placement in ("consolidated", "spread")
    }
    assert ideal["consolidated"] == pytest.approx(ideal["spread"])
