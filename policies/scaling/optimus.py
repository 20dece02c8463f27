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
  preempt (that is the ordering's call). Waiting jobs then get their minimum in
  service order while the pool lasts; one that does not fit waits, and later,
  smaller ones may still start.
- A job whose remaining time is unknown runs at its minimum: without an
  estimate there is no gain to compare.

Steps sit in a heap keyed by gain, so a call costs O((jobs + steps) · log jobs).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import ClassVar

from policies.common.pool import ResourcePool, keep_running, next_count, worker_counts
from policies.common.wording import counted
from policies.decision import ScalingResult, Stage
from policies.model import Job, JobState
from policies.protocols import Context, NoParams


class Optimus:
    name: ClassVar[str] = "optimus"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = (
        "Minimum for every job, then workers where they cut remaining time the most per GPU."
    )
    source: ClassVar[str] = "Peng et al., Optimus, EuroSys 2018 (marginal-gain allocation)."
    Params: ClassVar[type[NoParams]] = NoParams

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        snapshot = ctx.snapshot
        pool = ResourcePool.for_training(snapshot)
        counts = worker_counts(jobs)
        workers, reasons = keep_running(jobs, snapshot, pool, "Optimus")
        # Most waiting jobs of a full cluster are refused with one of a few reasons
        # (by their minimum and the GPUs left): each worded once.
        refusals: dict[tuple[int, int, float], str] = {}
        running = JobState.RUNNING
        for job in jobs:
            if job.state is running:
                continue
            minimum = counts[job.id][0]
            if pool.fits(job, minimum):
                workers[job.id] = minimum
                pool.take(job, minimum)
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

        # Max-heap of the next step of every job that runs: (-gain, service rank, job).
        steps: list[tuple[float, int, str]] = []
        by_id = {job.id: job for job in jobs}
        last_gain: dict[str, float] = {}

        def push_step(job: Job, rank: int) -> None:
            if workers[job.id] >= counts[job.id][-1]:
                return  # at its largest count (every rigid job): no step to weigh
            gain = _gain(job, workers[job.id], counts[job.id])
            if gain is not None:
                heapq.heappush(steps, (-gain, rank, job.id))

        for rank, job in enumerate(jobs):
            if workers[job.id] > 0:
                push_step(job, rank)
        while steps:
            negative_gain, rank, job_id = heapq.heappop(steps)
            if negative_gain >= 0:
                break  # the best step left saves nothing; neither does any other
            job = by_id[job_id]
            step = next_count(counts[job_id], workers[job_id])
            if step is None or not pool.fits(job, step - workers[job_id]):
                continue  # the pool only shrinks: this job's next step will never fit
            pool.take(job, step - workers[job_id])
            workers[job_id] = step
            last_gain[job_id] = -negative_gain
            push_step(job, rank)

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


def _gain(job: Job, workers: int, counts: list[int]) -> float | None:
    """Seconds of remaining time saved per GPU by the next step; None without step or estimate."""
    step = next_count(counts, workers)
    if step is None:
        return None
    now = job.remaining_time_s(workers)
    after = job.remaining_time_s(step)
    if now is None or after is None:
        return None
    return (now - after) / ((step - workers) * job.gpus_per_worker)
