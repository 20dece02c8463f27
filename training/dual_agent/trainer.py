"""The dual agent's trainer in the registry (:mod:`training.registry`).

A retraining is: MAPPO updates of both agents together in the simulator (`rl`),
the GP's hyperparameters fitted on the feedback of episodes played by the
candidate (`gp`), the placement head's patience, value of time and risk set by
a coordinate search on training windows (`attitude`,
:mod:`training.dual_agent.attitude_fit`), and the verdict on held-out episodes against the
incumbent by the search's own criterion (`evaluation`; `attitude_fit_criterion`, lower
wins). Episodes are windows of the shared Philly trace on the heterogeneous cluster
(:mod:`training.dual_agent.episodes`): the decision log is not needed (ours:
the log rarely holds a heterogeneous cluster's whole history, and the GP's
online part already learns from the cluster's own feedback between
retrainings), so a window with no logged decision is accepted.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import ClassVar, Literal

from pydantic import Field

from training.registry import (
    Candidate,
    Incumbent,
    Progress,
    Record,
    Start,
    TrainingBudget,
    TrainingError,
)


class DualAgentBudget(TrainingBudget):
    """How much one dual-agent retraining may do; the defaults are the shipped model's run."""

    updates: int = Field(default=12, ge=0, le=10_000, description="MAPPO updates (0: none).")
    held_out_episodes: int = Field(
        default=3, ge=1, le=5, description="Episodes of the verdict against the active version."
    )
    episodes_per_update: int = Field(default=1, ge=1, le=64, description="Episodes per update.")
    epochs: int = Field(default=4, ge=1, le=100, description="PPO epochs per update.")
    jobs: int = Field(default=60, ge=2, le=5000, description="Jobs per simulated episode.")
    gp_fit_episodes: int = Field(
        default=2, ge=0, le=12, description="Episodes whose feedback fits the GP (0: none)."
    )
    gp_fit_steps: int = Field(default=40, ge=0, le=10_000, description="Adam steps of the fit.")
    attitude_fit_passes: int = Field(
        default=2,
        ge=0,
        le=20,
        description="Coordinate-search passes over the patience, value of time, risk (0: none).",
    )
    attitude_fit_episodes: int = Field(
        default=12, ge=1, le=12, description="Training windows the attitude search plays."
    )
    attitude_fit_repetitions: int = Field(
        default=4, ge=1, le=8, description="Seeds per window in the attitude search."
    )
    attitude_fit_criterion: Literal["objective", "weakest-margin", "weakest-share"] = Field(
        default="weakest-share",
        description=(
            "What the attitude search lowers, and what the verdict on held-out episodes "
            "compares the candidate and the active version by: `objective` (fee + "
            "jct_weight $ per job-hour), `weakest-margin` (minus the weakest paired margin, "
            "in standard errors, of fee and mean JCT against Tiresias and the greedy "
            "baseline) or `weakest-share` (minus the weakest of those four margins as a "
            "share of the baseline's total)."
        ),
    )
    jct_weight: float = Field(
        default=2.0, ge=0, le=1000, description="Dollars per job-hour of completion time."
    )


class DualAgentTrainer:
    name: ClassVar[str] = "dual-agent"
    summary: ClassVar[str] = (
        "MAPPO of the ordering and RWGP placement agents together in the simulator, "
        "then the GP's hyperparameters by marginal likelihood (Xing et al., KDD 2023)."
    )
    stages: ClassVar[tuple[str, ...]] = ("rl", "gp", "attitude", "evaluation")
    Budget: ClassVar[type[TrainingBudget]] = DualAgentBudget
    needs_logged_decisions: ClassVar[bool] = False

    def shipped_version(self) -> str:
        from policies.learned.dual_agent.shipped import shipped_model  # noqa: PLC0415

        return shipped_model().version

    def check(self, weights: bytes) -> None:
        from policies.learned.dual_agent.network import DualAgentModel  # noqa: PLC0415

        DualAgentModel.from_bytes(weights)

    def train(
        self,
        records: Iterable[Record],
        incumbent: Incumbent,
        budget: TrainingBudget,
        *,
        seed: int,
        start: Start,
        on_progress: Progress,
    ) -> Candidate:
        from training.dual_agent.run import train_dual_agent  # noqa: PLC0415 - torch

        if not isinstance(budget, DualAgentBudget):
            budget = DualAgentBudget.model_validate(budget.model_dump())
        started = time.perf_counter()
        result = train_dual_agent(
            incumbent.weights, budget, seed=seed, start=start, on_progress=on_progress
        )
        if result.held_out == 0:
            raise TrainingError("no held-out episode to judge the candidate on")
        metrics = {**result.metrics, "train_s": round(time.perf_counter() - started, 3)}
        return Candidate(
            weights=result.model.to_bytes(),
            metrics=metrics,
            wins=result.wins,
            model_meta=result.model.meta(),
        )
