"""How both dual-agent policies get their one model: the active version, else the shipped one.

The ordering and the placement agent share one model key (`dual-agent`) and one
file, because they are trained together: a version is a pair of agents that
learned to cooperate, never one agent of one run with the other of another.
"""

from __future__ import annotations

from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.dual_agent.shipped import shipped_model
from policies.learned.models import ModelBlob
from policies.learned.weights import Served, served_model

MODEL_KEY = "dual-agent"


Loaded = Served[DualAgentModel]


def load(blob: ModelBlob | None, use_shipped: bool) -> Loaded:
    """The model a dual-agent policy serves, or why there is none (never raises)."""
    return served_model(
        blob,
        use_shipped=use_shipped,
        read=DualAgentModel.from_bytes,
        shipped=shipped_model,
        what="dual-agent",
    )
