"""PREMA-style token priority: tokens grow with weighted waiting; among the requests
whose tokens pass the threshold, the shortest remaining one starts first.

Choi and Rhu, "PREMA: A Predictive Multi-task Scheduling Algorithm For Preemptible
Neural Processing Units", HPCA 2020, §IV. A request's tokens are its tenant's
priority times (1 + waited time / isolated time), so a request gains a priority's
worth of tokens for every isolated run time it has waited (the paper's
slowdown-normalised accumulation); candidates are those with at least
`threshold` × the highest priority among the ready requests (ours, after PREMA's
threshold tied to the priority levels present); candidates run shortest estimated
remaining time first, then the rest by tokens. No preemption: a layer, once started,
runs to its end (layers are short; the paper preempts whole networks).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.dispatch.common import assign_in_order
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView, RequestInfo


class PremaParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    threshold: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description=(
            "Candidates hold at least this fraction of the highest priority present in "
            "tokens; with equal priorities every request is a candidate (shortest first)."
        ),
    )


class PremaDispatch:
    name: ClassVar[str] = "prema"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = (
        "Token priority: waiting earns weighted tokens; candidates run shortest first."
    )
    source: ClassVar[str] = "Choi and Rhu, PREMA, HPCA 2020, §IV."
    Params: ClassVar[type[PremaParams]] = PremaParams

    def __init__(self, params: PremaParams) -> None:
        self.params = params

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        if not view.ready:
            return DispatchChoice()
        now = view.now

        def tokens(r: RequestInfo) -> float:
            waited = max(0.0, now - r.request.arrival)
            return r.weight * (1.0 + waited / r.isolated_s)

        held = {r.id: tokens(r) for r in view.ready}
        # The highest priority present sets the bar (PREMA); a request below it joins
        # once it has waited long enough to catch up.
        bar = self.params.threshold * max(r.weight for r in view.ready)
        ordered = sorted(
            view.ready,
            key=lambda r: (
                0 if held[r.id] >= bar else 1,
                r.best_remaining_s if held[r.id] >= bar else -held[r.id],
                r.index,
            ),
        )
        return assign_in_order(
            view,
            ordered,
            lambda r: (
                f"{held[r.id]:.3g} tokens"
                + (", candidate" if held[r.id] >= bar else ", below the bar")
            ),
        )
