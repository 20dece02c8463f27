"""Fitting the placement head's attitude (patience θ, value of time λ, risk κ) by direct search.

MAPPO (:mod:`training.dual_agent.mappo`) credits these three scalars poorly. The
patience is the clearest case: a job kept waiting for a faster GPU type pays off
hours later, when it finishes sooner, while the Gaussian on the patience's
log-odds is sampled once per round and its advantage comes from the centralised
critic's estimate of that round; 40 updates moved θ from 0.2 to 0.10 and lost
JCT (docs/dual-agent.md). Three scalars need no gradient, though: like the GP's
hyperparameters, fitted on the training episodes' own feedback
(:mod:`training.dual_agent.gp_fit`), they are set by what they do over whole
episodes. A coordinate search (ours): for each scalar in turn, every value of its
grid is served with the others held, on the same training runs (common random
numbers, so the differences are the attitude's and not the runs'), and the value
with the lowest criterion is kept when it beats the current one; a few passes over
the three. The ordering network and the GP are left as they are.

Two criteria (ours), lower is better:

* `objective`: the mean shared objective, fee plus `jct_weight` dollars per
  job-hour of completion time (the RL reward's);
* `weakest-margin` (tried twice, set down before it was scored, and not kept:
  docs/dual-agent.md): the target is a lower fee *and* a lower mean JCT than each
  baseline (Tiresias with consolidated placement, and the heterogeneity-aware
  greedy placement), judged on paired runs in standard errors. So the baselines
  play the same runs once, and a candidate's criterion is minus the weakest of its
  four paired margins (fee and mean JCT, against each baseline), each the mean
  per-run difference over its standard error. The standard error of the fee
  difference is itself noisy (a few runs with large fees carry it), and the search
  chases that noise;
* `weakest-share` (the default since 2026-11-27): the same four margins, each the
  baseline's total over the runs less the candidate's, as a share of the
  baseline's total. No estimated spread enters it, and it weighs the fee and the
  JCT halves of the target in the same unit.

The runs are training windows at their own seeds offset by `SEED_OFFSET` per
repetition: not the training episodes' own seeds, which the choice between
trained models scores, and far from both held-out sets' (900 to 1,109 and 3,000 to 3,235).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import torch

from policies.learned.dual_agent.network import DualAgentModel
from simulator.deciders import EngineDecider
from training.dl2.episodes import EpisodeSpec
from training.dual_agent.evaluation import Score, decider, score

Criterion = Callable[[DualAgentModel], float]
"""What the search lowers: a model served on the search's runs, scored (lower is better)."""
CriterionName = Literal["objective", "weakest-margin", "weakest-share"]
BASELINES = ("tiresias", "hetero-greedy")
"""The profiles the dual agent must beat on fee and JCT (docs/dual-agent.md, *Evidence*)."""

SEED_OFFSET = 5000

GRIDS: dict[str, tuple[float, ...]] = {
    "patience": (0.05, 0.1, 0.15, 0.2, 0.25, 0.27, 0.3, 0.35, 0.45, 0.6),
    "time_value": (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0),
    "risk": (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5),
}
"""Values tried per scalar (ours): θ up to 0.6, past Gavel's slowest family-on-K80 ratio
(0.15) and its fastest (0.29), with 0.27 between the LM's (0.254) and the Transformer's
(0.287), so that one value lets the Transformer start on a K80, its cheapest type per
unit of work, while the LM and the ResNets wait (docs/dual-agent.md); λ from nearly pure
speed per dollar to a value of time above a V100's price (about 2.5 $/GPU-h); κ from
strongly risk-averse to optimistic."""


def attitude(model: DualAgentModel) -> dict[str, float]:
    head = model.placement
    return {
        "patience": float(head.patience.detach()[0]),
        "time_value": float(head.time_value.detach()[0]),
        "risk": float(head.risk.detach()[0]),
    }


def set_attitude(model: DualAgentModel, name: str, value: float) -> None:
    """Set one scalar of the placement head through its raw parameter."""
    head = model.placement
    with torch.no_grad():
        if name == "patience":
            head.raw_patience.fill_(math.log(value / (1.0 - value)))
        elif name == "time_value":
            head.raw_time_value.fill_(math.log(math.expm1(value)))
        elif name == "risk":
            head.risk.fill_(value)
        else:
            raise ValueError(f"no attitude scalar {name!r}")


def fit_runs(episodes: Sequence[EpisodeSpec], repetitions: int) -> list[EpisodeSpec]:
    return [
        dataclasses.replace(episode, seed=episode.seed + SEED_OFFSET * (r + 1))
        for r in range(repetitions)
        for episode in episodes
    ]


def play(engine: EngineDecider, runs: Sequence[EpisodeSpec], jct_weight: float) -> list[Score]:
    """`engine` (a model's or a baseline's decider) on every run."""
    return [score(engine, run, jct_weight) for run in runs]


def fees_and_jcts(played: Sequence[Score]) -> tuple[list[float], list[float]]:
    """The fee and the mean JCT of each run played."""
    return [s.fee_usd for s in played], [s.avg_jct_s for s in played]


def baseline_plays(
    runs: Sequence[EpisodeSpec], jct_weight: float
) -> list[tuple[list[float], list[float]]]:
    """Each of `BASELINES`, in order, on every run: its fees and mean JCTs."""
    return [fees_and_jcts(play(decider(profile=p), runs, jct_weight)) for p in BASELINES]


def paired_margin(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """How far `ours` is below `theirs`, paired run by run, in standard errors."""
    diffs = [b - a for a, b in zip(ours, theirs, strict=True)]
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    if se > 0:
        return mean / se
    # Every run differs by the same amount: beyond any spread, whichever way it goes.
    return math.copysign(math.inf, mean) if mean else 0.0


def share_margin(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """How far the sum of `ours` is below the sum of `theirs`, as a share of theirs."""
    total = math.fsum(theirs)
    if total <= 0:
        return 0.0
    return (total - math.fsum(ours)) / total


class Judge:
    """A criterion (module docstring) on fixed runs: the baselines play them once, when the
    judge is made; each model judged plays them afresh. The attitude search lowers
    :meth:`value`, and a retraining's verdict compares two models by it on held-out runs,
    so a candidate is judged by what shaped it."""

    def __init__(self, name: CriterionName, runs: Sequence[EpisodeSpec], jct_weight: float):
        self.name = name
        self.runs = tuple(runs)
        self.jct_weight = jct_weight
        self.margin = paired_margin if name == "weakest-margin" else share_margin
        self.baselines = [] if name == "objective" else baseline_plays(runs, jct_weight)

    def scores(self, model: DualAgentModel) -> list[Score]:
        """`model` served on every run (a fresh decider: no GP state carried over)."""
        return play(decider(model), self.runs, self.jct_weight)

    def value(self, played: Sequence[Score]) -> float:
        """The criterion of runs played by a model; lower is better."""
        if self.name == "objective":
            return statistics.fmean(s.objective for s in played)
        fee, jct = fees_and_jcts(played)
        return -min(
            min(self.margin(fee, their_fee), self.margin(jct, their_jct))
            for their_fee, their_jct in self.baselines
        )

    def __call__(self, model: DualAgentModel) -> float:
        return self.value(self.scores(model))


def fit_attitude(
    model: DualAgentModel,
    judge: Criterion,
    *,
    passes: int,
    grids: Mapping[str, Sequence[float]] | None = None,
    on_step: Callable[[float], None] | None = None,
) -> list[dict[str, float]]:
    """Coordinate search of θ, λ, κ lowering `judge`, in place; one row per scalar searched
    (its value after the search of it, and the criterion's value as `criterion`)."""
    grids = GRIDS if grids is None else grids
    steps = max(1, passes * sum(len(values) for values in grids.values()))
    done = 0
    best = judge(model) if passes > 0 else math.nan
    log: list[dict[str, float]] = []
    for sweep in range(passes):
        for name, values in grids.items():
            kept = {k: v.detach().clone() for k, v in model.placement.state_dict().items()}
            chosen: float | None = None
            chosen_score = best
            for value in values:
                set_attitude(model, name, value)
                candidate = judge(model)
                if candidate < chosen_score:
                    chosen, chosen_score = value, candidate
                done += 1
                if on_step is not None:
                    on_step(done / steps)
            if chosen is None:
                # Nothing beat the current value: keep it exactly, not its grid neighbour.
                model.placement.load_state_dict(kept)
            else:
                set_attitude(model, name, chosen)
            best = chosen_score
            log.append({"pass": float(sweep), name: attitude(model)[name], "criterion": best})
    return log
