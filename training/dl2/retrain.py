"""Retraining DL2 from the decision log: imitation, PPO, the verdict against the incumbent.

One pure function, :func:`retrain`, shared by the `arbiter worker` queue and the
`arbiter train dl2` command: it takes decision records (rows of the `decisions`
table as JSON, or model objects), the incumbent model (the active version, or the
shipped one) and a budget, and returns the candidate model with its metrics. It
stores nothing and activates nothing; the caller does (DESIGN §5).

Stages, each reported to `on_progress(stage, fraction of that stage)`:

1. `demonstrations`: the records replayed through DL2's round
   (:func:`training.dl2.imitation.demonstrations`), one sample per inference;
   the jobs their snapshots name cut into episodes
   (:func:`training.dl2.logged.logged_episodes`).
2. `imitation`: cross-entropy on them (§4.2), starting from the incumbent's
   weights (`start="incumbent"`: the log refines what is served) or from fresh
   ones (`"scratch"`: the paper's order, imitation before RL).
3. `rl`: PPO in the simulator (§4.3) on the logged jobs' episodes when the log
   holds at least one full episode (`budget.jobs` jobs of one cluster), else on
   the shared-trace training windows; the best validated checkpoint is kept
   when the budget has validation episodes. With `budget.logged_held_out`, a
   cluster whose log fills two episodes or more keeps its newest one out of RL.
4. `evaluation`: :func:`training.dl2.evaluation.compare` of the candidate against
   the incumbent on held-out episodes, and on those newest logged ones;
   `candidate_wins` (both verdicts) is the activation rule.

Validation and the shared-trace verdict run on fixed windows of the shared traces
(:mod:`training.dl2.episodes`), sized by the budget: the same episodes for every
retraining, so versions' scores compare, and never the episodes RL trained on. The
logged verdict judges on the cluster's own newest jobs, which the candidate will be
served, and which RL never played.

The simulated episodes of stages 3 and 4 (rollouts, validation, verdict) run on
the caller's :class:`simulator.sweep.Runner`: in this process by default, or on
local processes or Ray (`arbiter train dl2 --processes N | --ray ADDRESS`); the
candidate is the same on every runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from policies.learned.dl2.network import Dl2Model
from simulator.sweep import InProcess, Runner
from training.dl2.episodes import (
    EpisodeSpec,
    ServedSetting,
    held_out_episodes,
    training_episodes,
    validation_episodes,
)
from training.dl2.evaluation import Comparison, compare
from training.dl2.imitation import ImitationArgs, Record, demonstrations, imitate
from training.dl2.logged import LoggedEpisodes, logged_episodes
from training.dl2.reinforce import PpoArgs, one_thread, train_ppo
from training.dl2.trainer import Dl2Budget
from training.registry import TrainingError

Progress = Callable[[str, float], None]
"""`(stage, fraction of the stage done)`; stages in order: see :data:`STAGES`."""

Start = Literal["incumbent", "scratch"]

RlEpisodes = Literal["logged", "shared-traces", "none"]
"""Where the RL stage's episodes came from (`none`: no PPO update in the budget)."""

STAGES = ("demonstrations", "imitation", "rl", "evaluation")


class RetrainError(TrainingError):
    """The inputs cannot give a candidate (no demonstrations, no episodes)."""


RetrainBudget = Dl2Budget
"""The budget of one retraining: DL2's budget in the trainer registry (one schema for the
admin API, the command line and this function)."""


@dataclass(frozen=True)
class EpisodeSets:
    """The simulated episodes of one retraining: RL, checkpoint validation, verdict."""

    training: Sequence[EpisodeSpec]
    """RL's episodes when the log holds too few jobs for one episode of its own."""
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
    rl_episodes: RlEpisodes = "none"
    logged: LoggedEpisodes | None = None
    """The logged jobs and the episodes cut from them (whether RL used them or not)."""
    log_verdict: Comparison | None = None
    """The verdict on the log's newest windows, which RL never played (None: no cluster's
    log filled two windows, or the budget keeps none out)."""

    @property
    def candidate_wins(self) -> bool:
        """The candidate wins on the shared-trace held-out windows, and on the log's own
        newest windows when there are any."""
        return self.comparison.candidate_wins and (
            self.log_verdict is None or self.log_verdict.candidate_wins
        )

    def metrics(self) -> dict[str, float | int | bool | str]:
        """Flat values for the version's metadata and the retrain job's `metrics`."""
        out: dict[str, float | int | bool | str] = dict(self.comparison.metrics())
        if self.log_verdict is not None:
            out.update({f"log_verdict_{k}": v for k, v in self.log_verdict.metrics().items()})
        out["candidate_wins"] = self.candidate_wins
        out["records"] = self.records
        out["demonstrations"] = self.demonstrations
        out["rl_episodes"] = self.rl_episodes
        if self.logged is not None:
            out["logged_jobs"] = self.logged.jobs
            out["logged_jobs_skipped"] = self.logged.skipped
            out["logged_jobs_left_over"] = self.logged.left_over
            out["logged_jobs_measured"] = self.logged.measured
            out["logged_jobs_interrupted"] = self.logged.interrupted
            out["logged_episodes"] = len(self.logged.episodes)
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
    runner: Runner | None = None,
    setting: ServedSetting | None = None,
) -> RetrainResult:
    """A candidate DL2 model from decision records, judged against `incumbent`.

    RL plays episodes of the records' own jobs when they fill at least one
    (:func:`training.dl2.logged.logged_episodes`), else `episodes.training`.
    Raises :class:`RetrainError` when the records teach nothing while imitation
    is asked for (none has a scaling DL2 can replay), when there is no
    held-out episode to judge on, or when RL has no episode to play.
    `incumbent` is not changed. `runner` plays the simulated episodes (default: in
    this process). `setting` is the served profile's (default: the `dl2` profile's): every
    episode, logged or simulated, plays behind its ordering, and the floor is the
    candidate's, the incumbent's and the replayed records'.
    """
    report = on_progress or (lambda _stage, _fraction: None)
    served = setting or ServedSetting.of("dl2")
    floor = served.floor
    given = episodes or EpisodeSets.for_budget(budget)
    sets = EpisodeSets(
        training=served.applied(given.training),
        validation=served.applied(given.validation),
        held_out=served.applied(given.held_out),
    )
    if not sets.held_out:
        raise RetrainError("no held-out episode to judge the candidate on")
    timings: dict[str, float] = {}
    config = incumbent.config

    with one_thread():
        clock = time.perf_counter()
        report("demonstrations", 0.0)
        rows = list(records)
        data = demonstrations(rows, config, floor=floor)
        logged = logged_episodes(rows, budget.jobs, seed=seed)
        timings["demonstrations"] = time.perf_counter() - clock
        report("demonstrations", 1.0)
        if budget.imitation_epochs > 0 and len(data) == 0:
            raise RetrainError(
                f"the {len(rows)} decision record(s) hold no scaling DL2 can imitate "
                "(decisions without a scaling stage, or where no job could grow)"
            )
        # Each cluster's newest window judges the candidate on the cluster's own jobs: RL
        # must not play it then.
        own, log_held_out = (
            logged.split_newest() if budget.logged_held_out else (logged.episodes, ())
        )
        own, log_held_out = tuple(served.applied(own)), tuple(served.applied(log_held_out))
        rl_episodes: RlEpisodes = "none"
        training: Sequence[EpisodeSpec] = ()
        if budget.updates > 0:
            rl_episodes = "logged" if own else "shared-traces"
            training = own or sets.training
            if not training:
                raise RetrainError(
                    f"no episode for the RL stage: the log's {logged.jobs} usable job(s) "
                    f"fill no episode of {budget.jobs}, and no shared-trace episode was given"
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

    run = runner or InProcess()
    with run.started():  # one pool (or Ray instance) for RL and the verdict
        clock = time.perf_counter()
        report("rl", 0.0)
        ppo_log: list[dict[str, float]] = []
        if budget.updates > 0:
            ppo_args = PpoArgs(
                seed=seed,
                updates=budget.updates,
                episodes_per_update=budget.episodes_per_update,
                validate_every=budget.validate_every if sets.validation else 0,
                floor=floor,
            )

            def after_update(row: dict[str, float]) -> None:
                report("rl", (row["update"] + 1) / budget.updates)

            ppo_log = train_ppo(
                candidate,
                training,
                ppo_args,
                validation=sets.validation,
                on_update=after_update,
                runner=run,
            )
        report("rl", 1.0)
        timings["rl"] = time.perf_counter() - clock

        clock = time.perf_counter()
        report("evaluation", 0.0)
        with one_thread():
            comparison = compare(candidate, incumbent, sets.held_out, runner=run, floor=floor)
            log_verdict = (
                compare(candidate, incumbent, log_held_out, runner=run, floor=floor)
                if log_held_out
                else None
            )
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
        rl_episodes=rl_episodes,
        logged=logged,
        log_verdict=log_verdict,
    )
