"""What every dispatch policy reads, worked out once per round from the snapshot.

A policy's body should be its choice, not bookkeeping: :class:`DispatchView` gives
the idle sub-accelerators, the requests whose next layer may start (`ready`), each
request's best-case remaining time and slack, and what the running layers draw from
the shared DRAM bandwidth. Pure: it reads a snapshot and never changes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.dispatch.model import (
    DispatchSnapshot,
    DnnLayer,
    DnnModel,
    PendingInference,
    StyleCost,
    SubAccelerator,
)


def progress_rate(bandwidth_demand_gbps: float, budget_gbps: float) -> float:
    """Fraction of full speed at which layers run when together they ask for `demand`.

    The contention model (docs/relmas.md, "Contention"): while the layers running at
    once ask for no more than the budget, each runs at full speed; past it, the memory
    system serves each in proportion to what it asks, so all slow down by the same
    factor budget / demand. Shared by the accelerator simulator and the policies'
    estimates, so that what a policy predicts is what the simulator does.
    """
    if bandwidth_demand_gbps <= budget_gbps:
        return 1.0
    return budget_gbps / bandwidth_demand_gbps


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """A pending request, with what policies ask of it."""

    request: PendingInference
    index: int
    """Position in the snapshot's `requests`."""
    model: DnnModel
    layer: DnnLayer
    """Its next layer (in flight when `running_on` is set)."""
    running_on: str | None
    best_remaining_s: float
    """Its remaining layers' time, each alone on the fastest style of the system."""
    isolated_s: float
    """The whole model's time so (the deadline's yardstick)."""
    weight: float
    slack_s: float
    """Deadline − now − best_remaining_s: negative means it cannot make its deadline."""

    @property
    def id(self) -> str:
        return self.request.id

    @property
    def feasible(self) -> bool:
        return self.slack_s >= 0.0

    @property
    def layer_index(self) -> int:
        return self.request.next_layer


class DispatchView:
    """One round's view of the system, shared by every policy."""

    def __init__(self, snapshot: DispatchSnapshot) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.budget_gbps = snapshot.dram_bandwidth_gbps
        models = snapshot.model_by_name
        self.styles = frozenset(a.style for a in snapshot.accelerators if a.online)
        running: dict[str, SubAccelerator] = {}
        demand = 0.0
        for accelerator in snapshot.accelerators:
            if accelerator.running is not None:
                running[accelerator.running.request_id] = accelerator
        weights = {t.id: t.priority for t in snapshot.tenants}
        self._suffix: dict[str, list[float]] = {}
        by_id = {r.id: r for r in snapshot.requests}
        for accelerator in snapshot.accelerators:
            if accelerator.running is not None:
                request = by_id[accelerator.running.request_id]
                layer = models[request.model].layers[request.next_layer]
                demand += layer.by_style[accelerator.style].bandwidth_gbps
        self.bandwidth_in_use_gbps = demand
        rate = progress_rate(demand, self.budget_gbps)
        self.free_at: dict[str, float] = {
            a.id: self.now + (a.running.remaining_s / rate if a.running is not None else 0.0)
            for a in snapshot.accelerators
        }
        self.accelerators = snapshot.accelerators
        self.idle: tuple[SubAccelerator, ...] = tuple(
            a for a in snapshot.accelerators if a.online and a.running is None
        )
        infos: list[RequestInfo] = []
        for i, request in enumerate(snapshot.requests):
            model = models[request.model]
            suffix = self._suffix_of(model)
            remaining = suffix[request.next_layer]
            on = running.get(request.id)
            infos.append(
                RequestInfo(
                    request=request,
                    index=i,
                    model=model,
                    layer=model.layers[request.next_layer],
                    running_on=on.id if on is not None else None,
                    best_remaining_s=remaining,
                    isolated_s=suffix[0],
                    weight=weights.get(request.tenant, 1.0),
                    slack_s=request.deadline - self.now - remaining,
                )
            )
        self.requests: tuple[RequestInfo, ...] = tuple(infos)
        self.requests_by_id: dict[str, RequestInfo] = {r.id: r for r in infos}
        self.ready: tuple[RequestInfo, ...] = tuple(r for r in infos if r.running_on is None)

    def _suffix_of(self, model: DnnModel) -> list[float]:
        """Best-case time from each layer to the end, on the system's online styles."""
        found = self._suffix.get(model.name)
        if found is not None:
            return found
        styles = self.styles
        suffix = [0.0] * (len(model.layers) + 1)
        total = 0.0
        for i in range(len(model.layers) - 1, -1, -1):
            costs = [c.latency_s for c in model.layers[i].costs if c.style in styles]
            # A layer no online style runs cannot finish at all.
            total += min(costs) if costs else float("inf")
            suffix[i] = total
        self._suffix[model.name] = suffix
        return suffix

    @staticmethod
    def cost(info: RequestInfo, accelerator: SubAccelerator) -> StyleCost | None:
        """Cost of `info`'s next layer on `accelerator`, or None when its style cannot run it."""
        return info.layer.by_style.get(accelerator.style)

    def best_latency(self, info: RequestInfo) -> float:
        """The next layer's time alone on the fastest online style that runs it."""
        costs = [c.latency_s for c in info.layer.costs if c.style in self.styles]
        return min(costs) if costs else float("inf")
