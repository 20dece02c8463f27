"""RL fine-tuning of DL2 in the simulator (Peng et al., 2019, §4.3), read top to bottom.

The paper improves the warmed-up policy with a policy gradient: actor-critic,
the critic (a value network) serving as the baseline, an entropy bonus keeping
exploration alive, and experience replay to reuse costly samples. We keep the
actor, the learned baseline and the entropy bonus, and replace replay with PPO's
clipped objective (Schulman et al., 2017): it also reuses each batch for several
epochs, and the clip keeps those reused updates from drifting far from the
policy that collected them, which plain replayed policy gradients do not.

One update:
1. **Rollout.** Play `episodes_per_update` training episodes (drawn in a seeded
   order), sampling from the current policy (:func:`training.dl2.rollout.play_episode`).
   Each episode is a task (:class:`Rollout`: the spec, the policy's weights, its own
   seed) for a :class:`simulator.sweep.Runner`: in this process by default, or on
   local processes or a Ray cluster, as `arbiter sweep` runs its grids.
2. **Returns.** A round's reward is the normalised progress of all jobs until the
   next round (§4.1), or with `reward="time-in-system"` minus the hours the jobs
   spend in the system until then (ours: the rewards then sum to minus the jobs'
   summed JCT). Every inference of a round gets that round's return, the
   rewards from it on discounted by simulated time (`horizon_s`). The paper
   discounts per fixed time slot; here rounds are events of varying length.
3. **Advantages.** Return minus the critic's value of the state, normalised.
4. **Update.** `epochs` passes of minibatches over the batch: clipped policy
   loss, value loss, minus `entropy_coef` × entropy of the masked distribution;
   early stop once the approximate KL passes `target_kl`.
5. **Diagnostics** per update: mean reward per round, average JCT of the
   rollout episodes, policy and value loss, entropy, approximate KL, clip
   fraction, explained variance, seconds.
6. **Checkpoints.** Given validation episodes, the greedy policy is scored (mean
   average JCT, :func:`training.dl2.evaluation.score`) before training and every
   `validate_every` updates; the model ends with the best weights seen. Policy
   gradients on a few episodes are noisy, and the last update is not the best one.

Determinism: the seed fixes the episode order, the action sampling, the critic's
initialisation and the minibatch order; training runs on one CPU thread, so the
same seed gives the same weights bit for bit. Each episode samples from its own
generator, seeded with (seed, update, episode's index in the update), so nothing
depends on which episodes share a process or in what order they run: the same
seed gives the same weights on every runner.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.learned.dl2.features import Dl2Config
from policies.learned.dl2.network import Dl2Model, masked_logits
from simulator.sweep import InProcess, Runner
from training.dl2.episodes import EpisodeSpec
from training.dl2.evaluation import score
from training.dl2.rollout import REWARDS, Episode, Reward, discounted_returns, play_episode


@dataclass(frozen=True)
class PpoArgs:
    """RL fine-tuning settings."""

    seed: int = 0
    updates: int = 20
    """Policy updates; each plays `episodes_per_update` episodes first."""
    episodes_per_update: int = 2
    learning_rate: float = 3e-4
    epochs: int = 4
    """Passes over each batch."""
    minibatch_size: int = 256
    clip: float = 0.2
    """PPO's ratio clip."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (the paper: 0.1 on its un-normalised loss)."""
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    horizon_s: float = 3600.0
    """Rewards Δt later count exp(−Δt / horizon_s)."""
    reward_scale: float = 0.05
    """Rewards are multiplied by this, so the critic sees returns of order 1."""
    critic_warmup: int = 2
    """First updates train only the critic: advantages from an untrained baseline are noise."""
    target_kl: float | None = 0.03
    """Stop an update's epochs early once the approximate KL passes this (None: never)."""
    floor: FloorParams = DEFAULT_FLOOR
    """As the served policy's parameters (:class:`Dl2Params`): where each round starts."""
    validate_every: int = 5
    """With validation episodes: score the greedy policy every this many updates."""
    reward: Reward = "progress"
    """What a round's reward measures (:data:`training.dl2.rollout.REWARDS`)."""

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f"reward {self.reward!r}: expected one of {', '.join(REWARDS)}")


class ValueNetwork(nn.Module):
    """The critic: state → expected return; DL2's value network, same inputs as the policy."""

    def __init__(self, config: Dl2Config) -> None:
        super().__init__()
        first, second = config.hidden
        self.hidden1 = nn.Linear(config.input_size, first)
        self.hidden2 = nn.Linear(first, second)
        self.output = nn.Linear(second, 1)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.hidden2(torch.relu(self.hidden1(states))))
        out: torch.Tensor = self.output(hidden).squeeze(-1)
        return out


@dataclass
class _Batch:
    states: torch.Tensor
    masks: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    returns: torch.Tensor


@contextmanager
def one_thread() -> Iterator[None]:
    """Run on one CPU thread (deterministic reductions), restoring the setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _batch(episodes: Sequence[Episode], horizon_s: float, scale: float) -> _Batch | None:
    steps = [step for ep in episodes for step in ep.steps]
    if not steps:
        return None
    returns: list[float] = []
    for ep in episodes:
        per_round = discounted_returns(ep.rewards, ep.times, horizon_s)
        returns.extend(scale * per_round[step.round] for step in ep.steps)
    return _Batch(
        states=torch.from_numpy(np.stack([s.state for s in steps])),
        masks=torch.from_numpy(np.stack([s.mask for s in steps])),
        actions=torch.tensor([s.action for s in steps], dtype=torch.int64),
        log_probs=torch.tensor([s.log_prob for s in steps], dtype=torch.float32),
        returns=torch.tensor(returns, dtype=torch.float32),
    )


@dataclass(frozen=True)
class Rollout:
    """One rollout episode as a task: all it needs, picklable, so it plays anywhere."""

    spec: EpisodeSpec
    weights: bytes
    """The policy, as :meth:`Dl2Model.to_bytes` (its configuration in the header)."""
    seed: tuple[int, ...]
    """The episode's own sampler: (training seed, update, index in the update)."""
    floor: FloorParams = DEFAULT_FLOOR
    reward: Reward = "progress"


def play_rollout(task: Rollout) -> Episode:
    """Play one :class:`Rollout` (a top-level function: runners pickle it by name)."""
    model = Dl2Model.from_bytes(task.weights)
    sampler = np.random.default_rng(task.seed)
    return play_episode(task.spec, model, sampler, floor=task.floor, reward=task.reward)


def train_ppo(
    model: Dl2Model,
    episodes: Sequence[EpisodeSpec],
    args: PpoArgs,
    *,
    validation: Sequence[EpisodeSpec] = (),
    on_update: Callable[[dict[str, float]], None] | None = None,
    runner: Runner | None = None,
) -> list[dict[str, float]]:
    """Fine-tune `model` in place with PPO on `episodes`; one diagnostics row per update.

    With `validation` episodes, rows of validated updates carry
    `validation_avg_jct_s`, and `model` ends with the best validated weights
    (possibly the ones it started with). `runner` plays the rollout and
    validation episodes (default: in this process); the weights and diagnostics
    do not depend on it, wall-clock seconds aside.
    """
    if not episodes:
        raise ValueError("no training episodes")
    run = runner or InProcess()
    log: list[dict[str, float]] = []
    validating = bool(validation) and args.validate_every > 0
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    with one_thread(), run.started():
        if validating:
            best = (
                _validate(model, validation, run, floor=args.floor),
                _weights(model),
            )
        torch.manual_seed(args.seed)
        critic = ValueNetwork(model.config)
        optimizer = torch.optim.Adam(
            [*model.network.parameters(), *critic.parameters()], lr=args.learning_rate, eps=1e-5
        )
        order = random.Random(args.seed)
        minibatches = torch.Generator().manual_seed(args.seed)
        for update in range(args.updates):
            started = time.perf_counter()
            chosen = [order.choice(episodes) for _ in range(args.episodes_per_update)]
            model.network.eval()
            weights = model.to_bytes()
            played = run.map(
                play_rollout,
                [
                    Rollout(spec, weights, (args.seed, update, index), args.floor, args.reward)
                    for index, spec in enumerate(chosen)
                ],
            )
            rollout_s = time.perf_counter() - started
            row = _update(
                model,
                critic,
                optimizer,
                played,
                args,
                minibatches,
                train_policy=update >= args.critic_warmup,
            )
            rounds = sum(len(ep.rewards) for ep in played)
            jcts = [
                float(ep.result.metrics["avg_jct_s"])
                for ep in played
                if ep.result is not None and ep.result.metrics["avg_jct_s"] is not None
            ]
            row.update(
                update=float(update),
                steps=float(sum(len(ep.steps) for ep in played)),
                mean_reward=sum(sum(ep.rewards) for ep in played) / max(rounds, 1),
                avg_jct_s=sum(jcts) / len(jcts) if jcts else float("nan"),
                rollout_s=rollout_s,
                seconds=time.perf_counter() - started,
            )
            if validating and (update + 1) % args.validate_every == 0:
                row["validation_avg_jct_s"] = _validate(model, validation, run, floor=args.floor)
                if best is None or row["validation_avg_jct_s"] < best[0]:
                    best = (row["validation_avg_jct_s"], _weights(model))
            log.append(row)
            if on_update is not None:
                on_update(row)
        if best is not None:
            model.network.load_state_dict(best[1])
    model.network.eval()
    return log


def _validate(
    model: Dl2Model, episodes: Sequence[EpisodeSpec], runner: Runner, *, floor: FloorParams
) -> float:
    return score(model, episodes, runner=runner, floor=floor).mean_avg_jct_s


def _weights(model: Dl2Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.network.state_dict().items()}


def _update(  # noqa: PLR0917 - one call site, the trainer's loop
    model: Dl2Model,
    critic: ValueNetwork,
    optimizer: torch.optim.Optimizer,
    played: Sequence[Episode],
    args: PpoArgs,
    generator: torch.Generator,
    *,
    train_policy: bool,
) -> dict[str, float]:
    batch = _batch(played, args.horizon_s, args.reward_scale)
    empty = {
        "policy_loss": 0.0,
        "value_loss": 0.0,
        "entropy": 0.0,
        "approx_kl": 0.0,
        "clipfrac": 0.0,
        "explained_variance": 0.0,
    }
    if batch is None:
        return empty
    with torch.no_grad():
        values = critic(batch.states)
    advantages = batch.returns - values
    if len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    model.network.train()
    critic.train()
    size = len(batch.actions)
    stats: dict[str, list[float]] = {k: [] for k in empty if k != "explained_variance"}
    for _ in range(args.epochs):
        order = torch.randperm(size, generator=generator)
        kls: list[float] = []
        for first in range(0, size, args.minibatch_size):
            index = order[first : first + args.minibatch_size]
            logits = masked_logits(model.logits(batch.states[index]), batch.masks[index])
            log_probs = torch.log_softmax(logits, dim=-1)
            new = log_probs.gather(1, batch.actions[index].unsqueeze(1)).squeeze(1)
            log_ratio = new - batch.log_probs[index]
            ratio = log_ratio.exp()
            adv = advantages[index]
            policy_loss = torch.max(
                -adv * ratio, -adv * ratio.clamp(1 - args.clip, 1 + args.clip)
            ).mean()
            # Masked actions have probability 0: p·log p is taken as 0 there, not NaN.
            probs = log_probs.exp()
            entropy = -(probs * log_probs.masked_fill(~batch.masks[index], 0.0)).sum(-1).mean()
            value_loss = ((critic(batch.states[index]) - batch.returns[index]) ** 2).mean()
            loss = args.value_coef * value_loss
            if train_policy:
                loss = loss + policy_loss - args.entropy_coef * entropy
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(
                [*model.network.parameters(), *critic.parameters()], args.max_grad_norm
            )
            optimizer.step()
            with torch.no_grad():
                kl = float(((ratio - 1) - log_ratio).mean().item())
                kls.append(kl)
                stats["approx_kl"].append(kl)
                stats["clipfrac"].append(
                    float(((ratio - 1.0).abs() > args.clip).float().mean().item())
                )
                stats["policy_loss"].append(float(policy_loss.item()))
                stats["value_loss"].append(float(value_loss.item()))
                stats["entropy"].append(float(entropy.item()))
        if args.target_kl is not None and kls and sum(kls) / len(kls) > args.target_kl:
            break
    model.network.eval()
    critic.eval()
    # As cleanrl: how much of the returns' variance the critic explained before the update.
    variance = float(batch.returns.var().item()) if size > 1 else 0.0
    explained = (
        1.0 - float((batch.returns - values).var().item()) / variance if variance > 0 else 0.0
    )
    row = {k: sum(v) / len(v) if v else 0.0 for k, v in stats.items()}
    row["explained_variance"] = explained
    return row
