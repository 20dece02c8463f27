"""RELMAS's trainer in the registry (:mod:`training.registry`): its budget, incumbent and run.

The run is :func:`training.relmas.train.train` in the accelerator simulator:
imitation of the teacher then REINFORCE when starting from scratch, REINFORCE from the
active version's weights when starting from the incumbent. RELMAS learns from
simulated episodes, not from the decision log, so a window with no logged decision is
no reason to refuse (the logged `inference` feedback is kept for a later trainer that
fits the simulator to it). The verdict compares the candidate with the incumbent on
held-out seeds that neither training nor the choice of checkpoint saw.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import ClassVar

from pydantic import Field

from training.registry import (
    Candidate,
    Incumbent,
    Progress,
    Record,
    Start,
    TrainingBudget,
)


class RelmasBudget(TrainingBudget):
    """How much work one RELMAS retraining may do; the defaults are the shipped model's run."""

    updates: int = Field(default=6, ge=0, le=10_000, description="REINFORCE updates (0: none).")
    imitation_episodes: int = Field(
        default=8, ge=1, le=1000, description="Teacher episodes imitated (from scratch only)."
    )
    imitation_epochs: int = Field(default=6, ge=0, le=1000, description="Epochs of imitation.")
    episodes_per_update: int = Field(default=2, ge=1, le=64, description="Episodes per update.")
    validation_episodes: int = Field(
        default=2, ge=1, le=16, description="Episodes per scenario scoring each checkpoint."
    )
    episode_requests: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Only each episode's first N arrivals (smoke runs); none: whole episodes.",
    )


class RelmasTrainer:
    name: ClassVar[str] = "relmas"
    summary: ClassVar[str] = (
        "Imitation of a deadline-aware teacher, then REINFORCE in the accelerator simulator."
    )
    stages: ClassVar[tuple[str, ...]] = ("imitation", "rl", "evaluation")
    Budget: ClassVar[type[TrainingBudget]] = RelmasBudget
    needs_logged_decisions: ClassVar[bool] = False

    def shipped_version(self) -> str:
        from policies.learned.relmas.shipped import shipped_model  # noqa: PLC0415 - torch

        return shipped_model().version

    def check(self, weights: bytes) -> None:
        from policies.learned.relmas.network import RelmasModel  # noqa: PLC0415 - torch

        RelmasModel.from_bytes(weights)

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
        from policies.learned.relmas.network import RelmasModel  # noqa: PLC0415 - torch
        from policies.learned.relmas.shipped import shipped_model  # noqa: PLC0415
        from simulator.accelerator.costs import load_costs  # noqa: PLC0415
        from training.relmas.train import Args, held_out, train  # noqa: PLC0415

        if not isinstance(budget, RelmasBudget):
            budget = RelmasBudget.model_validate(budget.model_dump())
        active = (
            RelmasModel.from_bytes(incumbent.weights)
            if incumbent.weights is not None
            else shipped_model().model
        )
        args = Args(
            seed=seed,
            imitation_episodes=budget.imitation_episodes,
            imitation_epochs=budget.imitation_epochs,
            updates=budget.updates,
            episodes_per_update=budget.episodes_per_update,
            validation_episodes=budget.validation_episodes,
            episode_requests=budget.episode_requests,
        )
        costs = load_costs()
        started = time.perf_counter()
        initial = RelmasModel.from_bytes(active.to_bytes()) if start == "incumbent" else None
        report = train(args, costs, initial=initial, on_progress=on_progress)
        on_progress("evaluation", 0.0)
        candidate = held_out(report.model, args, costs, budget.held_out_episodes)
        incumbent_score = held_out(active, args, costs, budget.held_out_episodes)
        on_progress("evaluation", 1.0)
        metrics = {
            "held_out_sla_candidate": round(candidate, 4),
            "held_out_sla_incumbent": round(incumbent_score, 4),
            "checkpoint": report.chosen,
            "teacher_validation_sla": round(report.teacher_validation, 4),
            **{f"validation_sla_{k}": round(v, 4) for k, v in report.validation.items()},
            "train_s": round(time.perf_counter() - started, 3),
        }
        return Candidate(
            weights=report.model.to_bytes(),
            metrics=metrics,
            wins=candidate > incumbent_score,
            model_meta=report.model.meta(),
        )
