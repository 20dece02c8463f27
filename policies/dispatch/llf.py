"""Least laxity first: the request with the least slack starts first.

Mok, "Fundamental Design Problems of Distributed Systems for the Hard-Real-Time
Environment", MIT PhD thesis, 1983. Laxity is deadline − now − the remaining layers'
best-case time (each alone on its fastest style), so a long request with a later
deadline can come before a short one.
"""

from __future__ import annotations

from typing import ClassVar

from policies.decision import Stage
from policies.dispatch.common import assign_in_order
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView
from policies.protocols import NoParams


class LeastLaxityDispatch:
    name: ClassVar[str] = "llf"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = "Least laxity (slack) first, on the fastest idle sub-accelerator."
    source: ClassVar[str] = "Mok, MIT PhD thesis, 1983."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        ordered = sorted(view.ready, key=lambda r: (r.slack_s, r.request.arrival, r.index))
        return assign_in_order(view, ordered, lambda r: f"laxity {r.slack_s:.6g} s")
