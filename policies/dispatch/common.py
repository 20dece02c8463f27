"""The part the list-scheduling baselines share: walk requests in priority order, give
each the fastest idle sub-accelerator that runs its next layer.

FCFS, EDF, least-laxity-first and PREMA differ only in the order; the accelerator
choice (fastest idle one for the layer) is the same for all, so that the comparison
is between orders. The heterogeneity-aware greedy chooses differently and has its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from policies.dispatch.model import DispatchChoice, LayerStart
from policies.dispatch.view import DispatchView, RequestInfo


def assign_in_order(
    view: DispatchView,
    ordered: Sequence[RequestInfo],
    why: Callable[[RequestInfo], str],
) -> DispatchChoice:
    """Requests in `ordered` (most urgent first) take the fastest idle sub-accelerator
    that runs their next layer, while any is left; `why(info)` names the rank's cause."""
    free = list(view.idle)
    starts: list[LayerStart] = []
    reasons: dict[str, str] = {}
    for rank, info in enumerate(ordered):
        if not free:
            reasons[info.id] = (
                "waits: every idle sub-accelerator went to a more urgent request "
                f"({why(info)}, rank {rank})"
            )
            continue
        best = None
        best_latency = float("inf")
        for accelerator in free:
            cost = info.layer.by_style.get(accelerator.style)
            if cost is not None and cost.latency_s < best_latency:
                best, best_latency = accelerator, cost.latency_s
        if best is None:
            continue  # no idle style runs its layer: the generic reason says so
        free.remove(best)
        starts.append(LayerStart(request_id=info.id, accelerator_id=best.id))
        reasons[info.id] = f"rank {rank} ({why(info)}); fastest idle sub-accelerator for the layer"
    return DispatchChoice(starts=tuple(starts), reasons=reasons)
