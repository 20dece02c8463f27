"""DL2's view of a scheduling round: state, valid actions, and how an action changes them.

Follows Peng et al., "DL2: A Deep Learning-driven Scheduler for Deep Learning
Clusters" (2019), §4.1 (state, actions, multiple inferences per time slot). The
serving policy (:mod:`policies.scaling.dl2`) and the trainers (`training.dl2`)
step this same object, so what the network is trained on is what it is served.

**A round.** Every job first gets its floor: a running job keeps what it holds
(or drops to its minimum when the policy may rescale running jobs), a waiting job
gets its minimum workers (plus one parameter server when it uses them) in service
order while the pool has room (with `minimum_when_full`, also once it has none, taking
nothing from it and never in the window: a preemptive ordering may start such a job).
The paper's code gives every job such a bundle first "to avoid starvation"; here it
also means a model that stops at once is the min-allocation baseline, never an idle
cluster. The model then hands out what is left one step at a time: each inference
picks one action for one job of the window (one worker step, one parameter server,
or both) or *stop*; the state is updated and the model asked again, until stop or no
valid action remains.

**The window** (§4.1: "at most J jobs"). The J most urgent jobs, in the service
order the ordering stage chose, among those that got workers and can still grow.
Jobs outside it keep their floor this round. Slots of the window that are empty,
and actions a job cannot take (its next worker count is past its maximum or its
step rule, the pool lacks the GPUs, CPUs or memory, parameter servers at their
cap), are masked out: the network never has to learn what is impossible.

**State**, per window slot (zero rows for empty slots), with the paper's fields:
- the model family, one-hot over a vocabulary saved with the model, plus one
  bucket for any other (or no) family: the paper's J×L type matrix, but the
  vocabulary travels with the weights so a new family cannot shift the columns;
- time in the system and estimated remaining time, as log(1 + t / time scale):
  the paper counts time slots, but event-driven rounds have no fixed slot, and
  durations span seconds to weeks, so a log scale keeps them in a few units;
- progress (0–1) and a flag when the remaining time is unknown;
- the job's dominant share of the pool (GPUs, CPUs, memory), as in the paper;
- workers and parameter servers, as fractions of the job's maxima, the ratio of
  servers to workers, whether it uses servers, and whether it was running before
  the round (growing a running job restarts it).
Two deviations, both cheap and both in the snapshot already: the relative speed-up
of the job's next worker step (from its speed-up hints; linear without them) and
that step's GPUs as a share of the pool. The paper lets the network learn a job
type's scaling curve from rewards alone; the hints save that. Five global inputs
close the vector: the free share of GPUs, CPUs and memory, and how many jobs wait
at zero workers or sit beyond the window (log scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.common.pool import (
    DEFAULT_FLOOR,
    FloorParams,
    OverFullReasons,
    ResourcePool,
    demand,
    held_count,
    holds_unusable_gpus,
    next_count,
)
from policies.common.wording import counted
from policies.decision import ScalingResult
from policies.learned.models import InvalidActionError
from policies.model import Job, JobState, Snapshot

# Actions per window slot, in this order; the last action of all is "stop".
ADD_WORKER = 0
ADD_PS = 1
ADD_BOTH = 2
ACTIONS_PER_SLOT = 3

_NUMERIC_FEATURES: tuple[str, ...] = (
    "present",
    "time_in_system",
    "progress",
    "remaining",
    "remaining_unknown",
    "dominant_share",
    "workers",
    "was_running",
    "next_step_speedup",
    "next_step_gpu_share",
    "uses_ps",
    "ps",
    "ps_per_worker",
)
GLOBAL_FEATURES: tuple[str, ...] = (
    "free_gpus",
    "free_cpus",
    "free_memory",
    "jobs_waiting",
    "jobs_beyond_window",
)
_SLACK = 1e-9


class Dl2Config(BaseModel):
    """The shape of a DL2 network and its inputs; saved with the weights."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(
        default=20,
        ge=1,
        le=256,
        description="J, the jobs the network sees and acts on per round (the paper: 20 or 40).",
    )
    families: tuple[str, ...] = Field(
        default=(),
        description="Model families with their own one-hot column; others share one more.",
    )
    hidden: tuple[int, int] = Field(
        default=(128, 64), description="Widths of the two fully connected hidden layers."
    )
    time_scale_s: float = Field(
        default=3600.0, gt=0, description="Times enter as log(1 + t / time_scale_s)."
    )

    @property
    def family_columns(self) -> int:
        return len(self.families) + 1

    @property
    def job_features(self) -> int:
        return len(_NUMERIC_FEATURES) + self.family_columns

    @property
    def input_size(self) -> int:
        return self.window * self.job_features + len(GLOBAL_FEATURES)

    @property
    def actions(self) -> int:
        return ACTIONS_PER_SLOT * self.window + 1

    @property
    def stop_action(self) -> int:
        return ACTIONS_PER_SLOT * self.window

    def feature_names(self) -> list[str]:
        """Names of the input vector's entries, in order (for docs and debugging)."""
        per_job = list(_NUMERIC_FEATURES[:1])
        per_job += [f"family={f}" for f in self.families] + ["family=other"]
        per_job += list(_NUMERIC_FEATURES[1:])
        names = [f"slot{i}.{name}" for i in range(self.window) for name in per_job]
        return names + list(GLOBAL_FEATURES)


@dataclass
class _Slot:
    job: Job
    counts: Sequence[int]
    uses_ps: bool
    ps_cap: int
    was_running: bool
    static: np.ndarray  # the features that do not change within a round


class Allocation:
    """One round of DL2: the floor, then one action at a time (see the module docstring).

    `jobs` are the jobs to scale in service order (most urgent first). Not
    thread-safe; build one per decision.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        jobs: Sequence[Job],
        config: Dl2Config,
        *,
        floor: FloorParams = DEFAULT_FLOOR,
    ) -> None:
        self.config = config
        self.snapshot = snapshot
        self.jobs = list(jobs)
        self.pool = ResourcePool.for_training(snapshot)
        self.workers: dict[str, int] = {}
        self.ps: dict[str, int] = {}
        self.steps: dict[str, int] = {}
        self._floor_notes: dict[str, str] = {}
        self.actions_taken = 0
        self._counts = {job.id: job.allowed_worker_counts() for job in self.jobs}

        keep = floor.keep_running
        for job in self.jobs:
            if job.state is not JobState.RUNNING:
                continue
            if holds_unusable_gpus(job, snapshot):
                self.workers[job.id] = 0
                self.ps[job.id] = 0
                self._floor_notes[job.id] = (
                    "DL2: it holds GPUs on a node training can no longer use"
                )
                continue
            count = held_count(job) if keep else self._counts[job.id][0]
            servers = 0
            if _uses_ps(job):
                servers = max(1, min(job.ps, _ps_cap(job))) if keep else 1
            self._grant(job, count, servers)
        over_pool: set[str] = set()  # waiting jobs at their minimum beyond the pool
        over_full = OverFullReasons("DL2")
        for job in self.jobs:
            if job.state is JobState.RUNNING:
                continue
            minimum = self._counts[job.id][0]
            servers = 1 if _uses_ps(job) else 0
            if self._fits(job, minimum, servers):
                self._grant(job, minimum, servers)
            elif floor.minimum_when_full:
                self.workers[job.id] = minimum
                self.ps[job.id] = servers
                over_pool.add(job.id)
                self._floor_notes[job.id] = over_full.of(job, minimum, self.pool, servers)
            else:
                self.workers[job.id] = 0
                self.ps[job.id] = 0
                gpus, cpus, memory = demand(job, minimum)
                left = ", ".join(f"{max(0.0, x):g}" for x in self.pool.left)
                self._floor_notes[job.id] = (
                    f"DL2: no capacity left at its minimum of {counted(minimum, 'worker')} "
                    f"({counted(float(gpus), 'GPU')}, {counted(float(cpus), 'CPU')}, "
                    f"{memory:g} GB; GPUs, CPUs, GB left: {left})"
                )

        growable = [
            job
            for job in self.jobs
            if self.workers[job.id] > 0 and job.id not in over_pool and self._can_grow(job)
        ]
        self.window: list[_Slot] = [self._slot(job) for job in growable[: config.window]]
        self.beyond_window = len(growable) - len(self.window)
        # Jobs at their minimum beyond the pool wait too, as far as the pool can tell.
        self.waiting = sum(
            1 for job in self.jobs if self.workers[job.id] == 0 or job.id in over_pool
        )
        self._rows = np.zeros((config.window, config.job_features), dtype=np.float32)
        for i in range(len(self.window)):
            self._refresh(i)

    # -- what the network sees ---------------------------------------------------------------
    def observation(self) -> np.ndarray:
        """The state vector (float32, `config.input_size` entries); a fresh copy."""
        totals = self.pool.total
        free = [
            min(1.0, max(0.0, left / total)) if total > 0 else 0.0
            for left, total in zip(self.pool.left, totals, strict=True)
        ]
        extra = np.array(
            [
                *free,
                math.log1p(self.waiting) / 4.0,
                math.log1p(self.beyond_window) / 4.0,
            ],
            dtype=np.float32,
        )
        return np.concatenate([self._rows.reshape(-1), extra])

    def mask(self) -> np.ndarray:
        """Valid actions (bool, `config.actions` entries); stop is always valid."""
        valid = np.zeros(self.config.actions, dtype=bool)
        for i, slot in enumerate(self.window):
            grow, server = self._worker_step(slot), self._can_add_ps(slot)
            base = ACTIONS_PER_SLOT * i
            valid[base + ADD_WORKER] = grow is not None
            valid[base + ADD_PS] = server
            valid[base + ADD_BOTH] = (
                grow is not None and server and self._fits(slot.job, grow, 1, extra=True)
            )
        valid[self.config.stop_action] = True
        return valid

    # -- acting --------------------------------------------------------------------------------
    def apply(self, action: int) -> None:
        """Take `action` (not stop); InvalidActionError if it is not valid now."""
        if not 0 <= action < self.config.stop_action:
            raise InvalidActionError(f"action {action} is not a job action")
        index, kind = divmod(action, ACTIONS_PER_SLOT)
        if index >= len(self.window) or not self.mask()[action]:
            raise InvalidActionError(f"action {action} is masked in this state")
        slot = self.window[index]
        job = slot.job
        workers = self.workers[job.id]
        grow = self._worker_step(slot) if kind in (ADD_WORKER, ADD_BOTH) else None
        add_workers = 0 if grow is None else grow - workers
        add_ps = 1 if kind in (ADD_PS, ADD_BOTH) else 0
        self._grant(job, workers + add_workers, self.ps[job.id] + add_ps)
        self.steps[job.id] = self.steps.get(job.id, 0) + 1
        self.actions_taken += 1
        self._refresh(index)

    def has_job_action(self) -> bool:
        return bool(self.mask()[: self.config.stop_action].any())

    # -- reading the allocation -------------------------------------------------------------
    def allocation(self, job_id: str) -> tuple[int, int]:
        """(workers, parameter servers) of a job as the round stands."""
        return self.workers[job_id], self.ps[job_id]

    def dominant_share(self, job: Job) -> float:
        used = list(demand(job, self.workers[job.id]))
        servers = self.ps[job.id]
        used[1] += servers * job.ps_cpus
        used[2] += servers * job.ps_memory_gb
        return self.pool.share(used)[0]

    def results(self, label: str) -> list[ScalingResult]:
        """One result per job, in the order given; `label` names the model in reasons."""
        in_window = {slot.job.id for slot in self.window}
        out = []
        for job in self.jobs:
            workers, servers = self.workers[job.id], self.ps[job.id]
            reason = self._floor_notes.get(job.id)
            if reason is None:
                shape = f"{counted(workers, 'worker')}" + (
                    f", {counted(servers, 'parameter server')}" if servers else ""
                )
                if job.id in in_window:
                    steps = self.steps.get(job.id, 0)
                    reason = (
                        f"DL2 ({label}): {shape}; the model added {steps} step"
                        f"{'' if steps == 1 else 's'} to its floor"
                    )
                elif self._can_grow(job):
                    reason = (
                        f"DL2: {shape}, its floor; outside the model's window of "
                        f"{self.config.window} jobs this round"
                    )
                else:
                    reason = f"DL2: {shape}; it cannot grow (at its maximum or no room)"
            out.append(
                ScalingResult(
                    job_id=job.id, workers=workers, ps=servers if workers else 0, reason=reason
                )
            )
        return out

    # -- internals -------------------------------------------------------------------------------
    def _slot(self, job: Job) -> _Slot:
        cfg = self.config
        static = np.zeros(cfg.job_features, dtype=np.float32)
        static[0] = 1.0
        column = cfg.families.index(job.model) if job.model in cfg.families else len(cfg.families)
        static[1 + column] = 1.0
        base = 1 + cfg.family_columns
        age = max(0.0, self.snapshot.now - job.submit_time)
        static[base + 0] = math.log1p(age / cfg.time_scale_s)
        static[base + 1] = _progress(job)
        return _Slot(
            job=job,
            counts=self._counts[job.id],
            uses_ps=_uses_ps(job),
            ps_cap=_ps_cap(job),
            was_running=job.state is JobState.RUNNING,
            static=static,
        )

    def _refresh(self, index: int) -> None:
        slot = self.window[index]
        job = slot.job
        cfg = self.config
        row = self._rows[index]
        row[:] = slot.static
        base = 1 + cfg.family_columns
        workers, servers = self.workers[job.id], self.ps[job.id]
        remaining = job.remaining_time_s(workers) if workers > 0 else None
        row[base + 2] = 0.0 if remaining is None else math.log1p(remaining / cfg.time_scale_s)
        row[base + 3] = 1.0 if remaining is None else 0.0
        row[base + 4] = self.dominant_share(job)
        row[base + 5] = workers / job.hi
        row[base + 6] = 1.0 if slot.was_running else 0.0
        step = next_count(slot.counts, workers)
        if step is not None:
            now = job.speedup_at(workers)
            gain = (job.speedup_at(step) - now) / now if now > 0 else 1.0
            row[base + 7] = min(1.0, max(0.0, gain))
            total_gpus = self.pool.total[0]
            row[base + 8] = (
                min(1.0, (step - workers) * job.gpus_per_worker / total_gpus)
                if total_gpus > 0
                else 0.0
            )
        row[base + 9] = 1.0 if slot.uses_ps else 0.0
        row[base + 10] = servers / slot.ps_cap if slot.uses_ps else 0.0
        row[base + 11] = min(2.0, servers / max(workers, 1)) / 2.0

    def _grant(self, job: Job, workers: int, servers: int) -> None:
        before_w = self.workers.get(job.id, 0)
        before_p = self.ps.get(job.id, 0)
        self.pool.take(job, workers - before_w)
        extra_ps = servers - before_p
        self.pool.left[1] -= extra_ps * job.ps_cpus
        self.pool.left[2] -= extra_ps * job.ps_memory_gb
        self.workers[job.id] = workers
        self.ps[job.id] = servers

    def _fits(self, job: Job, workers: int, servers: int, *, extra: bool = False) -> bool:
        """Whether `workers` workers and `servers` servers fit (beyond what it has if `extra`)."""
        add_w = workers - self.workers[job.id] if extra else workers
        gpus, cpus, memory = demand(job, add_w)
        cpus += servers * job.ps_cpus
        memory += servers * job.ps_memory_gb
        left = self.pool.left
        return gpus <= left[0] + _SLACK and cpus <= left[1] + _SLACK and memory <= left[2] + _SLACK

    def _worker_step(self, slot: _Slot) -> int | None:
        """The next worker count of the slot's job if it is accepted and fits, else None."""
        workers = self.workers[slot.job.id]
        step = next_count(slot.counts, workers)
        if step is None or not self._fits(slot.job, step, 0, extra=True):
            return None
        return step

    def _can_add_ps(self, slot: _Slot) -> bool:
        return (
            slot.uses_ps
            and self.ps[slot.job.id] < slot.ps_cap
            and self._fits(slot.job, self.workers[slot.job.id], 1, extra=True)
        )

    def _can_grow(self, job: Job) -> bool:
        workers = self.workers[job.id]
        if next_count(self._counts[job.id], workers) is not None:
            return True
        return _uses_ps(job) and self.ps[job.id] < _ps_cap(job)


Chooser = Callable[[np.ndarray, np.ndarray], int]
"""Picks an action from a state and its mask of valid actions."""


def play(allocation: Allocation, choose: Chooser) -> None:
    """Play one round: ask `choose` until it says stop or no job action is valid.

    The one loop serving and training share. `choose` is not asked when stop is
    the only valid action (nothing to decide). An action the mask forbids
    raises InvalidActionError: a model must never be trusted to respect its mask.
    """
    stop = allocation.config.stop_action
    while True:
        mask = allocation.mask()
        if not mask[:stop].any():
            return
        action = choose(allocation.observation(), mask)
        if not 0 <= action < len(mask) or not mask[action]:
            raise InvalidActionError(f"the model chose action {action}, masked in this state")
        if action == stop:
            return
        allocation.apply(action)


def _uses_ps(job: Job) -> bool:
    return job.ps > 0 or (job.max_ps or 0) > 0


def _ps_cap(job: Job) -> int:
    """Most parameter servers DL2 gives the job: its `max_ps`, else one per worker at most."""
    if job.max_ps is not None:
        return max(1, job.max_ps)
    return max(1, job.ps, job.hi)


def _progress(job: Job) -> float:
    if job.total_work is not None:
        return job.progress()
    if job.estimated_duration_s:
        return min(1.0, job.executed_time_s / job.estimated_duration_s)
    return 0.0
