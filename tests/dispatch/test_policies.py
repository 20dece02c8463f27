"""Dispatch policies: each behaves as its definition on small cases, and every one keeps
the contract (one layer per sub-accelerator, layer order, one entry per request)."""

from __future__ import annotations

import pytest

from policies.decision import Stage
from policies.dispatch.model import (
    DispatchSnapshot,
    DispatchTenant,
    DnnLayer,
    DnnModel,
    RequestStatus,
    StyleCost,
    SubAccelerator,
)
from policies.dispatch.run import run_dispatch
from policies.dispatch.view import DispatchView
from policies.protocols import DispatchPolicy
from policies.registry import build_registry
from simulator.accelerator.costs import load_costs
from simulator.accelerator.dispatchers import InProcessDispatcher
from simulator.accelerator.system import run_episode
from simulator.accelerator.workload import arrivals, scenarios
from tests.dispatch.builders import busy, model, request, snapshot


def policies() -> list[str]:
    return [spec.name for spec in build_registry().specs(Stage.DISPATCH)]


def policy(name: str, **params: object) -> DispatchPolicy:
    return build_registry().dispatch(name, params)


def starts(name: str, snap: DispatchSnapshot) -> list[tuple[str, str]]:
    result, _ = run_dispatch(policy(name), snap)
    return [(s.request_id, s.accelerator_id) for s in result.starts]


def test_edf_starts_the_earliest_deadline_first_on_the_fastest_idle_accelerator() -> None:
    snap = snapshot(
        [
            request("late", deadline=90.0),
            request("soon", deadline=20.0),
            request("mid", deadline=50.0),
        ]
    )
    assert starts("edf", snap) == [("soon", "ws0"), ("mid", "os0")]


def test_fcfs_starts_the_oldest_request_first() -> None:
    snap = snapshot(
        [request("new", arrival=5.0, deadline=11.0), request("old", arrival=1.0, deadline=99.0)]
    )
    assert starts("fcfs", snap)[0] == ("old", "ws0")


def test_llf_puts_a_long_request_with_a_later_deadline_before_a_short_one() -> None:
    # `long` has 10 layers of 1 s (best case 10 s) due at 25: laxity 5; `short` one layer
    # due at 20: laxity 9. EDF would take `short` first.
    snap = snapshot(
        [request("short", deadline=20.0, model="one"), request("long", deadline=25.0, model="ten")],
        models=[model("one", layers=1), model("ten", layers=10)],
    )
    assert starts("llf", snap)[0] == ("long", "ws0")
    assert starts("edf", snap)[0] == ("short", "ws0")


def test_eft_greedy_waits_for_a_fast_busy_accelerator_rather_than_a_slow_idle_one() -> None:
    # ws0 frees in 0.5 s and runs the layer in 1 s (done at +1.5); os0 is idle but takes 4 s.
    snap = snapshot(
        [request("running", deadline=99.0), request("next", deadline=50.0)],
        accelerators=[
            busy("ws0", "ws", "running", remaining_s=0.5),
            SubAccelerator(id="os0", style="os"),
        ],
    )
    result, _ = run_dispatch(policy("eft_greedy"), snap)
    assert result.starts == ()
    entry = {e.request_id: e for e in result.requests}["next"]
    assert entry.status is RequestStatus.WAITING
    assert "waits for ws0" in entry.reason


def test_eft_greedy_counts_bandwidth_contention_when_choosing() -> None:
    # On ws the layer takes 1 s but needs 400 GB/s; ws1 already draws 300 of a 400 GB/s
    # budget, so there it would run at 400/700 of full speed (1.75 s). os takes 1.5 s and
    # needs 1 GB/s: the bandwidth-aware greedy takes os0, bandwidth-blind EDF ws0.
    costly = DnnLayer(
        costs=(
            StyleCost(style="ws", latency_s=1.0, bandwidth_gbps=400.0),
            StyleCost(style="os", latency_s=1.5, bandwidth_gbps=1.0),
        )
    )
    drawing = DnnLayer(costs=(StyleCost(style="ws", latency_s=1.0, bandwidth_gbps=300.0),))
    snap = snapshot(
        [request("r", model="heavy"), request("other", model="streaming")],
        accelerators=[
            SubAccelerator(id="ws0", style="ws"),
            SubAccelerator(id="os0", style="os"),
            busy("ws1", "ws", "other", remaining_s=9.0),
        ],
        models=[
            DnnModel(name="heavy", layers=(costly,)),
            DnnModel(name="streaming", layers=(drawing,)),
        ],
        budget=400.0,
    )
    assert starts("eft_greedy", snap) == [("r", "os0")]
    assert starts("edf", snap) == [("r", "ws0")]


def test_prema_runs_the_shortest_candidate_and_lets_a_low_priority_request_catch_up() -> None:
    tenants = [DispatchTenant(id="gold", priority=2.0), DispatchTenant(id="bronze", priority=1.0)]
    models = [model("one", layers=1), model("ten", layers=10)]
    fresh = snapshot(
        [
            request("gold-long", arrival=10.0, model="ten", tenant="gold"),
            request("bronze-short", arrival=10.0, model="one", tenant="bronze"),
        ],
        accelerators=[SubAccelerator(id="ws0", style="ws")],
        models=models,
        tenants=tenants,
    )
    # Fresh: gold holds 2 tokens (a candidate), bronze 1 (below the bar of 2).
    assert starts("prema", fresh) == [("gold-long", "ws0")]
    waited = snapshot(
        [
            *list(fresh.requests[:1]),
            request("bronze-short", arrival=8.0, model="one", tenant="bronze"),
        ],
        accelerators=[SubAccelerator(id="ws0", style="ws")],
        models=models,
        tenants=tenants,
    )
    # Bronze waited 2 s = 2 isolated runs: 3 tokens, a candidate, and the shorter one.
    assert starts("prema", waited) == [("bronze-short", "ws0")]


def test_a_request_that_cannot_meet_its_deadline_is_reported_and_still_served() -> None:
    snap = snapshot(
        [request("hopeless", arrival=9.0, deadline=10.5), request("fine", deadline=99.0)]
    )
    for name in policies():
        result, _ = run_dispatch(policy(name), snap, policy("edf"))
        assert result.late == ("hopeless",), name
        entries = {e.request_id: e for e in result.requests}
        assert entries["hopeless"].deadline_feasible is False
        assert entries["hopeless"].earliest_finish == pytest.approx(12.0)
        assert entries["fine"].deadline_feasible is True
        assert len(result.requests) == 2


def _contract_holds(snap: DispatchSnapshot, name: str) -> None:
    result, _ = run_dispatch(policy(name), snap, policy("edf"))
    view = DispatchView(snap)
    busy_ids = {a.id for a in snap.accelerators if a.running is not None}
    in_flight = {a.running.request_id for a in snap.accelerators if a.running is not None}
    used = [s.accelerator_id for s in result.starts]
    assert len(used) == len(set(used)), name
    assert not set(used) & busy_ids, name
    for start in result.starts:
        info = view.requests_by_id[start.request_id]
        assert start.request_id not in in_flight, name  # its previous layer is still running
        assert start.layer == info.request.next_layer, name  # the next layer, in order
        style = next(a.style for a in snap.accelerators if a.id == start.accelerator_id)
        assert style in info.layer.by_style, name
    assert [s.order for s in result.starts] == list(range(len(result.starts)))
    assert [e.request_id for e in result.requests] == [r.id for r in snap.requests], name
    for entry in result.requests:
        assert entry.reason, name
        assert (entry.status is RequestStatus.STARTED) == (
            entry.request_id in {s.request_id for s in result.starts}
        )


@pytest.mark.parametrize("name", policies())
def test_every_policy_gives_a_sub_accelerator_one_layer_and_respects_layer_order(
    name: str, simulated_snapshots: list[DispatchSnapshot]
) -> None:
    assert len(simulated_snapshots) >= 20
    for snap in simulated_snapshots:
        _contract_holds(snap, name)


@pytest.fixture(scope="module")
def simulated_snapshots() -> list[DispatchSnapshot]:
    """Busy rounds of the accelerator simulator: idle and busy sub-accelerators, requests
    mid-model, late ones."""
    costs = load_costs()
    scenario = scenarios()["heavy-mixed"]
    out = []
    for seed in (0, 1):
        kept = run_episode(
            scenario,
            costs,
            arrivals(scenario, costs, seed)[:40],
            InProcessDispatcher("fcfs"),
            keep_snapshots=400,
        ).snapshots
        out += kept[::20]
    return out
