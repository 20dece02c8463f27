"""Heterogeneity-aware greedy: each request, by deadline, goes where its next layer
would finish earliest, busy sub-accelerators and bandwidth contention counted.

A list scheduler in the HEFT family (Topcuoglu, Hariri, Wu, "Performance-Effective
and Low-Complexity Task Scheduling for Heterogeneous Computing", IEEE TPDS 2002:
earliest finish time over processors), made bandwidth-aware for a shared DRAM budget:
a layer's estimated time is its isolated latency stretched by the contention model
(:func:`policies.dispatch.view.progress_rate`) over the bandwidth already drawn plus
its own. When the earliest finish is on a busy sub-accelerator (a faster style that
frees soon), the request waits for it instead of taking a slow idle one, and that
sub-accelerator is promised to it for the rest of the round.
"""

from __future__ import annotations

from typing import ClassVar

from policies.decision import Stage
from policies.dispatch.model import DispatchChoice, LayerStart
from policies.dispatch.view import DispatchView, progress_rate
from policies.protocols import NoParams


class EftGreedyDispatch:
    name: ClassVar[str] = "eft_greedy"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = (
        "By deadline, each layer where it finishes earliest, busy ones and bandwidth counted."
    )
    source: ClassVar[str] = (
        "HEFT's earliest finish time (Topcuoglu et al., TPDS 2002), bandwidth-aware."
    )
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        now = view.now
        budget = view.budget_gbps
        demand = view.bandwidth_in_use_gbps
        available = {a.id: view.free_at[a.id] for a in view.accelerators if a.online}
        idle = {a.id for a in view.idle}
        starts: list[LayerStart] = []
        reasons: dict[str, str] = {}
        ordered = sorted(view.ready, key=lambda r: (r.request.deadline, r.request.arrival, r.index))
        for info in ordered:
            best_id, best_finish, best_bw = "", float("inf"), 0.0
            for accelerator in view.accelerators:
                at = available.get(accelerator.id)
                cost = info.layer.by_style.get(accelerator.style)
                if at is None or cost is None:
                    continue
                rate = progress_rate(demand + cost.bandwidth_gbps, budget)
                finish = max(at, now) + cost.latency_s / rate
                if finish < best_finish:
                    best_id, best_finish, best_bw = accelerator.id, finish, cost.bandwidth_gbps
            if not best_id:
                continue  # no online style runs it: the generic reason says so
            # Promised to this request until its layer would end, started now or not.
            available[best_id] = best_finish
            if best_id in idle:
                idle.discard(best_id)
                demand += best_bw
                starts.append(LayerStart(request_id=info.id, accelerator_id=best_id))
                reasons[info.id] = (
                    f"earliest estimated finish, {best_finish - now:.3g} s from now, on {best_id}"
                )
            else:
                reasons[info.id] = (
                    f"waits for {best_id}: its layer finishes earliest there "
                    f"({best_finish - now:.3g} s from now), sooner than on any idle one"
                )
        return DispatchChoice(starts=tuple(starts), reasons=reasons)
