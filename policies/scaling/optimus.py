"""Optimus marginal-gain resource allocation (Peng et al., EuroSys 2018).

Optimus gives every job the least it can run with, then hands out the rest of
the cluster one step at a time to the job whose estimated remaining time drops
the most for the resources the step costs, until resources run out or no step
helps. Remaining time at a worker count comes from :meth:`Job.remaining_time_s`,
which scales the caller's estimate by the job's speed-up hints
(:meth:`Job.speedup_at`); Optimus fits those curves online, the caller does it
here and sends the result in the snapshot.

Choices, and why:
- The gain of a step is seconds saved per added GPU: Optimus divides the time
  a step saves by the resources it costs, and GPUs are the ones that bind on a
  GPU cluster; CPUs and memory must still fit.
- Parameter servers stay as requested (`job.ps`): the snapshot carries no
  model of how a job's speed depends on its parameter servers, which Optimus
  needs to weigh a server against a worker.
- Running jobs keep what they hold before anything else: scaling does not
  preempt (that is the ordering's call). `keep_running: false` starts them at
  their minimum instead, so that the steps reallocate every job every round, as
  Optimus itself does each interval (ours; an experiment's setting, docs/dl2.md).
  Waiting jobs then get their minimum in service order while the pool lasts; one
  that does not fit waits, and later, smaller ones may still start.
  `minimum_when_full: true` gives one that does not fit its minimum anyway (taking
  nothing from the pool, and no steps beyond it): placement then starts it only
  if the ordering preempts for it, as SRTF does for a shorter job (ours;
  docs/dl2.md, *Behind another ordering*).
- A job whose remaining time is unknown runs at its minimum: without an
  estimate there is no gain to compare.

Steps sit in a heap keyed by gain, so a call costs O((jobs + steps) · log jobs).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from typing import ClassVar

from policies.common.pool import (
    FloorParams,
    OverFullReasons,
    ResourcePool,
    keep_running,
    worker_counts,
)
from policies.common.wording import counted
from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context


class Optimus:
    name: ClassVar[str] = "optimus"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "Minimum for every job, then workers where they cut remaining time the most per GPU."
    )
    source: ClassVar[str] = "Peng et al., Optimus, EuroSys 2018 (marginal-gain allocation)."
    Params: ClassVar[type[FloorParams]] = FloorParams

    def __init__(self, params: FloorParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        snapshot = ctx.snapshot
        pool = ResourcePool.for_training(snapshot)
        counts = worker_counts(jobs)
        workers, reasons = keep_running(
            jobs, snapshot, pool, "Optimus", at_minimum=not self.params.keep_running
        )
        # Most waiting jobs of a full cluster are refused with one of a few reasons
        # (by their minimum and the GPUs left): each worded once.
        refusals: dict[tuple[int, int, float], str] = {}
        over_full = OverFullReasons("Optimus")  # given their minimum over a full pool
        running = JobState.RUNNING
        beyond: set[str] = set()  # given their minimum over a full pool: no steps
        for job in jobs:
            if job.state is running:
                continue
            minimum = counts[job.id][0]
            if pool.fits(job, minimum):
                workers[job.id] = minimum
                pool.take(job, minimum)
            elif self.params.minimum_when_full:
                workers[job.id] = minimum
                beyond.add(job.id)
                reasons[job.id] = over_full.of(job, minimum, pool)
            else:
                workers[job.id] = 0
                key = (minimum, job.gpus_per_worker, pool.left[0])
                reason = refusals.get(key)
                if reason is None:
                    reason = refusals[key] = (
                        f"Optimus: no capacity left at its minimum of {counted(minimum, 'worker')} "
                        f"({counted(minimum * job.gpus_per_worker, 'GPU')}; "
                        f"{counted(float(max(0.0, pool.left[0])), 'GPU')} left)"
                    )
                reasons[job.id] = reason

        # Max-heap of the next step of every job that runs: (-gain, service rank, job, the
        # step's count, remaining time at it). A job has one entry at a time and its rank
        # is unique, so entries never compare past the rank: the count and time ride
        # along, and the time after a step is the "now" of the job's next step (not
        # computed twice).
        steps: list[tuple[float, int, str, int, float]] = []
        by_id = {job.id: job for job in jobs}
        last_gain: dict[str, float] = {}
        heappush = heapq.heappush

        def push_step(job: Job, rank: int, at: int, now: float | None) -> None:
            allowed = counts[job.id]
            if at >= allowed[-1]:
                return  # at its largest count (every rigid job): no step to weigh
            step = allowed[bisect_right(allowed, at)]
            if now is None:
                now = job.remaining_time_s(at)
                if now is None:
                    return  # remaining time unknown: no gain to weigh
            after = job.remaining_time_s(step)
            if after is None:
                return
            gain = (now - after) / ((step - at) * job.gpus_per_worker)
            heappush(steps, (-gain, rank, job.id, step, after))

        # On a full cluster no step fits (each costs a GPU at least): none is weighed.
        if pool.has_a_gpu_left():
            for rank, job in enumerate(jobs):
                at = workers[job.id]
                # Rigid jobs (most of them) are at their largest count: no step to weigh.
                if at > 0 and at < counts[job.id][-1] and job.id not in beyond:
                    push_step(job, rank, at, None)
        heappop = heapq.heappop
        while steps:
            negative_gain, rank, job_id, step, after = heappop(steps)
            if negative_gain >= 0:
                break  # the best step left saves nothing; neither does any other
            job = by_id[job_id]
            at = workers[job_id]
            if not pool.fits(job, step - at):
                continue  # the pool only shrinks: this job's next step will never fit
            pool.take(job, step - at)
            workers[job_id] = step
            last_gain[job_id] = -negative_gain
            push_step(job, rank, step, after)

        out = []
        unknown: dict[int, str] = {}  # the two reasons that depend on the count alone
        no_step: dict[int, str] = {}
        for job in jobs:
            count = workers[job.id]
            reason = reasons.get(job.id)
            if reason is None:
                if job.estimated_duration_s is None:  # no remaining time without it
                    reason = unknown.get(count) or unknown.setdefault(
                        count,
                        f"Optimus: {counted(count, 'worker')}; remaining time unknown, "
                        "so no gain to add",
                    )
                elif job.id in last_gain:
                    reason = (
                        f"Optimus: {counted(count, 'worker')}; its last step saved "
                        f"{last_gain[job.id]:.1f} s of remaining time per added GPU"
                    )
                else:
                    reason = no_step.get(count) or no_step.setdefault(
                        count,
                        f"Optimus: {counted(count, 'worker')}; no further step fit or saved time "
                        "ahead of other jobs",
                    )
            out.append(ScalingResult(job_id=job.id, workers=count, ps=job.ps, reason=reason))
        return out
