"""First come, first served: the oldest request's next layer starts first."""

from __future__ import annotations

from typing import ClassVar

from policies.decision import Stage
from policies.dispatch.common import assign_in_order
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView
from policies.protocols import NoParams


class FcfsDispatch:
    name: ClassVar[str] = "fcfs"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = "Oldest request first, on the fastest idle sub-accelerator."
    source: ClassVar[str] = "Classic first-come first-served list scheduling."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        ordered = sorted(view.ready, key=lambda r: (r.request.arrival, r.index))
        return assign_in_order(view, ordered, lambda r: f"arrived at {r.request.arrival:.6g}")
