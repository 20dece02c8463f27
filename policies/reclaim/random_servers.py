"""Seeded random reclaiming: return loaned servers drawn at random.

The floor that reclaim policies are measured against: it ignores what runs on
the servers. The draw is seeded by the request's seed, the policy's `seed`
parameter and the snapshot's clock (through SHA-256, not Python's per-process
`hash`), so the same snapshot and seed give the same servers on every replica
and in the simulator. Not by the cluster id: a replay through a service runs under
an id of its own (`arbiter simulate --via-http`), and must draw what the same
replay draws in process.
"""

from __future__ import annotations

import hashlib
import random
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.protocols import Context
from policies.reclaim.impact import ReclaimLedger, reclaim_named, shortfall
from policies.reclaim_models import ReclaimRequest, ReclaimResult


class RandomReclaimParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(
        default=0, description="Added to the request's seed: a different but repeatable draw."
    )


class RandomReclaim:
    name: ClassVar[str] = "random"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.RECLAIM
    summary: ClassVar[str] = "Return loaned servers drawn at random (seeded)."
    source: ClassVar[str] = "Random baseline for reclaiming (floor of the comparison)."
    Params: ClassVar[type[RandomReclaimParams]] = RandomReclaimParams

    def __init__(self, params: RandomReclaimParams) -> None:
        self.params = params

    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        if request.node_ids is not None:
            return reclaim_named(ctx.snapshot, request.node_ids)
        count = request.count or 0
        ledger = ReclaimLedger(ctx.snapshot)
        text = f"{ctx.seed}:{self.params.seed}:{ctx.now!r}".encode()
        rng = random.Random(int.from_bytes(hashlib.sha256(text).digest()[:8], "big"))
        drawn = rng.sample(ledger.loaned, min(count, len(ledger.loaned)))
        reasons = {
            node_id: f"drawn at random; {ledger.give_back(node_id).describe()}" for node_id in drawn
        }
        return ledger.result(reasons, shortfall(count, len(ledger.loaned)))
