"""Earliest deadline first: the request whose deadline comes first starts first.

Liu and Layland, "Scheduling Algorithms for Multiprogramming in a Hard-Real-Time
Environment", JACM 1973 (the deadline-driven scheduler). It is also every learned
dispatch profile's fallback.
"""

from __future__ import annotations

from typing import ClassVar

from policies.decision import Stage
from policies.dispatch.common import assign_in_order
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView
from policies.protocols import NoParams


class EdfDispatch:
    name: ClassVar[str] = "edf"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = "Earliest deadline first, on the fastest idle sub-accelerator."
    source: ClassVar[str] = "Liu and Layland, JACM 1973."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        ordered = sorted(view.ready, key=lambda r: (r.request.deadline, r.request.arrival, r.index))
        return assign_in_order(view, ordered, lambda r: f"deadline {r.request.deadline:.6g}")
