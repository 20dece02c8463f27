"""Retraining DL2 from the decision log: imitation, PPO, the verdict against the incumbent.

One pure function, :func:`retrain`, shared by the `arbiter worker` queue and the
`arbiter train dl2` command: it takes decision records (rows of the `decisions`
table as JSON, or model objects), the incumbent model (the active version, or the
shipped one) and a budget, and returns the candidate model with its metrics. It
stores nothing and activates nothing; the caller does (DESIGN §5).

Stages, each reported to `on_progress(stage, fraction of that stage)`:

1. `demonstrations`: the records replayed through DL2's round
   (:func:`training.dl2.imitation.demonstrations`), one sample per inference.
2. `imitation`: cross-entropy on them (§4.2), starting from the incumbent's
   weights (`start="incumbent"`: the log refines what is served) or from fresh
   ones (`"scratch"`: the paper's order, imitation before RL).
3. `rl`: PPO in the simulator on the training episodes (§4.3), keeping the best
   validated checkpoint when the budget has validation episodes.
4. `evaluation`: :func:`training.dl2.evaluation.compare` of the candidate against
   the incumbent on held-out episodes; `candidate_wins` is the activation rule.

The episodes are windows of the shared traces (:mod:`training.dl2.episodes`),
sized by the budget; the decision log feeds the imitation only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from policies.learned.dl2.network import Dl2Model
from training.dl2.episodes import (
    EpisodeSpec,
    held_out_episodes,
    training_episodes,
    validation_episodes,
)
from training.dl2.evaluation import Comparison, compare
from training.dl2.imitation import ImitationArgs, Record, demonstrations, imitate
from training.dl2.reinforce import PpoArgs, one_thread, train_ppo

Progress = Callable[[str, float], None]
"""`(stage, fraction of the stage done)`; stages in order: see :data:`STAGES`."""

Start = Literal["incumbent", "scratch"]

STAGES = ("demonstrations", "imitation", "rl", "evaluation")


class RetrainError(ValueError):
    """The inputs cannot give a candidate (no demonstrations, no episodes)."""


@dataclass(frozen=True)
class RetrainBudget:
    """How much work one retraining may do; the defaults are the shipped model's run."""

    imitation_epochs: int = 20
    updates: int = 80
    """PPO updates (0: imitation only)."""
    episodes_per_update: int = 2
    jobs: int = 80
    """Jobs per simulated episode."""
    validation_episodes: int = 4
    """Episodes scoring PPO checkpoints every `validate_every` updates (0: keep the last)."""
    validate_every: int = 5
    held_out_episodes: int = 5
    """Episodes of the final verdict against the incumbent (at least 1)."""
    max_records: int = 20_000
    """Most decision records read from the log (the newest of the window are dropped)."""


@dataclass(frozen=True)
class EpisodeSets:
    """The simulated episodes of one retraining: RL, checkpoint validation, verdict."""

    training: Sequence[EpisodeSpec]
    validation: Sequence[EpisodeSpec]
    held_out: Sequence[EpisodeSpec]

    @classmethod
    def for_budget(cls, budget: RetrainBudget) -> EpisodeSets:
        """The default windows of the shared traces (docs/dl2.md), cut to the budget."""
        return cls(
            training=training_episodes(budget.jobs),
            validation=validation_episodes(budget.jobs)[: budget.validation_episodes],
            held_out=held_out_episodes(budget.jobs)[: budget.held_out_episodes],
        )


@dataclass(frozen=True)
class RetrainResult:
    model: Dl2Model
    comparison: Comparison
    records: int
    """Decision records read."""
    demonstrations: int
    """Inferences imitated."""
    timings_s: dict[str, float] = field(default_factory=dict)
    imitation_log: list[dict[str, float]] = field(default_factory=list)
    ppo_log: list[dict[str, float]] = field(default_factory=list)

    @property
    def candidate_wins(self) -> bool:
        return self.comparison.candidate_wins

    def metrics(self) -> dict[str, float | int | bool]:
        """Flat numbers for the version's metadata and the retrain job's `metrics`."""
        out: dict[str, float | int | bool] = dict(self.comparison.metrics())
        out["records"] = self.records
        out["demonstrations"] = self.demonstrations
        if self.imitation_log:
            out["imitation_accuracy"] = self.imitation_log[-1]["accuracy"]
            out["imitation_loss"] = self.imitation_log[-1]["loss"]
        out["ppo_updates"] = len(self.ppo_log)
        for stage, seconds in self.timings_s.items():
            out[f"{stage}_s"] = round(seconds, 3)
        return out


def retrain(
    records: Iterable[Record],
    incumbent: Dl2Model,
    budget: RetrainBudget,
    *,
    seed: int = 0,
    start: Start = "incumbent",
    episodes: EpisodeSets | None = None,
    on_progress: Progress | None = None,
) -> RetrainResult:
    """A candidate DL2 model from decision records, judged against `incumbent`.

    Raises :class:`RetrainError` when the records teach nothing while imitation
    is asked for (none has a scaling DL2 can replay), or when there is no
    held-out episode to judge on. `incumbent` is not changed.
    """
    report = on_progress or (lambda _stage, _fraction: None)
    sets = episodes or EpisodeSets.for_budget(budget)
    if not sets.held_out:
        raise RetrainError("no held-out episode to judge the candidate on")
    if budget.updates > 0 and not sets.training:
        raise RetrainError("no training episode for the RL stage")
    timings: dict[str, float] = {}
    config = incumbent.config

    with one_thread():
        clock = time.perf_counter()
        report("demonstrations", 0.0)
        rows = list(records)
        data = demonstrations(rows, config)
        timings["demonstrations"] = time.perf_counter() - clock
        report("demonstrations", 1.0)
        if budget.imitation_epochs > 0 and len(data) == 0:
            raise RetrainError(
                f"the {len(rows)} decision record(s) hold no scaling DL2 can imitate "
                "(decisions without a scaling stage, or where no job could grow)"
            )

        clock = time.perf_counter()
        if start == "incumbent":
            candidate = Dl2Model.from_bytes(incumbent.to_bytes())
        else:
            candidate = Dl2Model.initial(config, seed=seed)
        report("imitation", 0.0)
        epochs = budget.imitation_epochs
        imitation_log = imitate(
            candidate,
            data,
            ImitationArgs(epochs=epochs, seed=seed),
            on_epoch=lambda row: report("imitation", (row["epoch"] + 1) / epochs),
        )
        report("imitation", 1.0)
        timings["imitation"] = time.perf_counter() - clock

    clock = time.perf_counter()
    report("rl", 0.0)
    ppo_log: list[dict[str, float]] = []
    if budget.updates > 0:
        ppo_args = PpoArgs(
            seed=seed,
            updates=budget.updates,
            episodes_per_update=budget.episodes_per_update,
            validate_every=budget.validate_every if sets.validation else 0,
        )

        def after_update(row: dict[str, float]) -> None:
            report("rl", (row["update"] + 1) / budget.updates)

        ppo_log = train_ppo(
            candidate, sets.training, ppo_args, validation=sets.validation, on_update=after_update
        )
    report("rl", 1.0)
    timings["rl"] = time.perf_counter() - clock

    clock = time.perf_counter()
    report("evaluation", 0.0)
    with one_thread():
        comparison = compare(candidate, incumbent, sets.held_out)
    timings["evaluation"] = time.perf_counter() - clock
    report("evaluation", 1.0)
    return RetrainResult(
        model=candidate,
        comparison=comparison,
        records=len(rows),
        demonstrations=len(data),
        timings_s=timings,
        imitation_log=imitation_log,
        ppo_log=ppo_log,
    )


def budget_dict(budget: RetrainBudget) -> dict[str, int]:
    """The budget as JSON, for a version's metadata."""
    return {k: int(v) for k, v in asdict(budget).items()}
