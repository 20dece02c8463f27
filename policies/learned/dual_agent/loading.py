"""How both dual-agent policies get their one model: the active version, else the shipped one.

The ordering and the placement agent share one model key (`dual-agent`) and one
file, because they are trained together: a version is a pair of agents that
learned to cooperate, never one agent of one run with the other of another.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.dual_agent.shipped import shipped_model
from policies.learned.models import ModelBlob, ModelLoadError

MODEL_KEY = "dual-agent"


@dataclass(frozen=True)
class Loaded:
    model: DualAgentModel | None
    version: str
    unavailable: str
    """Why `model` is None (empty when it is not)."""


def load(blob: ModelBlob | None, use_shipped: bool) -> Loaded:
    """The model a dual-agent policy serves, or why there is none (never raises)."""
    if blob is not None:
        try:
            return Loaded(DualAgentModel.from_bytes(blob.weights), blob.version, "")
        except ModelLoadError as error:
            return Loaded(
                None, blob.version, f"model version {blob.version!r} did not load: {error}"
            )
    if not use_shipped:
        return Loaded(
            None, "none", "no dual-agent model version is active and the shipped one is not used"
        )
    try:
        shipped = shipped_model()
    except ModelLoadError as error:
        return Loaded(None, "none", str(error))
    return Loaded(shipped.model, shipped.version, "")
