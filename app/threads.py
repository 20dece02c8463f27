"""Worker threads for the synchronous engine, so that it never runs on the event loop.

Deciding is CPU-bound Python: an `oasis` decision on `examples/large.json` takes a few
hundred milliseconds. Run on the event loop, it would stall every other request of the
process for that long, `/healthz` and `/readyz` included, and a load balancer probing a
busy replica would take it out of service. The raw-body routers (decisions, reclaim,
feedback) read the body asynchronously, then hand the parsing and deciding to
:class:`DecisionThreads`: at most `ARBITER_DECISION_THREADS` run at once; further
requests wait for a thread without holding the loop. (FastAPI already runs plain `def`
routes, such as the admin and catalog ones, on its own thread pool.)

Threads give responsiveness, not parallelism: the engine holds the GIL while it computes,
so one process decides at about the speed of one core whatever the thread count; the
interpreter's switch interval (5 ms) is what lets the loop, or a short decision beside a
slow one, run in between. A few threads (4 by default) let a small decision overtake a
slow `oasis` one instead of queueing behind it; the limit bounds how many snapshots are
decoded and decided at once. For throughput, run more processes (`arbiter serve
--workers N`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import anyio
import anyio.to_thread

T = TypeVar("T")
Args = TypeVarTuple("Args")


class DecisionThreads:
    """Runs synchronous service calls on at most `threads` worker threads."""

    def __init__(self, threads: int) -> None:
        self._limiter = anyio.CapacityLimiter(threads)

    async def run(self, function: Callable[[*Args], T], *args: *Args) -> T:
        """`function(*args)` on a worker thread; its result, or the exception it raised."""
        return await anyio.to_thread.run_sync(function, *args, limiter=self._limiter)
