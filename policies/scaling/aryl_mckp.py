"""Aryl's elastic scaling: extra workers as a multiple-choice knapsack (Li et al. 2022).

Aryl ("Aryl: An Elastic Cluster Scheduler for Deep Learning", Li, Xu, Zhu, Liu,
Guo, Wang, 2022; published as Lyra, EuroSys 2023) gives every job its base
demand first, then shares the GPUs left (loaned inference servers included)
among elastic jobs. Each elastic job is a *class* whose *items* are the extra
worker counts it accepts; an item's value is the reduction of the job's
completion time that the extra workers bring, its weight the GPUs they take.
Picking one item per class to maximise the total value within the free GPUs is
a multiple-choice knapsack, solved exactly by dynamic programming over GPUs
(the paper's section on elastic scaling, "JCT reduction value").

Choices, and why:
- Values come from the snapshot's throughput hints: `Job.remaining_time_s(n)`
  scales the caller's remaining-time estimate by the speed-up hints
  (`Job.speedup`), the same model the simulator reports. The value of n workers
  over the base is the seconds of remaining time they save, so the total is the
  reduction of the sum of completion times. A job without an estimate has no
  value to weigh and stays at its base.
- Base demand: running jobs keep what they hold (scaling never preempts; giving
  servers back is the reclaim's call), rigid jobs get their request, and
  elastic jobs their minimum (`base = "min"`, so that everything
  above it is an extra worker a reclaim can take away by shrinking) or their
  request (`base = "requested"`). Waiting jobs get their base in service order
  while the GPUs last. Base demand comes before extras: when a waiting job's
  base does not fit, running elastic jobs give back extra workers (the least
  urgent first, one accepted step at a time) if that makes it fit; otherwise it
  waits, and later smaller ones may still start.
- Items are the counts the job accepts above its base (bounds and step rule,
  :meth:`Job.allowed_worker_counts`), plus "no extra" at weight 0, so every
  class has an item that fits.
- The knapsack is over GPUs, the resource that binds, as in the paper. CPUs and
  memory must still fit: items that alone would exceed what is left are
  dropped before solving, and if the chosen items together overrun them, jobs
  in service order step down to the largest item that still fits.
- Among optimal choices the one with the fewest GPUs is kept, so GPUs that
  save no time stay free for the queue.

Cost: O(items · G) array operations of length G, the GPUs left (capped at what
all extra items together could use), vectorised with numpy; a few milliseconds
for hundreds of elastic jobs on thousands of GPUs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.common.pool import ResourcePool, demand, keep_running
from policies.common.wording import counted
from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context

Item = tuple[int, float]
"""(weight in GPUs, value in seconds of remaining time saved)."""


class ArylScalingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base: Literal["min", "requested"] = Field(
        default="min",
        description=(
            "Base demand of a waiting elastic job: its minimum worker count (everything "
            "above is extra) or its requested count."
        ),
    )


class ArylKnapsack:
    name: ClassVar[str] = "aryl"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "Base demand for every job, then extra workers for elastic jobs by a "
        "multiple-choice knapsack on remaining-time reduction."
    )
    source: ClassVar[str] = (
        "Li et al., Aryl: An Elastic Cluster Scheduler for Deep Learning, 2022 (Lyra, "
        "EuroSys 2023), elastic scaling."
    )
    Params: ClassVar[type[ArylScalingParams]] = ArylScalingParams

    def __init__(self, params: ArylScalingParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        snapshot = ctx.snapshot
        pool = ResourcePool.for_training(snapshot)
        workers, reasons = keep_running(jobs, snapshot, pool, "Aryl")
        for job_id, count in workers.items():
            reasons.setdefault(job_id, f"Aryl: keeps the {counted(count, 'worker')} it holds")
        extras = _Extras(jobs, workers)
        for job in jobs:
            if job.state is JobState.RUNNING:
                continue
            base = self._base(job)
            if not pool.fits(job, base):
                extras.give_back_for(job, base, workers=workers, reasons=reasons, pool=pool)
            if pool.fits(job, base):
                workers[job.id] = base
                pool.take(job, base)
                reasons[job.id] = f"Aryl: base demand of {counted(base, 'worker')}"
            else:
                workers[job.id] = 0
                reasons[job.id] = (
                    f"Aryl: no capacity left for its base demand of {counted(base, 'worker')} "
                    f"({counted(base * job.gpus_per_worker, 'GPU')}; "
                    f"{counted(float(max(0.0, pool.left[0])), 'GPU')} left)"
                )

        # One class per elastic job that runs and has counts above its base.
        growing: list[tuple[Job, list[int], list[Item]]] = []
        for job in jobs:
            base = workers[job.id]
            if base == 0 or not job.elastic:
                continue
            accepted = job.allowed_worker_counts()  # ascending
            above = accepted[bisect.bisect_right(accepted, base) :]
            if not above:
                continue
            now = job.remaining_time_s(base)
            if now is None:
                reasons[job.id] += "; remaining time unknown, so no extra workers to weigh"
                continue
            # More workers need more of every resource: once a count does not fit, no
            # larger one does (a job may accept thousands of counts).
            fitting = []
            for count in above:
                if not pool.fits(job, count - base):
                    break
                fitting.append(count)
            counts, items = [base, *fitting], [(0, 0.0)]
            for count, after in zip(fitting, job.remaining_times_s(fitting) or [], strict=True):
                items.append(((count - base) * job.gpus_per_worker, now - after))
            growing.append((job, counts, items))

        capacity = max(0, math.floor(pool.left[0] + 1e-9))
        chosen = solve_mckp([items for _, _, items in growing], capacity)
        if chosen is None:  # pragma: no cover - every class has a weightless item
            chosen = [0] * len(growing)
        for (job, counts, items), optimal in zip(growing, chosen, strict=True):
            base, pick = counts[0], optimal
            # CPUs and memory: step down to the largest chosen-or-smaller item that fits.
            while pick > 0 and not pool.fits(job, counts[pick] - base):
                pick -= 1
            if pick == 0:
                reasons[job.id] += "; extra workers save more time on other jobs or do not fit"
                continue
            pool.take(job, counts[pick] - base)
            workers[job.id] = counts[pick]
            reasons[job.id] += (
                f"; {counts[pick] - base} extra workers ({counted(items[pick][0], 'GPU')}) cut its "
                f"remaining time by {items[pick][1]:.1f} s"
            )

        return [
            ScalingResult(job_id=job.id, workers=workers[job.id], ps=job.ps, reason=reasons[job.id])
            for job in jobs
        ]

    def _base(self, job: Job) -> int:
        if self.params.base == "requested" or not job.elastic:
            return job.workers
        return job.allowed_worker_counts()[0]


class _Extras:
    """Workers running elastic jobs hold above their minimum, which base demand comes before.

    Aryl gives every job its base first: a running job's workers above its minimum
    were lent from GPUs nobody needed then. When a waiting job's base does not fit,
    the least urgent running jobs (last in service order) give back first, one
    accepted step at a time, and only if giving back every extra left would let the
    waiting job fit; otherwise nothing is shrunk (a restart for nothing). The donors
    and what they could free are worked out once per round, so a long queue that
    does not fit costs one comparison per job.
    """

    def __init__(self, jobs: Sequence[Job], workers: dict[str, int]) -> None:
        self.donors: list[tuple[Job, Sequence[int]]] = []
        self.freeable = [0.0, 0.0, 0.0]
        for job in reversed(jobs):
            if job.state is not JobState.RUNNING or not job.elastic:
                continue
            counts = job.allowed_worker_counts()
            spare = workers.get(job.id, 0) - counts[0]
            if spare > 0:
                self.donors.append((job, counts))
                self._add(job, spare)

    def _add(self, job: Job, workers: int) -> None:
        for i, amount in enumerate(demand(job, workers)):
            self.freeable[i] += amount

    def give_back_for(
        self,
        waiting: Job,
        base: int,
        *,
        workers: dict[str, int],
        reasons: dict[str, str],
        pool: ResourcePool,
    ) -> None:
        room = zip(demand(waiting, base), pool.left, self.freeable, strict=True)
        if any(need > left + free + 1e-9 for need, left, free in room):
            return
        for donor, counts in self.donors:
            held = workers[donor.id]
            before = held
            while not pool.fits(waiting, base) and held > counts[0]:
                lower = max(c for c in counts if c < held)
                pool.take(donor, lower - held)  # a negative take gives the workers back
                self._add(donor, lower - held)
                held = lower
            if held != before:
                reasons[donor.id] = (
                    f"Aryl: gives back {before - held} extra workers so that "
                    f"waiting job {waiting.id!r} gets its base demand"
                )
                workers[donor.id] = held
            if pool.fits(waiting, base):
                return


def solve_mckp(classes: Sequence[Sequence[Item]], capacity: int) -> list[int] | None:
    """An optimal multiple-choice knapsack: one item per class, total weight ≤ `capacity`.

    Returns the index of the chosen item in each class, or None when no choice fits.
    Weights are non-negative integers. Dynamic programming over the capacity: after
    each class, `best[c]` is the largest value of the classes so far within weight c
    (so `best` only grows with c), and `picks[k][c]` the item of class k behind it.
    Among optimal choices it returns one of least total weight: within a class, the
    lighter of equal-valued items; across classes, the least capacity that reaches
    the optimum.
    """
    if capacity < 0:
        return None
    if not classes:
        return []
    heaviest = sum(max((w for w, _ in items), default=0) for items in classes)
    cap = min(capacity, heaviest)
    best = np.zeros(cap + 1)
    picks = np.full((len(classes), cap + 1), -1, dtype=np.int32)
    for k, items in enumerate(classes):
        new = np.full(cap + 1, -np.inf)
        row = picks[k]
        for i in sorted(range(len(items)), key=lambda i: items[i][0]):
            weight, value = items[i]
            if weight > cap:
                continue
            candidate = best[: cap + 1 - weight] + value
            better = candidate > new[weight:]  # strict: lighter items, seen first, win ties
            new[weight:][better] = candidate[better]
            row[weight:][better] = i
        best = new
    top = best[cap]
    if not np.isfinite(top):
        return None
    tolerance = 1e-9 * max(1.0, abs(float(top)))
    at = int(np.argmax(best >= top - tolerance))
    choice = [0] * len(classes)
    for k in range(len(classes) - 1, -1, -1):
        i = int(picks[k][at])
        choice[k] = i
        at -= classes[k][i][0]
    return choice
