"""The accelerator simulator: contention worked by hand, determinism, scenarios, and the
same results in process and over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.main import create_app
from app.settings import Settings
from policies.dispatch.model import DnnLayer, DnnModel, StyleCost
from simulator.accelerator.cli import simulate
from simulator.accelerator.costs import STYLES, CostTable, load_costs
from simulator.accelerator.dispatchers import HttpDispatcher, InProcessDispatcher
from simulator.accelerator.report import metrics
from simulator.accelerator.system import run_episode
from simulator.accelerator.workload import Arrival, Scenario, TenantSpec, arrivals, scenarios


def _one_layer(name: str, style: str, latency_s: float, bandwidth: float) -> DnnModel:
    cost = StyleCost(style=style, latency_s=latency_s, bandwidth_gbps=bandwidth, energy_j=0.5)
    return DnnModel(name=name, layers=(DnnLayer(costs=(cost,)),))


def test_contention_slows_every_running_layer_by_budget_over_demand() -> None:
    """Worked by hand. Budget 10 GB/s. A (0.1 s alone, 8 GB/s) on ws0 and B (0.05 s
    alone, 12 GB/s) on os0 both start at t=0: demand 20 > 10, so both run at 10/20 = half
    speed. B's 0.05 s of work ends at t=0.1, when A has done 0.05 s of its 0.1; alone, A
    asks 8 ≤ 10 and runs at full speed: it ends at t=0.15. Saturated for 0.1 s."""
    costs = CostTable(
        models={"A": _one_layer("A", "ws", 0.1, 8.0), "B": _one_layer("B", "os", 0.05, 12.0)}
    )
    scenario = Scenario(
        name="hand",
        description="hand-worked contention",
        load=1.0,
        tenants=(TenantSpec("t", 1.0, 1.0, models=("A", "B")),),
        accelerators=("ws", "os"),
        dram_gbps=10.0,
    )
    work = [
        Arrival(id="a", tenant="t", model="A", arrival=0.0, deadline=0.15),
        Arrival(id="b", tenant="t", model="B", arrival=0.0, deadline=0.09),
    ]
    result = run_episode(scenario, costs, work, InProcessDispatcher("edf"))
    finished = {r.id: r.finished for r in result.requests}
    assert finished["b"] == pytest.approx(0.1)
    assert finished["a"] == pytest.approx(0.15)
    assert result.saturated_s == pytest.approx(0.1)
    assert result.busy_s == pytest.approx({"ws0": 0.15, "os1": 0.1})
    assert {r.id: r.met for r in result.requests} == {"a": True, "b": False}
    assert metrics(result)["energy_per_request_mj"] == pytest.approx(500.0)


def test_arrivals_are_deterministic_for_a_seed_and_follow_the_scenario() -> None:
    costs = load_costs()
    scenario = scenarios()["medium-mixed"]
    first = arrivals(scenario, costs, 7)
    assert first == arrivals(scenario, costs, 7)
    assert first != arrivals(scenario, costs, 8)
    assert {a.tenant for a in first} == {t.id for t in scenario.tenants}
    factors = {t.id: t.deadline_factor for t in scenario.tenants}
    styles = frozenset(scenario.accelerators) & frozenset(STYLES)
    for a in first[:20]:
        isolated = costs.isolated_best_s(a.model, styles)
        assert a.deadline - a.arrival == pytest.approx(factors[a.tenant] * isolated)


def test_scenarios_run_from_light_to_heavy_and_homogeneous_to_mixed() -> None:
    table = scenarios()
    assert {"light-homogeneous", "heavy-homogeneous", "light-mixed", "heavy-mixed"} <= set(table)
    assert table["light-mixed"].load < table["medium-mixed"].load < table["heavy-mixed"].load
    small = {m for t in table["heavy-homogeneous"].tenants for m in t.models}
    mixed = {m for t in table["heavy-mixed"].tenants for m in t.models}
    assert small < mixed


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.mark.parametrize("profile", ["edf", "eft-greedy", "relmas"])
def test_in_process_and_http_simulation_agree(client: TestClient, profile: str) -> None:
    costs = load_costs()
    scenario = scenarios()["heavy-mixed"]
    work = arrivals(scenario, costs, 3)[:6]
    local = run_episode(scenario, costs, work, InProcessDispatcher(profile))
    remote = run_episode(scenario, costs, work, HttpDispatcher("", profile, client=client))
    assert local.rounds == remote.rounds > 0
    assert [(r.id, r.finished, r.energy_j) for r in local.requests] == [
        (r.id, r.finished, r.energy_j) for r in remote.requests
    ]
    assert local.busy_s == remote.busy_s


TIMING = {"decision_ms_p50", "decision_ms_p99", "sim_wall_s"}


def test_dispatch_simulate_via_http_gives_the_in_process_results(client: TestClient) -> None:
    def strip(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        return [
            {k: v for k, v in run.items() if k not in TIMING}
            for row in rows
            for run in row["runs"]  # type: ignore[attr-defined]
        ]

    local = simulate(["light-mixed"], ["prema", "llf"], [0, 1], max_requests=5)
    remote = simulate(
        ["light-mixed"],
        ["prema", "llf"],
        [0, 1],
        dispatcher_for=lambda name: HttpDispatcher("", name, client=client),
        max_requests=5,
    )
    assert strip(local) == strip(remote)
    assert len(strip(local)) == 4


def test_dispatch_simulate_prints_one_json_object_with_the_metrics(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "dispatch-simulate",
            "--scenario",
            "light-homogeneous",
            "--profile",
            "edf",
            "--json",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    (row,) = printed["results"]
    assert row["scenario"] == "light-homogeneous"
    assert row["profile"] == "edf"
    assert 0.0 <= row["sla_satisfaction"] <= 1.0
    assert set(row["sla_by_tenant"]) == {"interactive", "standard", "batch"}
    assert set(row["utilization"]) == {"ws0", "ws1", "os2", "rs3"}
    assert row["energy_per_request_mj"] > 0
    report = (tmp_path / "report.md").read_text()
    for plot in ("sla_over_load.png", "sla_by_tenant.png", "utilization.png"):
        assert (tmp_path / plot).stat().st_size > 0
        assert f"]({plot})" in report


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--seeds", "0"], "argument --seeds: must be 1 or more: 0"),
        (["--seed", "-5"], "argument --seed: must be from 0 to 2147483647: -5"),
        (["--seed", "2147483647", "--seeds", "2"], "runs past the largest seed, 2147483647"),
    ],
)
def test_dispatch_simulate_refuses_seeds_out_of_range_naming_them(
    options: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["dispatch-simulate", "--scenario", "light-homogeneous", "--profile", "edf", *options]
    try:
        code = main(argv)
    except SystemExit as exited:  # refused while parsing
        code = int(str(exited.code))

    assert code == 2
    assert says in capsys.readouterr().err


def test_dispatch_simulate_refuses_an_unknown_profile_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["dispatch-simulate", "--scenario", "light-homogeneous", "--profile", "nope"])

    assert code == 2
    error = capsys.readouterr().err
    assert error.startswith("arbiter dispatch-simulate: error: unknown profile 'nope'; known:")
    assert "relmas" in error
