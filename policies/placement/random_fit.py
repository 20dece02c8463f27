"""Seeded random placement: first fit over a random order of the nodes.

The random-placement baseline of placement studies (e.g. the `random` scheme
of the Tiresias simulator): it ignores topology and load, which makes it the
floor that smarter placements are measured against. Randomness is seeded by
the decision's seed, the policy's `seed` parameter and a stable hash of the
job id (SHA-256, not Python's per-process `hash`), so the same snapshot and
seed give the same placement on every replica and in the simulator, while
different jobs still see different orders.

All or none: if the nodes cannot hold every worker, nothing is placed.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.capacity import FreeCapacity
from policies.decision import Stage
from policies.model import Job
from policies.placement.first_fit import fill_in_order
from policies.protocols import Context, PlacementOutcome


class RandomFitParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(
        default=0, description="Added to the decision's seed: a different but repeatable stream."
    )


class RandomFit:
    name: ClassVar[str] = "random"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "First fit over a seeded random order of the nodes."
    source: ClassVar[str] = "Random-placement baseline (Tiresias simulator, scheme `random`)."
    Params: ClassVar[type[RandomFitParams]] = RandomFitParams

    def __init__(self, params: RandomFitParams) -> None:
        self.params = params

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        # Shuffle all nodes in snapshot order, so the draw depends only on the inputs;
        # first fit skips the full ones as it meets them, which is cheaper than
        # sifting every node of a large cluster before drawing.
        rng = random.Random(self._seed(ctx, job))
        return fill_in_order(free, job, workers, _shuffled(free.node_ids(), rng))

    def _seed(self, ctx: Context, job: Job) -> int:
        text = f"{ctx.seed}:{self.params.seed}:{job.id}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def _shuffled(items: list[str], rng: random.Random) -> Iterator[str]:
    """`items` in random order, drawn lazily (Fisher-Yates one step at a time).

    Most jobs fill up on the first node or two, so drawing only as far as the
    placement reads costs a few random numbers instead of a full shuffle per job.
    """
    for i in range(len(items)):
        j = rng.randrange(i, len(items))
        items[i], items[j] = items[j], items[i]
        yield items[i]
