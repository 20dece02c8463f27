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

From the log (ours; :mod:`training.relmas.logged`): given a window's logged dispatches
and their `inference` outcomes, episodes come from the scenario calibrated to the
system that logged them (its sub-accelerators, bandwidth, tenants, models, load,
deadlines) and from replays of its logged arrivals; imitation also takes the logged
rounds' starts that met their SLA, and from the incumbent it runs on those alone
before REINFORCE. Without them, the named scenarios as above.

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
from simulator.accelerator.workload import Arrival, Scenario, scenarios
from training.relmas.logged import LoggedWorkload
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


@dataclass(frozen=True)
class Sources:
    """Where a run's episodes come from."""

    scenarios: tuple[Scenario, ...]
    """Drawn round robin, arrivals from each episode's seed."""
    costs: CostTable
    replays: tuple[tuple[Arrival, ...], ...] = ()
    """Logged arrivals played as they came (RL episodes alternate with the scenarios')."""
    demonstrations: tuple[RecordedRound, ...] = ()
    """Logged rounds' starts that met their SLA, imitated beside the teacher's."""
    logged: bool = False


def sources(args: Args, costs: CostTable, workload: LoggedWorkload | None = None) -> Sources:
    """The logged workload's when it is usable, else `args.scenarios` with `costs`."""
    if workload is not None and workload.usable:
        assert workload.scenario is not None
        assert workload.costs is not None
        return Sources(
            scenarios=(workload.scenario,),
            costs=workload.costs,
            replays=workload.replays,
            demonstrations=tuple(workload.demonstrations),
            logged=True,
        )
    table = scenarios()
    return Sources(scenarios=tuple(table[name] for name in args.scenarios), costs=costs)


def _episodes(args: Args, source: Sources, policy: RecordingPolicy, seeds: range) -> list[Episode]:
    chosen = source.scenarios
    return [
        play(chosen[i % len(chosen)], source.costs, seed, policy, args.episode_requests)
        for i, seed in enumerate(seeds)
    ]


def validate(model: RelmasModel, args: Args, source: Sources) -> float:
    policy = RecordingPolicy(styles=model.config.styles, model=model)
    seeds = range(500, 500 + args.validation_episodes * len(source.scenarios))
    return float(np.mean([e.sla for e in _episodes(args, source, policy, seeds)]))


def held_out(model: RelmasModel, args: Args, source: Sources, episodes: int) -> float:
    """Mean SLA satisfaction on episodes neither training nor checkpoint choice saw."""
    policy = RecordingPolicy(styles=model.config.styles, model=model)
    seeds = range(900, 900 + episodes * len(source.scenarios))
    return float(np.mean([e.sla for e in _episodes(args, source, policy, seeds)]))


def replayed(model: RelmasModel, args: Args, source: Sources, episodes: int = 2) -> float | None:
    """Mean SLA satisfaction of `model` on the first logged replays (None without any)."""
    if not source.replays:
        return None
    policy = RecordingPolicy(styles=model.config.styles, model=model)
    return float(
        np.mean(
            [
                play(
                    source.scenarios[0], source.costs, 0, policy, args.episode_requests, work=w
                ).sla
                for w in source.replays[:episodes]
            ]
        )
    )


def _imitate(
    model: RelmasModel,
    rounds: list[RecordedRound],
    args: Args,
    *,
    rng: np.random.Generator,
    report: TrainReport,
    progress: Callable[[str, float], None],
) -> None:
    """Epochs of Plackett-Luce likelihood on `rounds` (a sample of them per epoch)."""
    optimizer = torch.optim.Adam(model.network.parameters(), lr=args.learning_rate)
    epochs = args.imitation_epochs if rounds else 0
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


def train(
    args: Args,
    costs: CostTable | None = None,
    *,
    initial: RelmasModel | None = None,
    on_progress: Callable[[str, float], None] | None = None,
    workload: LoggedWorkload | None = None,
) -> TrainReport:
    """Imitation of the teacher, then REINFORCE; the best checkpoint on validation wins.

    With `initial` (a retraining from the active version) the teacher is not imitated
    and REINFORCE starts from those weights (after imitating the logged rounds that met
    their SLA, when `workload` has them). With a usable `workload`, episodes come from
    the log (:func:`sources`).
    """
    started = time.perf_counter()
    source = sources(args, costs or load_costs(), workload)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    progress = on_progress or (lambda stage, fraction: None)
    config = initial.config if initial is not None else RelmasConfig(hidden=args.hidden)
    model = initial if initial is not None else RelmasModel.initial(config, args.seed)
    report = TrainReport(model=model)
    best = -1.0
    best_state = {k: v.clone() for k, v in model.network.state_dict().items()}
    if initial is not None:
        best = report.validation["start"] = validate(model, args, source)
        report.chosen = "start"

    # 1. Imitation: of the teacher (from scratch) and of the logged starts that met.
    teacher = RecordingPolicy(styles=config.styles, teacher=teacher_scores)
    demos = (
        _episodes(args, source, teacher, range(1000, 1000 + args.imitation_episodes))
        if initial is None and args.imitation_epochs
        else []
    )
    rounds = [r for e in demos for r in e.rounds] + list(source.demonstrations)
    _imitate(model, rounds, args, rng=rng, report=report, progress=progress)
    if initial is None or report.imitation_loss:
        score = report.validation["imitation"] = validate(model, args, source)
        if score > best:
            best, report.chosen = score, "imitation"
            best_state = {k: v.clone() for k, v in model.network.state_dict().items()}

    # 2. REINFORCE from the best weights so far.
    model.network.load_state_dict(best_state)
    optimizer = torch.optim.Adam(model.network.parameters(), lr=args.rl_learning_rate)
    explorer = RecordingPolicy(styles=config.styles, model=model, sample=True, rng=rng)
    seed = 2000
    played = 0
    for update in range(args.updates):
        progress("rl", update / args.updates)
        batch_rounds: list[RecordedRound] = []
        batch_returns: list[np.ndarray] = []
        for _ in range(args.episodes_per_update):
            if source.replays and played % 2 == 1:
                work = source.replays[(played // 2) % len(source.replays)]
                episode = play(
                    source.scenarios[0], source.costs, 0, explorer, args.episode_requests, work=work
                )
            else:
                scenario = source.scenarios[seed % len(source.scenarios)]
                episode = play(scenario, source.costs, seed, explorer, args.episode_requests)
                seed += 1
            played += 1
            if not episode.rounds:
                continue
            scale = (
                args.discount_time_units
                * float(np.mean([r.deadline - r.arrival for r in episode.result.requests]))
                / 8.0
            )
            batch_rounds += episode.rounds
            batch_returns.append(returns(episode, scale, args.bandwidth_weight))
        if batch_rounds:
            advantage = np.concatenate(batch_returns)
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            chosen = rng.choice(
                len(batch_rounds),
                size=min(len(batch_rounds), args.rounds_per_update),
                replace=False,
            )
            for start in range(0, len(chosen), 128):
                idx = chosen[start : start + 128]
                rl_loss: torch.Tensor = -torch.stack(
                    [log_prob(model, batch_rounds[int(i)]) * float(advantage[int(i)]) for i in idx]
                ).mean()
                optimizer.zero_grad()
                rl_loss.backward()  # type: ignore[no-untyped-call]
                optimizer.step()
        score = validate(model, args, source)
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
                    source,
                    RecordingPolicy(styles=config.styles, teacher=teacher_scores),
                    range(500, 500 + args.validation_episodes * len(source.scenarios)),
                )
            ]
        )
    )
    report.seconds = time.perf_counter() - started
    return report
