"""DL2 playing a simulated episode: sampled actions, their log-probabilities, the rewards.

The simulator stands in for the cluster (Peng et al., 2019, §4.3 trains DL2
online on the live cluster; a simulator gives the same interface without one).
Each round, the engine runs the `dl2` profile exactly as it serves, except that
its scaling stage samples from the policy instead of taking the most likely
action, and records every inference. The reward of a round is the paper's by
default: the progress every job made until the next round, each as a fraction of its
total work, summed (§4.1). A job absent from the next snapshot finished. The other
reward, `time-in-system`, is the jobs' summed JCT itself, spread over the rounds
(:func:`time_in_system_rewards`).

The policy's round loop is :func:`policies.learned.dl2.features.play`, the very
one the served policy runs; only the chooser differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, cast

import numpy as np

from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.decision import ScalingResult, Stage
from policies.engine import Fallbacks, Pipeline
from policies.learned.dl2.features import Allocation, play
from policies.learned.dl2.network import Dl2Model
from policies.model import Job, Snapshot
from policies.profiles import PolicyChoice, Profile
from policies.protocols import Context, ScalingPolicy
from policies.registry import Registry, build_registry
from policies.scaling.dl2 import Dl2Params, Dl2Scaling
from simulator.metrics import JobRecord, SimulationResult
from training.dl2.episodes import EpisodeSpec, dl2_profile

Reward = Literal["progress", "time-in-system"]
"""What a round's reward measures: the paper's summed progress, or the time the jobs
spend in the system (:func:`time_in_system_rewards`)."""
REWARDS: tuple[Reward, ...] = ("progress", "time-in-system")


@dataclass(frozen=True)
class Step:
    """One inference: what the policy saw, what it did, how likely that was."""

    state: np.ndarray
    mask: np.ndarray
    action: int
    log_prob: float
    round: int


@dataclass
class Episode:
    """Everything a trainer needs from one episode."""

    spec: EpisodeSpec
    steps: list[Step] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    """One per round, until the next round (or the episode's end): the summed normalised
    progress, or minus the jobs' hours in the system (the episode's `reward`)."""
    times: list[float] = field(default_factory=list)
    """The clock at each round."""
    result: SimulationResult | None = None


class SampledDl2Scaling:
    """DL2 scaling that samples its actions and records each inference (training only)."""

    name: ClassVar[str] = Dl2Scaling.name
    version: ClassVar[str] = Dl2Scaling.version
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = "DL2 sampling from its policy, for training."
    source: ClassVar[str] = Dl2Scaling.source
    Params: ClassVar[type[Dl2Params]] = Dl2Params

    def __init__(
        self,
        model: Dl2Model,
        rng: np.random.Generator,
        *,
        floor: FloorParams = DEFAULT_FLOOR,
    ) -> None:
        self.model = model
        self.rng = rng
        self.floor = floor
        self.steps: list[Step] = []
        self.round = 0

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        allocation = Allocation(ctx.snapshot, jobs, self.model.config, floor=self.floor)

        def choose(state: np.ndarray, mask: np.ndarray) -> int:
            # The served inference path (NumPy on the module's parameters), sampled.
            logits = np.where(mask, self.model.state_logits(state), -np.inf)
            shifted = logits - logits.max()
            log_probs = shifted - np.log(np.exp(shifted).sum())
            action = int(self.rng.choice(len(log_probs), p=np.exp(log_probs)))
            self.steps.append(Step(state, mask, action, float(log_probs[action]), self.round))
            return action

        play(allocation, choose)
        return allocation.results("sampling")


def dl2_pipeline(
    scaling: ScalingPolicy, registry: Registry | None = None, ordering: PolicyChoice | None = None
) -> Pipeline:
    """The shipped `dl2` profile with `scaling` in place of its policy and no fallback
    (and `ordering` in place of its ordering, when given).

    Training must see a fault, not a silent DRF answer.
    """
    reg = registry or build_registry()
    profile: Profile = dl2_profile(reg, ordering)
    built = Pipeline.build(profile, reg)
    return replace(built, scaling=scaling, fallbacks=Fallbacks())


def progress_reward(before: Snapshot, after: Snapshot | None) -> float:
    """Summed fraction of its total work each job of `before` did until `after`.

    A job missing from `after` (or `after` None, at the end) finished: its
    remaining work counts in full. Jobs without a known total contribute nothing.
    """
    later = after.jobs_by_id if after is not None else {}
    total = 0.0
    for job in before.jobs:
        if job.total_work is None:
            continue
        now = later.get(job.id)
        done = job.total_work if now is None else min(now.work_done, job.total_work)
        total += max(0.0, done - job.work_done) / job.total_work
    return total


def time_in_system_rewards(
    times: Sequence[float], jobs: Sequence[JobRecord], end_s: float
) -> list[float]:
    """Per round, minus the hours the episode's jobs spent in the system from that round
    to the next (the last round: to `end_s`).

    Ours, not the paper's. The jobs' summed JCT is the integral over time of how many
    jobs are in the system (submitted, not finished), so these rewards sum to minus the
    jobs' summed JCT in hours, and a policy that maximises them minimises the mean JCT
    itself (the quantity DL2 is judged on), where the paper's progress reward counts a
    fraction of a long job's work as much as the same fraction of a short one's. Worked
    out from each job's submission and completion once the episode is over, because
    the simulator skips rounds in which nothing could change: a job may arrive or
    finish between two rounds. A job that never finished counts until `end_s`.
    """
    if not times:
        return []
    bounds = np.append(np.asarray(times, dtype=np.float64), max(end_s, times[-1]))
    submit = np.array([j.submit_s for j in jobs], dtype=np.float64)
    finish = np.array([end_s if j.finish_s is None else j.finish_s for j in jobs], dtype=np.float64)
    # Each job's overlap with each round's interval: a (round, job) table.
    starts = np.maximum(bounds[:-1, None], submit[None, :])
    stops = np.minimum(bounds[1:, None], finish[None, :])
    hours = np.clip(stops - starts, 0.0, None).sum(axis=1) / 3600.0
    return [-float(h) for h in hours]


def play_episode(
    spec: EpisodeSpec,
    model: Dl2Model,
    rng: np.random.Generator,
    *,
    registry: Registry | None = None,
    floor: FloorParams = DEFAULT_FLOOR,
    reward: Reward = "progress",
) -> Episode:
    """Run one episode with the policy sampling from `rng`; rewards and steps per round."""
    scaling = SampledDl2Scaling(model, rng, floor=floor)
    pipeline = dl2_pipeline(cast(ScalingPolicy, scaling), registry, spec.ordering)
    sim = spec.simulation()
    episode = Episode(spec=spec)
    snapshot = sim.reset(seed=spec.seed)
    while snapshot is not None:
        decision = pipeline.decide(
            snapshot, seed=sim.round_seed(), decision_id=f"train-{scaling.round}", explain=False
        )
        following, _ = sim.step(decision)
        if reward == "progress":
            episode.rewards.append(progress_reward(snapshot, following))
        episode.times.append(snapshot.now)
        scaling.round += 1
        snapshot = following
    episode.steps = scaling.steps
    episode.result = sim.result()
    if reward == "time-in-system":
        # After the last round the clock stands at the episode's last event.
        episode.rewards = time_in_system_rewards(episode.times, episode.result.jobs, sim.now)
    return episode


def discounted_returns(
    rewards: Sequence[float], times: Sequence[float], horizon_s: float
) -> list[float]:
    """Per round, its reward plus the later ones discounted by exp(−Δt / horizon_s).

    Rounds are events, not fixed slots, so the discount runs on the simulated clock:
    progress an hour later is worth e^(−1 h / horizon) of progress now.
    """
    out = [0.0] * len(rewards)
    following = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        if k + 1 < len(rewards):
            following *= float(np.exp(-(times[k + 1] - times[k]) / horizon_s))
        following += rewards[k]
        out[k] = following
    return out
