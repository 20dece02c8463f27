"""The inference pool: demand in every snapshot, loaning idle servers, reclaiming them."""

from __future__ import annotations

from policies.model import Pool
from simulator.cluster import load_cluster
from simulator.core import SimOptions, Simulation
from simulator.deciders import EngineDecider
from simulator.inference import InferenceDemand, InferenceOptions, load_series
from simulator.paths import clusters_dir
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import make_jobs

LOANING = load_cluster(clusters_dir() / "philly-loaning.json")


def test_demand_is_scaled_to_the_pool_and_follows_the_day() -> None:
    demand = InferenceDemand(load_series(), 24, 8, InferenceOptions())
    needed = [demand.servers_needed(t * 3600.0) for t in range(24 * 7)]
    assert max(needed) <= 24
    assert min(needed) == 0
    assert len(set(needed)) > 3  # it varies over the day
    nxt = demand.next_change(0.0)
    assert nxt is not None
    assert demand.servers_needed(nxt) != demand.servers_needed(0.0)
    assert len(demand.forecast(0.0)) == 12


def _run(loan: bool) -> tuple[Simulation, list[int], list[int]]:
    rows = generate(
        SyntheticSpec(jobs=150, arrivals_per_hour=60, gpu_mix={8: 1}, median_duration_s=4 * 3600.0),
        seed=1,
    )
    sim = Simulation(
        make_jobs(rows),
        LOANING,
        options=SimOptions(check_snapshots=True, round_period_s=600.0),
        inference=InferenceOptions(loan_idle=loan),
    )
    needed: list[int] = []
    loaned: list[int] = []
    decider = EngineDecider.named("fifo-backfill")
    snapshot = sim.reset()
    while snapshot is not None:
        needed.append(snapshot.inference.servers_needed)
        loaned.append(sum(1 for n in snapshot.nodes if n.loaned))
        pool = [n for n in snapshot.nodes if n.pool is Pool.INFERENCE]
        assert len(pool) == 24
        # Loaned servers never exceed what inference does not need.
        assert loaned[-1] <= 24 - snapshot.inference.servers_needed or not loan
        snapshot, _ = sim.step(decider(snapshot, sim.round_seed(), "x"))
    return sim, needed, loaned


def test_loaning_lends_idle_servers_and_reclaims_them() -> None:
    sim, needed, loaned = _run(loan=True)
    result = sim.result()
    assert max(loaned) > 0
    assert len(set(needed)) > 1
    assert result.metrics["jobs_completed"] == 150
    # FIFO never preempts: every preemption is a reclaim of a loaned server in use.
    assert result.metrics["preemptions"] > 0
    # Capacity open to training varied with the loans.
    assert len(set(result.series.capacity_gpus)) > 1
    assert max(result.series.capacity_gpus) > LOANING.training_gpus()


def test_without_loaning_training_never_touches_the_pool() -> None:
    sim, needed, loaned = _run(loan=False)
    assert max(loaned) == 0
    assert len(set(needed)) > 1
    assert set(sim.result().series.capacity_gpus) == {LOANING.training_gpus()}
