"""Small dispatch snapshots built by hand, with costs that make each policy's choice plain."""

from __future__ import annotations

from policies.dispatch.model import (
    DispatchSnapshot,
    DispatchTenant,
    DnnLayer,
    DnnModel,
    PendingInference,
    RunningLayer,
    StyleCost,
    SubAccelerator,
)


def layer(
    ws: float = 1.0, os: float | None = 4.0, bw_ws: float = 10.0, bw_os: float = 1.0
) -> DnnLayer:
    costs = [StyleCost(style="ws", latency_s=ws, bandwidth_gbps=bw_ws, energy_j=1.0)]
    if os is not None:
        costs.append(StyleCost(style="os", latency_s=os, bandwidth_gbps=bw_os, energy_j=2.0))
    return DnnLayer(costs=tuple(costs))


def model(name: str, layers: int = 2, ws: float = 1.0, os: float | None = 4.0) -> DnnModel:
    return DnnModel(name=name, layers=tuple(layer(ws, os) for _ in range(layers)))


def request(  # noqa: PLR0917 - short cases read best positionally
    id: str,
    arrival: float = 0.0,
    deadline: float = 100.0,
    model: str = "m",
    next_layer: int = 0,
    tenant: str = "default",
) -> PendingInference:
    return PendingInference(
        id=id, model=model, tenant=tenant, next_layer=next_layer, arrival=arrival, deadline=deadline
    )


def snapshot(  # noqa: PLR0917
    requests: list[PendingInference],
    accelerators: list[SubAccelerator] | None = None,
    models: list[DnnModel] | None = None,
    now: float = 10.0,
    budget: float = 100.0,
    tenants: list[DispatchTenant] | None = None,
) -> DispatchSnapshot:
    return DispatchSnapshot(
        now=now,
        dram_bandwidth_gbps=budget,
        accelerators=tuple(
            accelerators
            if accelerators is not None
            else [SubAccelerator(id="ws0", style="ws"), SubAccelerator(id="os0", style="os")]
        ),
        models=tuple(models if models is not None else [model("m")]),
        tenants=tuple(tenants or []),
        requests=tuple(requests),
    )


def busy(
    id: str, style: str, request_id: str, layer: int = 0, remaining_s: float = 1.0
) -> SubAccelerator:
    return SubAccelerator(
        id=id,
        style=style,
        running=RunningLayer(request_id=request_id, layer=layer, remaining_s=remaining_s),
    )
