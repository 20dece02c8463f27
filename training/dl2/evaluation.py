"""A candidate DL2 model against the active one (or a heuristic) on held-out episodes.

Retraining activates a candidate only if it wins (DESIGN §5); this is the judge.
Each contender runs every held-out episode through the engine exactly as it
would be served: the `dl2` profile with the contender's model, greedy, with the
profile's fallback in place (a model that falls back is charged for it: the
fallbacks are counted), or any shipped profile by name for a heuristic baseline.
The score is the mean over episodes of each episode's average job completion
time (the paper's metric, §5), so every episode weighs the same whatever its
number of jobs; lower is better. Episodes are independent tasks, so a
:class:`simulator.sweep.Runner` can play them in this process, on local processes
or on Ray; the score is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.decision import Decision
from policies.engine import Pipeline
from policies.learned.dl2.network import Dl2Model
from policies.model import Snapshot
from policies.profiles import PolicyChoice, Profile, load_profiles
from policies.protocols import ScalingPolicy
from policies.registry import Registry, build_registry
from policies.scaling.dl2 import Dl2Params, Dl2Scaling
from simulator.sweep import InProcess, Runner
from training.dl2.episodes import EpisodeSpec, dl2_profile

Contender = Dl2Model | str | Profile
"""A DL2 model, or a profile (by name if shipped): a heuristic baseline."""


@dataclass(frozen=True)
class EpisodeScore:
    episode: str
    avg_jct_s: float
    jobs_completed: int
    fallbacks: int
    avg_queue_s: float | None = None
    """Mean wait before a job first starts: how contended the episode was."""
    preemptions: int = 0
    """Times a running job was stopped to make room (the simulator's `preemptions`)."""


@dataclass(frozen=True)
class Score:
    """One contender over the held-out episodes."""

    name: str
    mean_avg_jct_s: float
    episodes: tuple[EpisodeScore, ...] = field(default=())

    @property
    def fallbacks(self) -> int:
        return sum(e.fallbacks for e in self.episodes)


@dataclass(frozen=True)
class Comparison:
    candidate: Score
    incumbent: Score

    @property
    def improvement(self) -> float:
        """Relative cut of the mean average JCT (0.1: the candidate is 10 % faster)."""
        if self.incumbent.mean_avg_jct_s <= 0:
            return 0.0
        return 1.0 - self.candidate.mean_avg_jct_s / self.incumbent.mean_avg_jct_s

    @property
    def candidate_wins(self) -> bool:
        """Strictly lower mean average JCT, and no more fallbacks than the incumbent."""
        return (
            self.candidate.mean_avg_jct_s < self.incumbent.mean_avg_jct_s
            and self.candidate.fallbacks <= self.incumbent.fallbacks
        )

    def metrics(self) -> dict[str, float | int | bool]:
        """Flat numbers for a model version's metadata or a retrain job's `metrics`."""
        return {
            "candidate_mean_avg_jct_s": self.candidate.mean_avg_jct_s,
            "incumbent_mean_avg_jct_s": self.incumbent.mean_avg_jct_s,
            "improvement": self.improvement,
            "candidate_fallbacks": self.candidate.fallbacks,
            "incumbent_fallbacks": self.incumbent.fallbacks,
            "episodes": len(self.candidate.episodes),
            "candidate_wins": self.candidate_wins,
        }


def contender_pipeline(
    contender: Contender,
    registry: Registry | None = None,
    *,
    floor: FloorParams = DEFAULT_FLOOR,
    ordering: PolicyChoice | None = None,
) -> Pipeline:
    """How a contender is served: `dl2` with its model (greedy, fallback kept), or a profile.

    `floor` is the model's (:class:`Dl2Params`), and so is `ordering` (the `dl2`
    profile's when None); a profile brings its own."""
    reg = registry or build_registry()
    if isinstance(contender, str):
        return Pipeline.build(load_profiles(reg)[contender], reg)
    if isinstance(contender, Profile):
        return Pipeline.build(contender, reg)
    built = Pipeline.build(dl2_profile(reg, ordering), reg)
    # The serving path, but no wall-clock budget: a slow CI machine must not change the score.
    params = Dl2Params(
        latency_budget_ms=float("inf"), use_shipped_model=False, **floor.model_dump()
    )
    policy = Dl2Scaling.with_model(contender, "candidate", params)
    return replace(built, scaling=cast(ScalingPolicy, policy))


@dataclass(frozen=True)
class _Scoring:
    """One episode to score, as a picklable task: a model travels as its bytes."""

    contender: bytes | str | Profile
    spec: EpisodeSpec
    registry: Registry | None
    floor: FloorParams = DEFAULT_FLOOR


def _score_episode(task: _Scoring) -> EpisodeScore:
    contender = task.contender
    pipeline = contender_pipeline(
        Dl2Model.from_bytes(contender) if isinstance(contender, bytes) else contender,
        task.registry,
        floor=task.floor,
        ordering=task.spec.ordering,
    )
    fallbacks = 0

    def decide(snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        nonlocal fallbacks
        decision = pipeline.decide(snapshot, seed=seed, decision_id=decision_id, explain=False)
        fallbacks += decision.fallback is not None
        return decision

    spec = task.spec
    metrics = spec.simulation().run(decide).metrics
    avg, queue = metrics["avg_jct_s"], metrics["avg_queue_s"]
    return EpisodeScore(
        episode=f"{spec.trace}@{spec.start}+{spec.jobs}",
        avg_jct_s=float(avg) if avg is not None else float("inf"),
        jobs_completed=int(metrics["jobs_completed"] or 0),
        fallbacks=fallbacks,
        avg_queue_s=float(queue) if queue is not None else None,
        preemptions=int(metrics["preemptions"] or 0),
    )


def score(
    contender: Contender,
    episodes: Sequence[EpisodeSpec],
    *,
    name: str | None = None,
    registry: Registry | None = None,
    runner: Runner | None = None,
    floor: FloorParams = DEFAULT_FLOOR,
) -> Score:
    """Run every episode with `contender` (on `runner`, default in this process); the mean
    of the episodes' average JCTs. `floor` applies to a model (`contender_pipeline`)."""
    given = contender.to_bytes() if isinstance(contender, Dl2Model) else contender
    tasks = [_Scoring(given, spec, registry, floor) for spec in episodes]
    scores = (runner or InProcess()).map(_score_episode, tasks)
    mean = sum(s.avg_jct_s for s in scores) / len(scores) if scores else float("inf")
    label = name or _label(contender)
    return Score(name=label, mean_avg_jct_s=mean, episodes=tuple(scores))


def compare(
    candidate: Dl2Model,
    incumbent: Contender,
    episodes: Sequence[EpisodeSpec],
    *,
    registry: Registry | None = None,
    runner: Runner | None = None,
    floor: FloorParams = DEFAULT_FLOOR,
) -> Comparison:
    """The candidate against the incumbent (the active model, or a heuristic's profile);
    `floor` is both models' (`contender_pipeline`)."""
    reg = registry or build_registry()
    return Comparison(
        candidate=score(
            candidate, episodes, name="candidate", registry=reg, runner=runner, floor=floor
        ),
        incumbent=score(
            incumbent,
            episodes,
            name=_label(incumbent) if not isinstance(incumbent, Dl2Model) else "incumbent",
            registry=reg,
            runner=runner,
            floor=floor,
        ),
    )


def _label(contender: Contender) -> str:
    if isinstance(contender, str):
        return contender
    if isinstance(contender, Profile):
        return contender.name
    return "candidate"
