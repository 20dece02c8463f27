"""Supervised warm-up: DL2 learns to act as an incumbent scheduler did (Peng et al., 2019, §4.2).

The paper first trains the policy network offline on the decisions of the
scheduler already running the cluster (DRF in its experiments), with a
cross-entropy loss, so that RL starts from a sensible policy instead of a random
one. Here a demonstration is any decision record: the snapshot a policy saw and
the decision it made, as logged in the `decisions` table (JSON) or produced by
the simulator. Each record is replayed through DL2's own round
(:class:`policies.learned.dl2.features.Allocation`): starting from the same
floor, the teacher's action at each inference is one step toward the recorded
allocation, and the imitated target is that action.

Which job the teacher grows first is not in the record (only the final counts
are); the teacher picks the job of the window with the lowest dominant share that
is still below its recorded allocation, the order in which DRF's progressive
filling grows jobs, so the target is a function of what the network sees.
A job the record gives fewer workers than DL2's floor cannot be shrunk by an
action and is left at its floor; a record without scaling teaches nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.decision import Decision, Stage
from policies.learned.dl2.features import (
    ACTIONS_PER_SLOT,
    ADD_BOTH,
    ADD_PS,
    ADD_WORKER,
    Allocation,
    Dl2Config,
)
from policies.learned.dl2.network import Dl2Model, masked_logits
from policies.model import Snapshot, convert
from policies.profiles import PolicyChoice, Profile
from policies.registry import Registry, build_registry
from simulator.deciders import EngineDecider
from training.dl2.episodes import EpisodeSpec, dl2_profile
from training.dl2.logged import without_finishes

Record = tuple[Snapshot | Mapping[str, Any], Decision | Mapping[str, Any]]
"""(snapshot, decision): model objects, or their JSON as stored in the decision log."""


@dataclass(frozen=True)
class Demonstrations:
    """States, masks and the teacher's actions, one row per inference."""

    states: np.ndarray
    masks: np.ndarray
    actions: np.ndarray

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def teacher_action(allocation: Allocation, targets: Mapping[str, tuple[int, int]]) -> int:
    """The next step toward `targets` (job id → workers, servers), or stop when none is left."""
    mask = allocation.mask()
    best: tuple[float, int, int] | None = None
    for index, slot in enumerate(allocation.window):
        job = slot.job
        goal = targets.get(job.id)
        if goal is None:
            continue
        workers, servers = allocation.allocation(job.id)
        more_workers = workers < goal[0]
        more_servers = servers < goal[1]
        base = ACTIONS_PER_SLOT * index
        if more_workers and more_servers and mask[base + ADD_BOTH]:
            kind = ADD_BOTH
        elif more_workers and mask[base + ADD_WORKER]:
            kind = ADD_WORKER
        elif more_servers and mask[base + ADD_PS]:
            kind = ADD_PS
        else:
            continue
        candidate = (allocation.dominant_share(job), index, base + kind)
        if best is None or candidate < best:
            best = candidate
    return allocation.config.stop_action if best is None else best[2]


def demonstrations(
    records: Iterable[Record], config: Dl2Config, *, floor: FloorParams = DEFAULT_FLOOR
) -> Demonstrations:
    """Replay each record's scaling through DL2's round; one sample per inference."""
    states: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    actions: list[int] = []
    for raw_snapshot, raw_decision in records:
        snapshot = (
            raw_snapshot if isinstance(raw_snapshot, Snapshot) else convert(raw_snapshot, Snapshot)
        )
        decision = (
            raw_decision
            if isinstance(raw_decision, Decision)
            else convert(without_finishes(raw_decision), Decision)
        )
        if not decision.scaling:
            continue
        by_id = snapshot.jobs_by_id
        if any(r.job_id not in by_id for r in decision.scaling):
            continue  # not this snapshot's decision
        jobs = [by_id[r.job_id] for r in decision.scaling]
        targets = {r.job_id: (r.workers, r.ps) for r in decision.scaling}
        allocation = Allocation(snapshot, jobs, config, floor=floor)
        stop = config.stop_action
        while True:
            mask = allocation.mask()
            if not mask[:stop].any():
                break
            action = teacher_action(allocation, targets)
            states.append(allocation.observation())
            masks.append(mask)
            actions.append(action)
            if action == stop:
                break
            allocation.apply(action)
    if not actions:
        return Demonstrations(
            np.zeros((0, config.input_size), np.float32),
            np.zeros((0, config.actions), bool),
            np.zeros(0, np.int64),
        )
    return Demonstrations(np.stack(states), np.stack(masks), np.array(actions, dtype=np.int64))


def teacher_profile(
    scaling: str = "drf",
    registry: Registry | None = None,
    *,
    floor: FloorParams = DEFAULT_FLOOR,
    ordering: PolicyChoice | None = None,
) -> Profile:
    """The `dl2` profile with an incumbent heuristic's scaling: the teacher DL2 imitates.

    `floor` is the heuristic's (DRF or Optimus, :class:`FloorParams`), as it is the
    model's that imitates it (`keep_running=False`: running jobs reallocated from their
    minimum; `minimum_when_full`: waiting jobs given their minimum over a full pool), and
    not applied to a heuristic without a floor (as requested gives every job its request);
    `ordering` replaces the profile's ordering (:attr:`EpisodeSpec.ordering`)."""
    reg = registry or build_registry()
    dl2 = dl2_profile(reg, ordering)
    floored = issubclass(reg.spec(Stage.SCALING, scaling).info.Params, FloorParams)
    params: dict[str, object] = floor.model_dump(exclude_defaults=True) if floored else {}
    return dl2.model_copy(
        update={
            "name": f"dl2-teacher-{scaling}",
            "scaling": dl2.scaling.model_copy(update={"name": scaling, "params": params}),
            "fallback": {},
        }
    )


def simulated_records(
    episodes: Iterable[EpisodeSpec], profile: Profile, registry: Registry | None = None
) -> Iterator[tuple[Snapshot, Decision]]:
    """Every (snapshot, decision) of `profile` running each episode: a simulated decision log."""
    decider = EngineDecider(profile, registry or build_registry())
    for spec in episodes:
        sim = spec.simulation()
        snapshot = sim.reset(seed=spec.seed)
        while snapshot is not None:
            decision = decider(snapshot, sim.round_seed(), "teacher")
            yield snapshot, decision
            snapshot, _ = sim.step(decision)


@dataclass(frozen=True)
class ImitationArgs:
    """Supervised warm-up settings (the paper: Adam, cross-entropy)."""

    epochs: int = 8
    batch_size: int = 256
    learning_rate: float = 1e-3
    seed: int = 0


def imitate(
    model: Dl2Model,
    data: Demonstrations,
    args: ImitationArgs,
    *,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> list[dict[str, float]]:
    """Train `model` in place to pick the teacher's actions; one log row per epoch.

    `on_epoch` is called with each row as it is written (a progress report).

    The loss is cross-entropy over the valid actions only (masked logits), so the
    network spends no capacity on actions it can never take.
    """
    if len(data) == 0:
        return []
    generator = torch.Generator().manual_seed(args.seed)
    optimizer = torch.optim.Adam(model.network.parameters(), lr=args.learning_rate)
    states = torch.from_numpy(data.states)
    masks = torch.from_numpy(data.masks)
    actions = torch.from_numpy(data.actions)
    loss_fn = nn.CrossEntropyLoss()
    log: list[dict[str, float]] = []
    model.network.train()
    for epoch in range(args.epochs):
        started = time.perf_counter()
        order = torch.randperm(len(data), generator=generator)
        total_loss = 0.0
        correct = 0
        for first in range(0, len(data), args.batch_size):
            batch = order[first : first + args.batch_size]
            logits = masked_logits(model.logits(states[batch]), masks[batch])
            loss = loss_fn(logits, actions[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += float(loss.item()) * len(batch)
            correct += int((logits.argmax(-1) == actions[batch]).sum().item())
        log.append(
            {
                "epoch": float(epoch),
                "loss": total_loss / len(data),
                "accuracy": correct / len(data),
                "seconds": time.perf_counter() - started,
            }
        )
        if on_epoch is not None:
            on_epoch(log[-1])
    model.network.eval()
    return log
