"""Episodes of the accelerator simulator played by a RELMAS network (or a teacher), recorded.

The recording policy is a :class:`policies.protocols.DispatchPolicy` driven through
:func:`policies.dispatch.run.run_dispatch`, the path the service takes; it keeps each
round's candidate pairs, features and picks for the trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from policies.decision import Stage
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView, progress_rate
from policies.learned.relmas.features import Round, build_round, choice_from_picks, pick_order
from policies.learned.relmas.network import RelmasModel
from policies.protocols import NoParams
from simulator.accelerator.costs import CostTable
from simulator.accelerator.dispatchers import PolicyDispatcher
from simulator.accelerator.system import RunResult, run_episode
from simulator.accelerator.workload import Arrival, Scenario, arrivals

Scorer = Callable[[DispatchView, Round], np.ndarray]


def teacher_scores(view: DispatchView, round_: Round) -> np.ndarray:
    """The imitation teacher (ours): requests that can still meet their deadline first,
    by deadline, then the late ones by deadline; each to the pair whose layer would
    finish earliest (busy sub-accelerators and bandwidth counted, as in eft_greedy)."""
    ready = view.ready
    rank_of = {
        r.id: i
        for i, r in enumerate(
            sorted(ready, key=lambda r: (0 if r.feasible else 1, r.request.deadline, r.index))
        )
    }
    online = [a for a in view.accelerators if a.online]
    scores = np.empty(len(round_.request_of), dtype=np.float64)
    for pair in range(len(scores)):
        info = ready[int(round_.request_of[pair])]
        accelerator = online[int(round_.accelerator_of[pair])]
        cost = info.layer.by_style[accelerator.style]
        rate = progress_rate(view.bandwidth_in_use_gbps + cost.bandwidth_gbps, view.budget_gbps)
        finish = max(view.free_at[accelerator.id] - view.now, 0.0) + cost.latency_s / rate
        scores[pair] = -1000.0 * rank_of[info.id] - finish / (finish + 1.0)
    return scores


@dataclass
class RecordedRound:
    time: float
    features: np.ndarray
    request_of: np.ndarray
    accelerator_of: np.ndarray
    picks: list[int]


@dataclass
class RecordingPolicy:
    """Scores rounds with a network (sampled or greedy) or a teacher, and keeps them."""

    name: ClassVar[str] = "relmas-training"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.DISPATCH
    summary: ClassVar[str] = "RELMAS while training"
    source: ClassVar[str] = "training.relmas"
    Params: ClassVar[type[NoParams]] = NoParams

    styles: tuple[str, ...]
    model: RelmasModel | None = None
    teacher: Scorer | None = None
    sample: bool = False
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    rounds: list[RecordedRound] = field(default_factory=list)

    def dispatch(self, view: DispatchView) -> DispatchChoice:
        round_ = build_round(view, self.styles)
        if self.teacher is not None:
            scores = self.teacher(view, round_)
        else:
            assert self.model is not None
            scores = self.model.scores(round_.features).astype(np.float64)
            if self.sample:
                # Gumbel-perturbed scores taken in order: a sample of the Plackett-Luce
                # sequence the trainer scores.
                scores = scores + self.rng.gumbel(size=scores.shape)
        picks = pick_order(round_, scores)
        if len(round_.features) > 1 and picks:
            self.rounds.append(
                RecordedRound(
                    view.now, round_.features, round_.request_of, round_.accelerator_of, picks
                )
            )
        return choice_from_picks(round_, picks, "relmas-training")


@dataclass
class Episode:
    result: RunResult
    rounds: list[RecordedRound]

    @property
    def sla(self) -> float:
        return sum(r.met for r in self.result.requests) / max(1, len(self.result.requests))


def play(
    scenario: Scenario,
    costs: CostTable,
    seed: int,
    policy: RecordingPolicy,
    max_requests: int | None = None,
    *,
    work: Sequence[Arrival] | None = None,
) -> Episode:
    """One episode of `scenario` (its first `max_requests` arrivals when given): arrivals
    drawn for `seed`, or `work` (a logged replay) when given."""
    policy.rounds = []
    dispatcher = PolicyDispatcher(policy.name, policy)
    work = list(work if work is not None else arrivals(scenario, costs, seed))[:max_requests]
    result = run_episode(scenario, costs, work, dispatcher)
    return Episode(result=result, rounds=policy.rounds)
