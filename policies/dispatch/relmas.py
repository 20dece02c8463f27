"""RELMAS: a learned policy dispatches the pending requests' next layers.

Blanco, Russo, Palesi, Patti, Ascia, Catania, "Deep Reinforcement Learning based
Online Scheduling Policy for Deep Neural Network Multi-Tenant Multi-Accelerator
Systems" (RELMAS), DAC 2024, arXiv 2404.08950. Each round a network scores every
candidate (request, sub-accelerator) pair from per-layer latency and bandwidth on
each style, deadlines and the bandwidth in use; pairs are taken in score order
(:mod:`policies.learned.relmas.features`). Network and persistence:
:mod:`policies.learned.relmas.network`; trainer: `training.relmas`; the state, action
and reward, each marked paper or ours: docs/relmas.md.

Safety: the policy raises instead of answering when its model is missing or did not
load, when the network's scores are not finite, or when a round takes longer than
`latency_budget_ms`; :func:`policies.dispatch.run.run_dispatch` then lets the
profile's fallback (EDF) answer, and the answer's `fallback` says why.
"""

from __future__ import annotations

import time
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView
from policies.learned import weights
from policies.learned.models import (
    LatencyBudgetExceededError,
    ModelBlob,
    ModelUnavailableError,
)
from policies.learned.relmas.features import build_round, choice_from_picks, pick_order
from policies.learned.relmas.network import RelmasModel
from policies.learned.relmas.shipped import shipped_model


class RelmasParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_budget_ms: float = Field(
        default=50.0,
        ge=0,
        description=(
            "Most milliseconds one round may take; past it the fallback answers "
            "(0: always give up, for tests)."
        ),
    )
    use_shipped_model: bool = Field(
        default=True,
        description=(
            "With no model version active, use the model shipped with Arbiter; False: "
            "answer nothing until one is (the profile's fallback answers)."
        ),
    )


class RelmasDispatch(weights.ServesModel[RelmasModel]):
    name: ClassVar[str] = "relmas"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = (
        "A set-encoder policy network scores (request, sub-accelerator) pairs each round."
    )
    source: ClassVar[str] = "Blanco et al., RELMAS, DAC 2024 (arXiv 2404.08950)."
    Params: ClassVar[type[RelmasParams]] = RelmasParams
    model_key: ClassVar[str] = "relmas"

    def __init__(self, params: RelmasParams, model: ModelBlob | None = None) -> None:
        self.params = params
        served = weights.served_model(
            model,
            use_shipped=params.use_shipped_model,
            read=RelmasModel.from_bytes,
            shipped=shipped_model,
            what="RELMAS",
        )
        self._serve(served)

    @classmethod
    def with_model(
        cls, model: RelmasModel, version: str = "in-memory", params: RelmasParams | None = None
    ) -> RelmasDispatch:
        """A policy serving `model` as it is (no bytes round trip); for trainers and tests."""
        policy = cls(params or RelmasParams(use_shipped_model=False))
        policy._serve(weights.Served(model, version, ""))
        return policy

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        model = self._model
        if model is None:
            raise ModelUnavailableError(self._unavailable)
        started = time.perf_counter()
        round_ = build_round(view, model.config.styles)
        picks = pick_order(round_, model.scores(round_.features))
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        if elapsed_ms > self.params.latency_budget_ms:
            raise LatencyBudgetExceededError(
                f"{elapsed_ms:.2f} ms, over the budget of {self.params.latency_budget_ms:g} ms"
            )
        return choice_from_picks(round_, picks, f"relmas {self._model_version}")
