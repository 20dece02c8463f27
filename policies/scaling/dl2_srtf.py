"""DL2 scaling with its own model for a preemptive ordering (Peng et al., 2019, §4).

The same policy as :mod:`policies.scaling.dl2` (the same round, state, network and
safety), serving another model: one trained behind SRTF ordering with every waiting
job given its minimum even over a full pool (`minimum_when_full`), warmed up on
Optimus scaling, which is the `dl2-srtf` profile's setting (docs/dl2.md, *The
`dl2-srtf` profile*). A network learns the setting it is trained in: the `dl2`
model plays behind FIFO with backfill, and a job it gives workers never preempts
anyone there. So the two models are versioned apart, under their own model keys,
and retraining one never replaces the other.
"""

from __future__ import annotations

from typing import ClassVar

from policies.learned.dl2.shipped import SHIPPED_SRTF_FILE
from policies.scaling.dl2 import Dl2Scaling


class Dl2SrtfScaling(Dl2Scaling):
    name: ClassVar[str] = "dl2_srtf"
    summary: ClassVar[str] = (
        "DL2's policy network with its own model, trained behind SRTF (preemptive)."
    )
    model_key: ClassVar[str] = "dl2-srtf"
    shipped_file: ClassVar[str] = SHIPPED_SRTF_FILE
