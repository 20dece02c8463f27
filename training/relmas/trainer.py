"""RELMAS's trainer in the registry (:mod:`training.registry`): its budget, incumbent and run.

The run is :func:`training.relmas.train.train` in the accelerator simulator:
imitation of the teacher then REINFORCE when starting from scratch, REINFORCE from the
active version's weights when starting from the incumbent. Its records are the
window's logged dispatch answers with the `inference` outcomes of their requests
(`logged = "dispatches"`): :func:`training.relmas.logged.read_log` rebuilds the
workload they describe, and training runs on the scenario calibrated to it, on replays
of its arrivals, and imitates the logged starts that met their SLA. A window with none
is no reason to refuse: the metrics say so (`workload`, `workload_note`) and training
falls back to the named scenarios. The verdict compares the candidate with the
incumbent on held-out seeds of the same scenarios, which neither training nor the
choice of checkpoint saw.
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
    stages: ClassVar[tuple[str, ...]] = ("log", "imitation", "rl", "evaluation")
    Budget: ClassVar[type[TrainingBudget]] = RelmasBudget
    needs_logged_decisions: ClassVar[bool] = False
    logged: ClassVar[str] = "dispatches"
    """Its records are dispatch answers with outcomes (`training.registry.logged_source`)."""

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
        from training.relmas.logged import read_log  # noqa: PLC0415
        from training.relmas.train import Args, held_out, replayed, sources, train  # noqa: PLC0415

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
        on_progress("log", 0.0)
        workload = read_log(records, costs, active.config.styles)
        on_progress("log", 1.0)
        source = sources(args, costs, workload)
        initial = RelmasModel.from_bytes(active.to_bytes()) if start == "incumbent" else None
        report = train(args, costs, initial=initial, on_progress=on_progress, workload=workload)
        on_progress("evaluation", 0.0)
        candidate = held_out(report.model, args, source, budget.held_out_episodes)
        incumbent_score = held_out(active, args, source, budget.held_out_episodes)
        replay_candidate = replayed(report.model, args, source)
        replay_incumbent = replayed(active, args, source)
        on_progress("evaluation", 1.0)
        if replay_candidate is not None and replay_incumbent is not None:
            # The simulator's account of the logged arrivals beside the log's own: how far
            # the simulator is from the system (ours; docs/relmas.md).
            replays = {
                "replayed_sla_candidate": round(replay_candidate, 4),
                "replayed_sla_incumbent": round(replay_incumbent, 4),
            }
        else:
            replays = {}
        metrics = {
            **workload.metrics(),
            **replays,
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
