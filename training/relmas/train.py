"""Train RELMAS in the accelerator simulator: imitation of a teacher, then REINFORCE.

Reads top to bottom like the method (docs/relmas.md, "Training"):

1. **Imitation** (ours; the paper trains from scratch with DDPG): episodes played by
   the teacher (:func:`training.relmas.rollout.teacher_scores`) on training seeds; the
   network learns to give the teacher's picks the highest Plackett-Luce likelihood.
   A few minutes of CPU cannot train a dispatcher from nothing; a warm start can.
2. **Policy gradient** (ours: REINFORCE over the pick sequence, where the paper uses
   DDPG over a continuous action): episodes sampled from the network (Gumbel-perturbed
   scores); each round's return is the discounted sum of the rewards that follow it.
   Reward (paper: deadlines met against bandwidth; the weights are ours): +1 when a
   request finishes by its deadline, −1 at the deadline of one that misses it,
   −`bandwidth_weight` per isolated-time unit spent over the DRAM budget.
3. **Selection**: every checkpoint, the imitation one included, is scored greedily on
   validation seeds; the best mean SLA satisfaction is kept.

Training seeds (1000+), validation seeds (500+) and the evaluation seeds of
docs/results.md (0, 1, 2) do not overlap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from policies.learned.relmas.network import RelmasConfig, RelmasModel
from simulator.accelerator.costs import CostTable, load_costs
from simulator.accelerator.workload import Scenario, scenarios
from training.relmas.rollout import Episode, RecordedRound, RecordingPolicy, play, teacher_scores


@dataclass(frozen=True)
class Args:
    scenarios: tuple[str, ...] = (
        "medium-homogeneous",
        "medium-mixed",
        "heavy-homogeneous",
        "heavy-mixed",
    )
    """Scenarios episodes are drawn from (round robin)."""
    seed: int = 0
    hidden: int = 32
    imitation_episodes: int = 8
    imitation_epochs: int = 6
    imitation_rounds_per_epoch: int = 4000
    updates: int = 6
    episodes_per_update: int = 2
    rounds_per_update: int = 3000
    learning_rate: float = 3e-3
    rl_learning_rate: float = 5e-4
    discount_time_units: float = 20.0
    """Rewards fade by 1/e over this many mean isolated request times."""
    bandwidth_weight: float = 0.02
    validation_episodes: int = 2
    episode_requests: int | None = None
    """Only each episode's first arrivals (tests); None: the scenario's whole episode."""


@dataclass
class TrainReport:
    model: RelmasModel
    validation: dict[str, float] = field(default_factory=dict)
    """Mean validation SLA satisfaction of each checkpoint, by name."""
    chosen: str = ""
    teacher_validation: float = 0.0
    seconds: float = 0.0
    imitation_loss: list[float] = field(default_factory=list)


def _pick_masks(round_: RecordedRound) -> np.ndarray:
    """[K, N]: which pairs are still open before each of the K picks."""
    n = len(round_.request_of)
    masks = np.ones((len(round_.picks), n), dtype=bool)
    open_ = np.ones(n, dtype=bool)
    for k, pair in enumerate(round_.picks):
        masks[k] = open_
        open_ &= round_.request_of != round_.request_of[pair]
        open_ &= round_.accelerator_of != round_.accelerator_of[pair]
    return masks


def log_prob(model: RelmasModel, round_: RecordedRound) -> torch.Tensor:
    """Log-likelihood of the round's pick sequence under the network's scores."""
    scores = model.network(torch.from_numpy(round_.features))
    masks = torch.from_numpy(_pick_masks(round_))
    picks = torch.as_tensor(round_.picks)
    open_scores = scores.unsqueeze(0).expand_as(masks).masked_fill(~masks, float("-inf"))
    out: torch.Tensor = scores[picks].sum() - torch.logsumexp(open_scores, dim=1).sum()
    return out


def returns(episode: Episode, scale_s: float, bandwidth_weight: float) -> np.ndarray:
    """Each recorded round's discounted return (see the module docstring)."""
    events: list[tuple[float, float]] = []
    for record in episode.result.requests:
        if record.met:
            events.append((record.finished or record.deadline, 1.0))
        else:
            events.append((record.deadline, -1.0))
    result = episode.result
    for t, over in zip(result.round_times, result.round_saturated_s, strict=True):
        if over > 0:
            events.append((t, -bandwidth_weight * over / scale_s))
    events.sort()
    times = np.asarray([e[0] for e in events])
    values = np.asarray([e[1] for e in events])
    out = np.empty(len(episode.rounds))
    for i, round_ in enumerate(episode.rounds):
        later = times >= round_.time
        out[i] = float((values[later] * np.exp(-(times[later] - round_.time) / scale_s)).sum())
    return out


def _episodes(args: Args, costs: CostTable, policy: RecordingPolicy, seeds: range) -> list[Episode]:
    table = scenarios()
    chosen = [table[name] for name in args.scenarios]
    return [
        play(chosen[i % len(chosen)], costs, seed, policy, args.episode_requests)
        for i, seed in enumerate(seeds)
    ]


def validate(model: RelmasModel, args: Args, costs: CostTable) -> float:
    policy = RecordingPolicy(styles=model.config.styles, model=model)
    episodes = _episodes(
        args, costs, policy, range(500, 500 + args.validation_episodes * len(args.scenarios))
    )
    return float(np.mean([e.sla for e in episodes]))


def held_out(model: RelmasModel, args: Args, costs: CostTable, episodes: int) -> float:
    """Mean SLA satisfaction on episodes neither training nor checkpoint choice saw."""
    policy = RecordingPolicy(styles=model.config.styles, model=model)
    seeds = range(900, 900 + episodes * len(args.scenarios))
    return float(np.mean([e.sla for e in _episodes(args, costs, policy, seeds)]))


def train(
    args: Args,
    costs: CostTable | None = None,
    *,
    initial: RelmasModel | None = None,
    on_progress: Callable[[str, float], None] | None = None,
) -> TrainReport:
    """Imitation of the teacher, then REINFORCE; the best checkpoint on validation wins.

    With `initial` (a retraining from the active version) imitation is skipped and
    REINFORCE starts from those weights.
    """
    started = time.perf_counter()
    costs = costs or load_costs()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    progress = on_progress or (lambda stage, fraction: None)
    config = initial.config if initial is not None else RelmasConfig(hidden=args.hidden)
    model = initial if initial is not None else RelmasModel.initial(config, args.seed)
    report = TrainReport(model=model)

    # 1. Imitation of the teacher.
    teacher = RecordingPolicy(styles=config.styles, teacher=teacher_scores)
    epochs = args.imitation_epochs if initial is None else 0
    demos = (
        _episodes(args, costs, teacher, range(1000, 1000 + args.imitation_episodes))
        if epochs
        else []
    )
    rounds = [r for e in demos for r in e.rounds]
    optimizer = torch.optim.Adam(model.network.parameters(), lr=args.learning_rate)
    for epoch in range(epochs):
        progress("imitation", epoch / epochs)
        chosen = rng.choice(
            len(rounds), size=min(len(rounds), args.imitation_rounds_per_epoch), replace=False
        )
        losses = []
        for start in range(0, len(chosen), 64):
            batch = [rounds[int(i)] for i in chosen[start : start + 64]]
            loss: torch.Tensor = -torch.stack([log_prob(model, r) for r in batch]).mean()
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            losses.append(float(loss.detach()))
        report.imitation_loss.append(float(np.mean(losses)))
    best_state = {k: v.clone() for k, v in model.network.state_dict().items()}
    best = validate(model, args, costs)
    report.chosen = "imitation" if initial is None else "start"
    report.validation[report.chosen] = best

    # 2. REINFORCE from the imitation weights.
    table = scenarios()
    optimizer = torch.optim.Adam(model.network.parameters(), lr=args.rl_learning_rate)
    explorer = RecordingPolicy(styles=config.styles, model=model, sample=True, rng=rng)
    seed = 2000
    for update in range(args.updates):
        progress("rl", update / args.updates)
        batch_rounds: list[RecordedRound] = []
        batch_returns: list[np.ndarray] = []
        for _ in range(args.episodes_per_update):
            scenario: Scenario = table[args.scenarios[seed % len(args.scenarios)]]
            episode = play(scenario, costs, seed, explorer, args.episode_requests)
            seed += 1
            scale = (
                args.discount_time_units
                * float(np.mean([r.deadline - r.arrival for r in episode.result.requests]))
                / 8.0
            )
            batch_rounds += episode.rounds
            batch_returns.append(returns(episode, scale, args.bandwidth_weight))
        advantage = np.concatenate(batch_returns)
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        chosen = rng.choice(
            len(batch_rounds), size=min(len(batch_rounds), args.rounds_per_update), replace=False
        )
        for start in range(0, len(chosen), 128):
            idx = chosen[start : start + 128]
            rl_loss: torch.Tensor = -torch.stack(
                [log_prob(model, batch_rounds[int(i)]) * float(advantage[int(i)]) for i in idx]
            ).mean()
            optimizer.zero_grad()
            rl_loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        score = validate(model, args, costs)
        report.validation[f"update-{update + 1}"] = score
        if score > best:
            best, report.chosen = score, f"update-{update + 1}"
            best_state = {k: v.clone() for k, v in model.network.state_dict().items()}
    model.network.load_state_dict(best_state)
    report.teacher_validation = float(
        np.mean(
            [
                e.sla
                for e in _episodes(
                    args,
                    costs,
                    RecordingPolicy(styles=config.styles, teacher=teacher_scores),
                    range(500, 500 + args.validation_episodes * len(args.scenarios)),
                )
            ]
        )
    )
    report.seconds = time.perf_counter() - started
    return report
