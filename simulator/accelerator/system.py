"""The accelerator system's event loop: arrivals, layer completions, dispatch rounds.

Event-driven and deterministic for a seed. Time advances to the next arrival or the
next layer completion; after every event at which some sub-accelerator is idle and
some request ready, the dispatcher (a profile's policy, in process or over HTTP) gets
a :class:`DispatchSnapshot` and its starts are applied. RELMAS schedules in periodic
cycles; dispatching at every event is that cycle shrunk to the events that can change
an answer (docs/relmas.md, "Simulator").

Contention (docs/relmas.md, "Contention"): the layers running at once ask for the sum
of their bandwidths; past the DRAM budget each progresses at budget / demand of full
speed (:func:`policies.dispatch.view.progress_rate`). A layer's work is its isolated
latency; it finishes when the integral of its rate reaches it. Energy is the cost
model's per-layer energy on the style it ran on, contention not counted (MAESTRO's
activity-count energy does not depend on stalls; static power is not modelled).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from policies.dispatch.model import (
    DispatchResult,
    DispatchSnapshot,
    DispatchTenant,
    PendingInference,
    RunningLayer,
    StyleCost,
    SubAccelerator,
)
from policies.dispatch.view import progress_rate
from simulator.accelerator.costs import CostTable
from simulator.accelerator.dispatchers import Dispatcher
from simulator.accelerator.workload import Arrival, Scenario


@dataclass
class _Running:
    request_id: str
    layer: int
    cost: StyleCost
    work_left_s: float


@dataclass
class RequestRecord:
    id: str
    tenant: str
    model: str
    arrival: float
    deadline: float
    layers: int
    next_layer: int = 0
    started: float | None = None
    finished: float | None = None
    energy_j: float = 0.0

    @property
    def met(self) -> bool:
        return self.finished is not None and self.finished <= self.deadline + 1e-12


@dataclass
class RunResult:
    requests: list[RequestRecord]
    busy_s: dict[str, float]
    makespan_s: float
    decision_ms: list[float]
    rounds: int
    saturated_s: float
    """Time the running layers asked for more bandwidth than the budget."""
    stalled: bool = False
    """The policy left every sub-accelerator idle with work ready and nothing to come."""
    fallbacks: int = 0
    snapshots: list[DispatchSnapshot] = field(default_factory=list)
    round_times: list[float] = field(default_factory=list)
    """When each dispatch round happened."""
    round_saturated_s: list[float] = field(default_factory=list)
    layers_by_style: dict[str, int] = field(default_factory=dict)
    """Layers started on each dataflow style."""
    """Time over the bandwidth budget between each round and the one before."""


def run_episode(
    scenario: Scenario,
    costs: CostTable,
    arrivals: list[Arrival],
    dispatcher: Dispatcher,
    *,
    keep_snapshots: int = 0,
    system_id: str | None = None,
) -> RunResult:
    """Serve `arrivals` on the scenario's system with `dispatcher`; every request to its end.

    Snapshots name the system `system_id` (default: the scenario's name)."""
    accelerators = [
        SubAccelerator(id=f"{style}{i}", style=style)
        for i, style in enumerate(scenario.accelerators)
    ]
    models = tuple(costs.models[m] for m in sorted({a.model for a in arrivals}))
    tenants = tuple(DispatchTenant(id=t.id, priority=t.priority) for t in scenario.tenants)
    by_name = {m.name: m for m in models}
    running: dict[str, _Running | None] = {a.id: None for a in accelerators}
    busy = {a.id: 0.0 for a in accelerators}
    records: dict[str, RequestRecord] = {}
    pending: dict[str, PendingInference] = {}
    decision_ms: list[float] = []
    snapshots: list[DispatchSnapshot] = []
    budget = scenario.dram_gbps
    now, rounds, saturated, fallbacks, stalled = 0.0, 0, 0.0, 0, False
    round_times: list[float] = []
    round_saturated: list[float] = []
    saturated_before = 0.0
    layers_by_style: dict[str, int] = {}
    upcoming = 0
    while upcoming < len(arrivals) or pending:
        demand = sum(r.cost.bandwidth_gbps for r in running.values() if r is not None)
        rate = progress_rate(demand, budget)
        ends = {
            accelerator_id: now + r.work_left_s / rate
            for accelerator_id, r in running.items()
            if r is not None
        }
        finish = min(ends.values(), default=float("inf"))
        arrive = arrivals[upcoming].arrival if upcoming < len(arrivals) else float("inf")
        if finish == float("inf") and arrive == float("inf"):
            stalled = True  # pending work, nothing running, nothing to come: the policy stalls
            break
        step_to = min(finish, arrive)
        elapsed = step_to - now
        if demand > budget:
            saturated += elapsed
        for accelerator_id, layer in running.items():
            if layer is None:
                continue
            busy[accelerator_id] += elapsed
            layer.work_left_s -= elapsed * rate
        now = step_to
        for accelerator_id, end in ends.items():
            layer = running[accelerator_id]
            if layer is None or end > step_to:
                continue
            running[accelerator_id] = None
            record = records[layer.request_id]
            record.next_layer += 1
            if record.next_layer == record.layers:
                record.finished = now
                del pending[record.id]
            else:
                pending[record.id] = PendingInference(
                    id=record.id,
                    model=record.model,
                    tenant=record.tenant,
                    next_layer=record.next_layer,
                    arrival=record.arrival,
                    deadline=record.deadline,
                )
        while upcoming < len(arrivals) and arrivals[upcoming].arrival <= now:
            a = arrivals[upcoming]
            upcoming += 1
            records[a.id] = RequestRecord(
                id=a.id,
                tenant=a.tenant,
                model=a.model,
                arrival=a.arrival,
                deadline=a.deadline,
                layers=len(by_name[a.model].layers),
            )
            pending[a.id] = PendingInference(
                id=a.id, model=a.model, tenant=a.tenant, arrival=a.arrival, deadline=a.deadline
            )
        in_flight = {r.request_id for r in running.values() if r is not None}
        if not any(r is None for r in running.values()) or len(in_flight) == len(pending):
            continue
        snapshot = DispatchSnapshot(
            system_id=system_id or scenario.name,
            now=now,
            dram_bandwidth_gbps=budget,
            accelerators=tuple(
                a
                if (r := running[a.id]) is None
                else SubAccelerator(
                    id=a.id,
                    style=a.style,
                    running=RunningLayer(
                        request_id=r.request_id,
                        layer=r.layer,
                        remaining_s=max(r.work_left_s, 0.0),
                    ),
                )
                for a in accelerators
            ),
            models=models,
            tenants=tenants,
            requests=tuple(pending.values()),
        )
        started_at = time.perf_counter()
        result: DispatchResult = dispatcher(snapshot)
        decision_ms.append((time.perf_counter() - started_at) * 1000.0)
        rounds += 1
        round_times.append(now)
        round_saturated.append(saturated - saturated_before)
        saturated_before = saturated
        if result.fallback is not None:
            fallbacks += 1
        if len(snapshots) < keep_snapshots:
            snapshots.append(snapshot)
        for start in result.starts:
            record = records[start.request_id]
            style = next(a.style for a in accelerators if a.id == start.accelerator_id)
            cost = by_name[record.model].layers[record.next_layer].by_style[style]
            running[start.accelerator_id] = _Running(
                request_id=record.id, layer=record.next_layer, cost=cost, work_left_s=cost.latency_s
            )
            record.energy_j += cost.energy_j
            layers_by_style[style] = layers_by_style.get(style, 0) + 1
            if record.started is None:
                record.started = now
    return RunResult(
        requests=list(records.values()),
        busy_s=busy,
        makespan_s=now,
        decision_ms=decision_ms,
        rounds=rounds,
        saturated_s=saturated,
        stalled=stalled,
        fallbacks=fallbacks,
        snapshots=snapshots,
        round_times=round_times,
        round_saturated_s=round_saturated,
        layers_by_style=layers_by_style,
    )
