"""DL2's trainers in the registry (:mod:`training.registry`): budget, incumbent and run.

Two trainers, one per served profile with a model of its own: `dl2` (the `dl2`
profile, FIFO with backfill) and `dl2-srtf` (the `dl2-srtf` profile: SRTF, every
waiting job its minimum). Each retrains its own model key in its profile's setting
(:class:`training.dl2.episodes.ServedSetting`): the ordering every episode plays
behind, and the floor of the model, of the incumbent and of the replayed records.

The run is :func:`training.dl2.retrain.retrain` (imitation of the window's logged
decisions, PPO in the simulator, the verdict on held-out episodes); this module
only adapts it to the :class:`~training.registry.Trainer` protocol. Torch is
imported when a method runs, not when the registry is listed. A trainer built
with a :class:`simulator.sweep.Runner` plays its simulated episodes there
(`arbiter train dl2 --processes N | --ray ADDRESS`); the default is this process.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from pydantic import Field

from training.registry import (
    Candidate,
    Incumbent,
    Progress,
    Record,
    Start,
    TrainingBudget,
)

if TYPE_CHECKING:
    from simulator.sweep import Runner


class Dl2Budget(TrainingBudget):
    """How much work one DL2 retraining may do; the defaults are the shipped model's run."""

    imitation_epochs: int = Field(default=20, ge=0, le=1000, description="Epochs of imitation.")
    episodes_per_update: int = Field(default=2, ge=1, le=64, description="Episodes per update.")
    jobs: int = Field(default=80, ge=2, le=5000, description="Jobs per simulated episode.")
    validation_episodes: int = Field(
        default=4, ge=0, le=4, description="Episodes scoring PPO checkpoints (0: keep the last)."
    )
    validate_every: int = Field(default=5, ge=1, le=1000, description="Updates between scorings.")
    logged_held_out: bool = Field(
        default=True,
        description=(
            "Keep the newest logged window of each cluster whose log fills two or more out of "
            "RL, and activate a candidate only if it also wins there."
        ),
    )


class Dl2Trainer:
    name: ClassVar[str] = "dl2"
    summary: ClassVar[str] = (
        "Imitation of the logged decisions, then PPO in the simulator (Peng et al., 2019)."
    )
    profile: ClassVar[str] = "dl2"
    """The served profile whose model this trainer retrains, and whose setting it trains in
    (its model key and shipped model, the incumbent while no version is active, included)."""
    stages: ClassVar[tuple[str, ...]] = ("demonstrations", "imitation", "rl", "evaluation")
    Budget: ClassVar[type[TrainingBudget]] = Dl2Budget
    needs_logged_decisions: ClassVar[bool] = True
    logged: ClassVar[str] = "decisions-with-finishes"
    """Its records carry the `job_finished` feedback of their jobs: measured run times for
    the logged episodes (`training.registry.logged_source`, `training.dl2.logged`)."""

    def __init__(self, runner: Runner | None = None) -> None:
        self.runner = runner

    def shipped_version(self) -> str:
        from policies.learned.dl2.shipped import shipped_model  # noqa: PLC0415 - torch
        from training.dl2.episodes import ServedSetting  # noqa: PLC0415

        return shipped_model(ServedSetting.of(self.profile).shipped_file).version

    def check(self, weights: bytes) -> None:
        from policies.learned.dl2.network import Dl2Model  # noqa: PLC0415 - torch

        Dl2Model.from_bytes(weights)

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
        from policies.learned.dl2.network import Dl2Model  # noqa: PLC0415 - torch
        from policies.learned.dl2.shipped import shipped_model  # noqa: PLC0415
        from training.dl2.episodes import ServedSetting  # noqa: PLC0415
        from training.dl2.retrain import retrain  # noqa: PLC0415

        setting = ServedSetting.of(self.profile)
        model = (
            Dl2Model.from_bytes(incumbent.weights)
            if incumbent.weights is not None
            else shipped_model(setting.shipped_file).model
        )
        if not isinstance(budget, Dl2Budget):
            budget = Dl2Budget.model_validate(budget.model_dump())
        result = retrain(
            records,
            model,
            budget,
            seed=seed,
            start=start,
            on_progress=on_progress,
            runner=self.runner,
            setting=setting,
        )
        return Candidate(
            weights=result.model.to_bytes(),
            metrics=dict(result.metrics()),
            wins=result.candidate_wins,
            model_meta=result.model.meta(),
        )


class Dl2SrtfTrainer(Dl2Trainer):
    """The `dl2-srtf` profile's model: the same run, behind SRTF with its floor."""

    name: ClassVar[str] = "dl2-srtf"
    summary: ClassVar[str] = (
        "DL2 behind SRTF: imitation of the logged decisions, then PPO in the simulator, "
        "every waiting job given its minimum (Peng et al., 2019)."
    )
    profile: ClassVar[str] = "dl2-srtf"
