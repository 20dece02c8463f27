"""The workload the decision log describes: the dispatches served and their inference outcomes.

RELMAS retrains "starting from" the logged `inference` feedback (request, latency, SLA
met). Every logged dispatch answer keeps the snapshot it was made on, and the
repository (`DecisionRepository.dispatches_with_outcomes`) hands each one over with the
`outcomes` of its requests: the `inference` feedback event of the same system and
request id. :func:`read_log` turns a window of them into what training uses
(docs/relmas.md, "Retraining from the log"; every rule below is ours):

* **Requests**: one per (system, request id, arrival): ids may be reused by a caller
  whose clock restarts, the arrival tells two apart. The first snapshot that shows a
  request gives its tenant, model, arrival and deadline; its outcome (SLA met,
  latency) is the one the repository joined to it. A request whose model cannot run
  on any sub-accelerator of its system is skipped and counted.
* **System**: the system with the most requests with an outcome; its latest snapshot gives
  the sub-accelerators' styles (online ones) and the DRAM budget: the system the
  candidate will serve, as DL2 takes a cluster's most recent nodes.
* **Models**: the per-layer costs the snapshots carried (the caller's own cost model),
  most recent by name, added to the MAESTRO table (a logged model of the same name
  wins): the service is told the costs it decides with, so training uses the same.
* **Tenants**: each tenant's share of the requests, its deadline factor (the median of
  (deadline − arrival) / the model's isolated best time on the system's styles), its
  PREMA priority (the snapshot's weight) and its models.
* **Load**: ρ = λ × E[isolated best time], λ the logged requests over the span of
  their arrivals: the calibrated scenario offers the load the system saw.
* **Replays**: the system's logged arrivals themselves, in time order, cut into
  windows of `requests_per_episode` (re-based to start at 0), played in the simulator
  as they came.
* **Demonstrations**: in each logged round, the starts of requests that then met
  their SLA, in start order, as picks among the round's candidate pairs (the
  Plackett-Luce sequence the trainer imitates): a start whose request missed is not
  imitated, and its pair stays open, so the picks that met are taught to beat it.
* **Measured latency** is not used to rescale the costs (it sums queueing, contention
  and the layers' run times, which one number cannot separate); it is reported beside
  the simulator's latency on the replays, a check of how far the simulator is from the
  system.

With no logged dispatch, or none whose requests have an outcome, there is nothing to
start from: :attr:`LoggedWorkload.usable` is false and :attr:`LoggedWorkload.note`
says why; training then uses the named scenarios.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.dispatch.model import DispatchSnapshot, DnnModel
from policies.dispatch.view import DispatchView
from policies.learned.relmas.features import build_round
from policies.model import convert
from simulator.accelerator.costs import CostTable
from simulator.accelerator.workload import Arrival, Scenario, TenantSpec
from training.relmas.rollout import RecordedRound

LoggedDispatch = tuple[Mapping[str, Any], Mapping[str, Any]]
"""(snapshot, decision) of a logged dispatch; the decision carries `outcomes` by request id."""


@dataclass(frozen=True)
class LoggedRequest:
    system: str
    id: str
    tenant: str
    model: str
    arrival: float
    deadline: float
    met: bool | None = None
    """Its `inference` outcome; None: no feedback was logged for it."""
    latency_ms: float | None = None


@dataclass
class LoggedWorkload:
    """What a window of the log says, ready for training."""

    dispatches: int = 0
    requests: tuple[LoggedRequest, ...] = ()
    skipped: int = 0
    """Requests left out: their model runs on none of their system's sub-accelerators."""
    system: str | None = None
    scenario: Scenario | None = None
    """The calibrated scenario of the main system; None when the log gives none."""
    costs: CostTable | None = None
    replays: tuple[tuple[Arrival, ...], ...] = ()
    demonstrations: list[RecordedRound] = field(default_factory=list)
    note: str = ""
    """Why the log is not used, or a one-line account of what it gave."""

    @property
    def outcomes(self) -> int:
        return sum(1 for r in self.requests if r.met is not None)

    @property
    def met(self) -> int:
        return sum(1 for r in self.requests if r.met)

    @property
    def usable(self) -> bool:
        return self.scenario is not None and self.outcomes > 0

    def metrics(self) -> dict[str, Any]:
        """Flat JSON values for the retrain job's metrics."""
        out: dict[str, Any] = {
            "workload": "logged" if self.usable else "scenario defaults",
            "workload_note": self.note,
            "records": self.dispatches,
            "logged_requests": len(self.requests),
            "logged_outcomes": self.outcomes,
            "logged_skipped": self.skipped,
        }
        if self.outcomes:
            out["logged_sla"] = round(self.met / self.outcomes, 4)
            latencies = [r.latency_ms for r in self.requests if r.latency_ms is not None]
            if latencies:
                out["logged_latency_ms_mean"] = round(statistics.fmean(latencies), 4)
        if self.usable and self.scenario is not None:
            out["logged_system"] = self.system
            out["logged_load"] = round(self.scenario.load, 4)
            out["logged_tenants"] = "; ".join(
                f"{t.id}: share {t.share:.2f}, deadline x{t.deadline_factor:.2f}, "
                f"priority {t.priority:g}, models {','.join(t.models)}"
                for t in self.scenario.tenants
            )
            out["logged_accelerators"] = ",".join(self.scenario.accelerators)
            out["logged_replays"] = len(self.replays)
            out["logged_demonstration_rounds"] = len(self.demonstrations)
        return out


@dataclass
class _Round:
    snapshot: DispatchSnapshot
    starts: list[tuple[str, str]]


def _outcome(raw: Mapping[str, Any] | None) -> tuple[bool | None, float | None]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("sla_met"), bool):
        return None, None
    latency = raw.get("latency_ms")
    return bool(raw["sla_met"]), float(latency) if isinstance(latency, int | float) else None


def read_log(
    records: Iterable[LoggedDispatch],
    base: CostTable,
    styles: tuple[str, ...],
    *,
    requests_per_episode: int = 120,
) -> LoggedWorkload:
    """The workload of `records` (log order, oldest first); see the module docstring.

    `base` is the MAESTRO table the logged models are added to; `styles` the
    network's style vocabulary, for the demonstrations' features.
    """
    rounds: list[_Round] = []
    seen: dict[tuple[str, str, float], LoggedRequest] = {}
    latest: dict[str, DispatchSnapshot] = {}
    models: dict[str, DnnModel] = {}
    priorities: dict[str, float] = {}
    for raw_snapshot, decision in records:
        snapshot = convert(raw_snapshot, DispatchSnapshot)
        outcomes = decision.get("outcomes") or {}
        system = snapshot.system_id
        latest[system] = snapshot
        for model in snapshot.models:
            models[model.name] = model
        for tenant in snapshot.tenants:
            priorities[tenant.id] = tenant.priority
        for request in snapshot.requests:
            key = (system, request.id, request.arrival)
            met, latency = _outcome(outcomes.get(request.id))
            known = seen.get(key)
            if known is None or (known.met is None and met is not None):
                seen[key] = LoggedRequest(
                    system=system,
                    id=request.id,
                    tenant=request.tenant,
                    model=request.model,
                    arrival=request.arrival,
                    deadline=request.deadline,
                    met=met,
                    latency_ms=latency,
                )
        starts = [
            (str(s["request_id"]), str(s["accelerator_id"]))
            for s in decision.get("starts") or ()
            if isinstance(s, Mapping)
        ]
        rounds.append(_Round(snapshot, starts))
    workload = LoggedWorkload(dispatches=len(rounds))
    if not rounds:
        workload.note = "no dispatch logged in the window: trained on the named scenarios"
        return workload
    costs = CostTable(models={**base.models, **models})
    styles_of = {
        name: frozenset(a.style for a in logged.accelerators if a.online)
        for name, logged in latest.items()
    }
    usable: list[LoggedRequest] = []
    for logged in sorted(seen.values(), key=lambda r: (r.system, r.arrival, r.id)):
        layers = costs.models[logged.model].layers
        if not all(styles_of[logged.system] & layer.by_style.keys() for layer in layers):
            workload.skipped += 1
            continue
        usable.append(logged)
    workload.requests = tuple(usable)
    if workload.outcomes == 0:
        workload.note = (
            f"{len(rounds)} dispatch(es) logged in the window but no `inference` feedback "
            "for their requests: trained on the named scenarios"
        )
        return workload
    system = Counter(r.system for r in usable if r.met is not None).most_common(1)[0][0]
    snapshot = latest[system]
    accelerators = tuple(a.style for a in snapshot.accelerators if a.online)
    mine = [r for r in usable if r.system == system]
    workload.system = system
    workload.costs = costs
    workload.scenario = _scenario(
        system, mine, accelerators, snapshot=snapshot, costs=costs, priorities=priorities
    )
    workload.replays = _replays(mine, requests_per_episode)
    workload.demonstrations = _demonstrations(rounds, seen, styles)
    workload.note = (
        f"{len(usable)} logged request(s), {workload.outcomes} with an outcome "
        f"({workload.met} met their SLA), on system {system!r}: scenario calibrated to it, "
        f"{len(workload.replays)} replay(s), {len(workload.demonstrations)} demonstration "
        "round(s)"
    )
    return workload


def _scenario(
    system: str,
    requests: list[LoggedRequest],
    accelerators: tuple[str, ...],
    *,
    snapshot: DispatchSnapshot,
    costs: CostTable,
    priorities: Mapping[str, float],
) -> Scenario:
    styles = frozenset(accelerators)
    isolated = {m: costs.isolated_best_s(m, styles) for m in {r.model for r in requests}}
    tenants = []
    for tenant in sorted({r.tenant for r in requests}):
        theirs = [r for r in requests if r.tenant == tenant]
        factor = statistics.median((r.deadline - r.arrival) / isolated[r.model] for r in theirs)
        tenants.append(
            TenantSpec(
                id=tenant,
                share=len(theirs) / len(requests),
                deadline_factor=max(factor, 1e-3),
                priority=priorities.get(tenant, 1.0),
                models=tuple(sorted({r.model for r in theirs})),
            )
        )
    mean_isolated = statistics.fmean(isolated[r.model] for r in requests)
    span = requests[-1].arrival - requests[0].arrival
    # One request, or a burst at one instant: no rate to read; one request per isolated
    # time (ρ = 1) is the least surprising guess.
    load = (len(requests) - 1) / span * mean_isolated if span > 0 else 1.0
    return Scenario(
        name=f"logged:{system}",
        description=f"calibrated to {len(requests)} logged requests of system {system!r}",
        load=load,
        tenants=tuple(tenants),
        accelerators=accelerators,
        dram_gbps=snapshot.dram_bandwidth_gbps,
    )


def _replays(requests: list[LoggedRequest], size: int) -> tuple[tuple[Arrival, ...], ...]:
    windows = [requests[i : i + size] for i in range(0, len(requests), size)]
    if len(windows) > 1 and len(windows[-1]) < size // 2:
        windows.pop()  # a short tail would weigh like a full episode
    out = []
    for window in windows:
        start = window[0].arrival
        out.append(
            tuple(
                Arrival(
                    id=f"r{i}",
                    tenant=r.tenant,
                    model=r.model,
                    arrival=r.arrival - start,
                    deadline=r.deadline - start,
                )
                for i, r in enumerate(window)
            )
        )
    return tuple(out)


def _demonstrations(
    rounds: list[_Round],
    seen: Mapping[tuple[str, str, float], LoggedRequest],
    styles: tuple[str, ...],
) -> list[RecordedRound]:
    out = []
    for logged in rounds:
        snapshot = logged.snapshot
        arrival_of = {r.id: r.arrival for r in snapshot.requests}
        met = [
            (request_id, accelerator_id)
            for request_id, accelerator_id in logged.starts
            if request_id in arrival_of
            and (found := seen.get((snapshot.system_id, request_id, arrival_of[request_id])))
            is not None
            and found.met
        ]
        if not met:
            continue
        round_ = build_round(DispatchView(snapshot), styles)
        if len(round_.features) <= 1:
            continue
        pair_of = {
            (round_.request_ids[int(q)], round_.accelerator_ids[int(a)]): i
            for i, (q, a) in enumerate(zip(round_.request_of, round_.accelerator_of, strict=True))
        }
        picks = [pair_of[start] for start in met if start in pair_of]
        if picks:
            out.append(
                RecordedRound(
                    snapshot.now, round_.features, round_.request_of, round_.accelerator_of, picks
                )
            )
    return out
