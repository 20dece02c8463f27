"""DL2: a learned policy decides workers and parameter servers (Peng et al., 2019).

Peng, Bao, Chen, Wu, Meng, Lin, "DL2: A Deep Learning-driven Scheduler for Deep
Learning Clusters" (2019), §4. Each round every job gets its floor (what a running
job holds, a waiting job's minimum while the pool lasts), then the policy network
hands out the rest one step at a time: for one of the J most urgent jobs, one
more worker step, one more parameter server, or both; or stop (§4.1, "multiple
inferences per time slot"). Serving is greedy (the most likely valid action); the
trainers in `training.dl2` sample. State, window and masking are in
:mod:`policies.learned.dl2.features`, the network in :mod:`policies.learned.dl2.network`.

Safety, which the paper leaves to the operator: the policy raises instead of
answering when its model is missing or did not load, when the network produces no
valid action (non-finite output, or a masked action), or when a decision takes
longer than `latency_budget_ms`. The engine turns that into the profile's fallback
(`dl2`: DRF), and the decision's `fallback` says why.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import ClassVar

import numpy as np
from pydantic import Field

from policies.common.pool import FloorParams
from policies.decision import ScalingResult, Stage
from policies.learned import weights
from policies.learned.dl2.features import Allocation, play
from policies.learned.dl2.network import Dl2Model
from policies.learned.dl2.shipped import SHIPPED_FILE, shipped_model
from policies.learned.models import (
    LatencyBudgetExceededError,
    ModelBlob,
    ModelUnavailableError,
)
from policies.model import Job
from policies.protocols import Context


class Dl2Params(FloorParams):
    """The model's floor (:class:`FloorParams`: where running jobs start, what a waiting
    job the pool has no room for gets), and how the model is served."""

    latency_budget_ms: float = Field(
        default=250.0,
        ge=0,
        description=(
            "Most milliseconds one scaling decision may take; past it the policy gives up "
            "and the profile's fallback answers (0: always give up, for tests)."
        ),
    )
    use_shipped_model: bool = Field(
        default=True,
        description=(
            "With no model version active, use the model shipped with Arbiter; False: "
            "answer nothing until one is (the profile's fallback answers)."
        ),
    )


class Dl2Scaling(weights.ServesModel[Dl2Model]):
    name: ClassVar[str] = "dl2"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "A policy network adds workers and parameter servers one step at a time."
    )
    source: ClassVar[str] = (
        "Peng et al., DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters, 2019, §4."
    )
    Params: ClassVar[type[Dl2Params]] = Dl2Params
    model_key: ClassVar[str] = "dl2"
    shipped_file: ClassVar[str] = SHIPPED_FILE
    """The model served while no version of `model_key` is active
    (:mod:`policies.learned.dl2.shipped`)."""

    def __init__(self, params: Dl2Params, model: ModelBlob | None = None) -> None:
        self.params = params
        served = weights.served_model(
            model,
            use_shipped=params.use_shipped_model,
            read=Dl2Model.from_bytes,
            shipped=partial(shipped_model, self.shipped_file),
            what="DL2",
        )
        self._serve(served)

    @classmethod
    def with_model(
        cls, model: Dl2Model, version: str = "in-memory", params: Dl2Params | None = None
    ) -> Dl2Scaling:
        """A policy serving `model` as it is (no bytes round trip); for trainers and tests."""
        policy = cls(params or Dl2Params(use_shipped_model=False))
        policy._serve(weights.Served(model, version, ""))
        return policy

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        model = self._model
        if model is None:
            raise ModelUnavailableError(self._unavailable)
        started = time.perf_counter()
        budget_s = self.params.latency_budget_ms / 1000.0
        allocation = Allocation(ctx.snapshot, jobs, model.config, floor=self.params)

        def choose(state: np.ndarray, mask: np.ndarray) -> int:
            action = model.predict(state, mask)
            elapsed = time.perf_counter() - started
            if elapsed > budget_s:
                raise LatencyBudgetExceededError(
                    f"{elapsed * 1000:.1f} ms after {allocation.actions_taken} actions, "
                    f"over the budget of {self.params.latency_budget_ms:g} ms"
                )
            return action

        play(allocation, choose)
        return allocation.results(f"model {self._model_version}")
