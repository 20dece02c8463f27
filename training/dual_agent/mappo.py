"""Joint training of the two agents: MAPPO (centralised critic, decentralised actors).

Xing et al. (KDD 2023) learn ordering and placement jointly by multi-agent RL
because either learned alone ignores their cooperation. Their algorithm's details
are not available; we use MAPPO (Yu et al., "The Surprising Effectiveness of PPO
in Cooperative Multi-Agent Games", NeurIPS 2022 Datasets and Benchmarks): each
agent keeps its own actor and acts from its own observation (decentralised: the
served agents never need each other's state), one critic sees the global state
and gives both the same advantage of the shared reward (centralised training).
Why MAPPO: the reward is fully shared, the action spaces are continuous and
structured (a ranking, a machine preference vector), and on-policy PPO with a
clipped ratio is stable with the few, long episodes a simulator gives; it is
also what DL2's trainer here already does for one agent.

The actors' distributions (ours):

* ordering: a Plackett–Luce ranking of the waiting jobs with the network's
  scores as log-weights, sampled with Gumbel perturbations; its log-probability
  is `Σ_k [s_{o_k} − log Σ_{j ≥ k} e^{s_{o_j}}]`;
* placement: a Gaussian around the served preference of each machine,
  `μ + κσ − log(price + λ)`, with a learned standard deviation, and one more
  Gaussian, with its own learned width, around the log-odds of the patience `θ`
  (sampled once per round, for every job of the round); `κ`, `λ`, `θ` (and the
  widths) are the actor's parameters.

Rounds are events, so discounting runs on the simulated clock: `γ = e^{−Δt/H}`
between consecutive rounds (as DL2's trainer does), with GAE(λ) advantages.
The reads-like-the-paper structure follows cleanrl's `ppo.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from policies.learned.dual_agent.features import CLUSTER_FEATURES, JOB_FEATURES, JOB_SCALARS
from policies.learned.dual_agent.network import DualAgentModel
from training.dl2.episodes import EpisodeSpec
from training.dual_agent.env import MACHINE_OBS, DualAgentEnv, RoundInputs

GLOBAL_FEATURES = CLUSTER_FEATURES + 2 * JOB_FEATURES + MACHINE_OBS


@dataclass(frozen=True)
class MappoArgs:
    seed: int = 0
    updates: int = 10
    episodes_per_update: int = 1
    epochs: int = 4
    learning_rate: float = 3e-3
    placement_learning_rate: float = 3e-2
    """The placement actor has five scalars (κ, λ, θ, two widths): a larger step suits them."""
    clip: float = 0.2
    gae_lambda: float = 0.95
    horizon_s: float = 4 * 3600.0
    """Discount horizon: reward Δt later is worth e^(−Δt/H)."""
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    jct_weight: float = 2.0
    """Dollars per job-hour in the shared reward (fee + weight × JCT)."""
    train_ordering: bool = True
    train_placement: bool = True
    fixed_ordering: str = "model"
    """How an ordering that is not trained acts: its network's scores (`model`) or least
    attained service first (`least-attained`, Tiresias-like), for training placement alone."""


class Critic(nn.Module):
    """The centralised critic: the global state (both agents' views, pooled) → value."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(GLOBAL_FEATURES, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(state).squeeze(-1)
        return out


def global_state(inputs: RoundInputs) -> np.ndarray:
    jobs = inputs.jobs
    pooled = (
        np.concatenate([jobs.mean(0), jobs.max(0)])
        if len(jobs)
        else np.zeros(2 * JOB_FEATURES, dtype=np.float32)
    )
    machines = np.array(
        [inputs.mu.mean(), inputs.sigma.mean(), np.log(inputs.price).mean(), inputs.free.mean()]
    )
    return np.concatenate([inputs.cluster, pooled, machines]).astype(np.float32)


@dataclass
class Step:
    inputs: RoundInputs
    order: np.ndarray
    """Indices (into the round's jobs) of the waiting jobs, in the sampled order."""
    preference: np.ndarray
    log_prob_ordering: float
    log_prob_placement: float
    value: float
    reward: float = 0.0
    time: float = 0.0


@dataclass
class Rollout:
    steps: list[Step] = field(default_factory=list)
    fee: float = 0.0
    job_hours: float = 0.0


def ordering_log_prob(scores: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Plackett–Luce log-probability of `order` (indices into `scores`)."""
    if order.numel() == 0:
        return torch.zeros((), dtype=scores.dtype)
    ranked = scores[order]
    # log Σ_{j ≥ k} e^{s_j}: a reversed cumulative logsumexp.
    tails = torch.logcumsumexp(ranked.flip(0), 0).flip(0)
    return (ranked - tails).sum()


def placement_mean(model: DualAgentModel, inputs: RoundInputs) -> torch.Tensor:
    """The served action: each machine's preference, then the patience's log-odds."""
    head = model.placement
    mu = torch.from_numpy(inputs.mu).float()
    sigma = torch.from_numpy(inputs.sigma).float()
    price = torch.from_numpy(inputs.price).float()
    return torch.cat([head.scores(mu, sigma, price), head.raw_patience])


def _normal_log_prob(mean: torch.Tensor, std: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return -0.5 * ((value - mean) / std) ** 2 - torch.log(std) - 0.5 * math.log(2 * math.pi)


def placement_std(model: DualAgentModel, machines: int) -> torch.Tensor:
    """Per entry of the action: the machines' common width, then the patience's."""
    head = model.placement
    return torch.cat(
        [
            head.log_temperature.exp().clamp(1e-3, 5.0).expand(machines),
            head.log_patience_width.exp().clamp(1e-3, 5.0),
        ]
    )


ATTAINED = JOB_SCALARS.index("log_attained_gpu_h")
WAITING = JOB_SCALARS.index("log_waiting_h")


def least_attained_first(inputs: RoundInputs, waiting: np.ndarray) -> np.ndarray:
    """Tiresias's order without its queues: least attained service first, then the oldest."""
    jobs = inputs.jobs[waiting]
    keys = np.lexsort((-jobs[:, WAITING], jobs[:, ATTAINED]))
    ordered: np.ndarray = waiting[keys]
    return ordered


def play(
    env: DualAgentEnv,
    model: DualAgentModel,
    critic: Critic,
    rng: np.random.Generator,
    *,
    sample_ordering: bool = True,
    sample_placement: bool = True,
    fixed_ordering: str = "model",
) -> Rollout:
    """One episode; what the update needs, step by step.

    An agent being trained samples its action; one held fixed (trained separately)
    acts as served: the placement by its mean preference, the ordering by its
    scores, or least attained service first with `fixed_ordering="least-attained"`.
    """
    rollout = Rollout()
    env.reset()
    done = False
    while not done:
        inputs = env.inputs
        assert inputs is not None
        assert env.snapshot is not None
        with torch.no_grad():
            scores = model.scores(torch.from_numpy(inputs.jobs), torch.from_numpy(inputs.cluster))
            waiting = np.flatnonzero(inputs.waiting)
            if not sample_ordering and fixed_ordering == "least-attained":
                order = least_attained_first(inputs, waiting)
            else:
                keys = scores.numpy()[waiting]
                if sample_ordering:
                    keys = keys + rng.gumbel(size=len(waiting))
                order = waiting[np.argsort(-keys, kind="stable")]
            lp_order = float(ordering_log_prob(scores, torch.from_numpy(order)))
            mean = placement_mean(model, inputs)
            std = placement_std(model, len(inputs.mu))
            noise = rng.standard_normal(len(mean)) if sample_placement else np.zeros(len(mean))
            preference = mean + std * torch.from_numpy(noise).float()
            lp_place = float(_normal_log_prob(mean, std, preference).sum())
            value = float(critic(torch.from_numpy(global_state(inputs))))
        action_scores = np.full(env.max_jobs, -1e9, dtype=np.float32)
        for rank, index in enumerate(order):
            if index < env.max_jobs:
                action_scores[index] = -float(rank)
        step = Step(inputs, order, preference.numpy(), lp_order, lp_place, value)
        step.time = env.snapshot.now
        _, rewards, terminations, _, _ = env.step(
            {"ordering": action_scores, "placement": step.preference}
        )
        step.reward = rewards["ordering"]
        rollout.steps.append(step)
        done = terminations["ordering"]
    rollout.fee, rollout.job_hours = env.fee, env.job_hours
    return rollout


def advantages(rollout: Rollout, horizon_s: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and value targets with a clock-based discount."""
    steps = rollout.steps
    n = len(steps)
    adv = np.zeros(n)
    following = 0.0
    for k in range(n - 1, -1, -1):
        if k + 1 < n:
            gamma = math.exp(-max(0.0, steps[k + 1].time - steps[k].time) / horizon_s)
            next_value = steps[k + 1].value
        else:
            gamma, next_value = 0.0, 0.0
        delta = steps[k].reward + gamma * next_value - steps[k].value
        following = delta + gamma * lam * following
        adv[k] = following
    targets = adv + np.array([s.value for s in steps])
    return adv, targets


def train_mappo(
    model: DualAgentModel,
    episodes: Sequence[EpisodeSpec],
    args: MappoArgs,
    *,
    critic: Critic | None = None,
    on_update: Callable[[dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """MAPPO updates of `model` in place on `episodes` (cycled); one log row per update."""
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    critic = critic or Critic()
    actor_parameters: list[nn.Parameter] = []
    groups: list[dict[str, Any]] = [{"params": list(critic.parameters())}]
    if args.train_ordering:
        actor_parameters += list(model.ordering.parameters())
        groups.append({"params": list(model.ordering.parameters())})
    if args.train_placement:
        actor_parameters += list(model.placement.parameters())
        groups.append(
            {"params": list(model.placement.parameters()), "lr": args.placement_learning_rate}
        )
    optimizer = torch.optim.Adam(groups, lr=args.learning_rate)
    log: list[dict[str, float]] = []
    played = 0
    for update in range(args.updates):
        rollouts = []
        for _ in range(args.episodes_per_update):
            spec = episodes[played % len(episodes)]
            played += 1
            env = DualAgentEnv(spec, model, jct_weight=args.jct_weight)
            rollouts.append(
                play(
                    env,
                    model,
                    critic,
                    rng,
                    sample_ordering=args.train_ordering,
                    sample_placement=args.train_placement,
                    fixed_ordering=args.fixed_ordering,
                )
            )
        batch = [
            (step, a, t)
            for r in rollouts
            for step, a, t in zip(
                r.steps, *advantages(r, args.horizon_s, args.gae_lambda), strict=True
            )
        ]
        adv_all = np.array([a for _, a, _ in batch])
        scale = adv_all.std() + 1e-8
        clip_fraction = 0.0
        for _ in range(args.epochs):
            policy_loss = torch.zeros(())
            value_loss = torch.zeros(())
            entropy = torch.zeros(())
            clipped = 0
            for step, advantage, target in batch:
                a = (advantage - adv_all.mean()) / scale
                inputs = step.inputs
                for agent in ("ordering", "placement"):
                    if agent == "ordering":
                        if not args.train_ordering or len(step.order) < 2:
                            continue
                        scores = model.scores(
                            torch.from_numpy(inputs.jobs), torch.from_numpy(inputs.cluster)
                        )
                        new = ordering_log_prob(scores, torch.from_numpy(step.order))
                        old = step.log_prob_ordering
                    else:
                        if not args.train_placement:
                            continue
                        std = placement_std(model, len(inputs.mu))
                        new = _normal_log_prob(
                            placement_mean(model, inputs), std, torch.from_numpy(step.preference)
                        ).sum()
                        old = step.log_prob_placement
                        # A Gaussian's entropy per dimension: ½ log(2πe σ²); one term for
                        # the machines' common width, one for the patience's.
                        widths = std[-2:]
                        entropy = entropy + 0.5 * torch.log(2 * math.pi * math.e * widths**2).sum()
                    ratio = torch.exp(new - old)
                    clipped += int(abs(float(ratio.detach()) - 1.0) > args.clip)
                    policy_loss = policy_loss - torch.min(
                        ratio * a, ratio.clamp(1 - args.clip, 1 + args.clip) * a
                    )
                value = critic(torch.from_numpy(global_state(inputs)))
                value_loss = value_loss + (value - float(target)) ** 2
            n = max(1, len(batch))
            loss = (
                policy_loss / n + args.value_coef * value_loss / n - args.entropy_coef * entropy / n
            )
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_([*actor_parameters, *critic.parameters()], 1.0)
            optimizer.step()
            clip_fraction = clipped / max(1, 2 * n)
        row = {
            "update": float(update),
            "fee_usd": float(np.mean([r.fee for r in rollouts])),
            "job_hours": float(np.mean([r.job_hours for r in rollouts])),
            "return": float(np.mean([sum(s.reward for s in r.steps) for r in rollouts])),
            "clip_fraction": clip_fraction,
            "risk": float(model.placement.risk.detach()[0]),
            "time_value": float(model.placement.time_value.detach()[0]),
            "patience": float(model.placement.patience.detach()[0]),
        }
        log.append(row)
        if on_update is not None:
            on_update(row)
    return log
