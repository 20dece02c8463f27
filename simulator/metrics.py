"""Metrics of a run, with the JSON keys fixed by DESIGN §6, and the raw records behind them.

Definitions:

* JCT (job completion time) = finish − submit, over completed jobs; percentiles
  interpolate linearly between order statistics (numpy's default).
* queueing delay = JCT − time holding GPUs: everything a completed job spent
  not running, before its first start and while suspended.
* makespan = last completion − first submission.
* `gpu_utilization` = GPU-seconds held by jobs ÷ GPU-seconds open to training
  (training pool plus loaned servers), over the simulated span; restart time
  counts as held (the GPUs are taken).
* `cost_usd` = GPU-seconds held × the node's price per GPU-hour ÷ 3600.
* `utility` = Σ over completed jobs with a utility function of its value at
  their JCT (`Utility.value_at` of policies/model.py: sigmoid
  `value / (1 + exp(steepness · (jct − midpoint) / midpoint))`, step: `value`
  if jct ≤ deadline); 0 when no job carries one.
* `sla_satisfaction` is a dispatch metric; the simulator does not replay
  inference requests yet, so it is `null`.
* `decision_ms_p50/p99`: wall time of the decider call alone (engine or HTTP
  round trip), excluding snapshot building and applying.
* `sim_wall_s`: wall time of the whole run.

Extra keys (not fixed): `jobs_unfinished` (never started or never finished:
e.g. a job no node can ever hold), `decisions`, `decide_wall_s` (wall time
inside the decider, summed), `jobs_per_s` and `decisions_per_s` (simulator
speed), `busy_gpu_hours`; for loaning runs, `reclaims` (reclaim requests
answered), `servers_reclaimed`, `reclaim_shrinks` and `reclaim_preemptions`
(jobs shrunk or preempted by them; the latter are also in `preemptions`),
`reclaim_wall_s` (wall time inside the reclaim calls, summed) and
`loaned_gpu_hours` (GPU-hours training jobs held on loaned inference servers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.model import Utility

METRIC_KEYS: tuple[str, ...] = (
    "jobs",
    "jobs_completed",
    "jobs_rejected",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "makespan_s",
    "gpu_utilization",
    "cost_usd",
    "preemptions",
    "utility",
    "sla_satisfaction",
    "decision_ms_p50",
    "decision_ms_p99",
    "sim_wall_s",
)

EXTRA_KEYS: tuple[str, ...] = (
    "jobs_unfinished",
    "decisions",
    "decide_wall_s",
    "jobs_per_s",
    "decisions_per_s",
    "busy_gpu_hours",
    "reclaims",
    "servers_reclaimed",
    "reclaim_shrinks",
    "reclaim_preemptions",
    "reclaim_wall_s",
    "loaned_gpu_hours",
)

TIMING_KEYS: frozenset[str] = frozenset(
    {
        "decision_ms_p50",
        "decision_ms_p99",
        "sim_wall_s",
        "decide_wall_s",
        "jobs_per_s",
        "decisions_per_s",
        "reclaim_wall_s",
    }
)
"""Keys that measure wall-clock time: the only ones two runs with one seed may differ in."""

RECORD_FIELDS: tuple[str, ...] = (
    "job_id",
    "tenant",
    "family",
    "gpus",
    "submit_s",
    "recorded_duration_s",
    "first_start_s",
    "finish_s",
    "jct_s",
    "queue_s",
    "run_s",
    "gpu_s",
    "preemptions",
    "restarts",
    "cost_usd",
    "status",
    "note",
)


def utility_at(utility: Utility, jct_s: float) -> float:
    """Value of a job that completed `jct_s` seconds after submission (the model's formula)."""
    return utility.value_at(jct_s)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job."""

    index: int
    job_id: str
    tenant: str
    family: str
    gpus: int
    submit_s: float
    recorded_duration_s: float
    first_start_s: float | None
    finish_s: float | None
    run_s: float
    gpu_s: float
    preemptions: int
    restarts: int
    cost_usd: float
    status: str
    note: str = ""
    utility: Utility | None = None

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.submit_s

    @property
    def queue_s(self) -> float | None:
        jct = self.jct_s
        return None if jct is None else jct - self.run_s

    def row(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in RECORD_FIELDS}


@dataclass
class TimeSeries:
    """Queue length and GPUs in use at every instant something happened."""

    t: list[float] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)
    capacity_gpus: list[int] = field(default_factory=list)

    def add(self, t: float, waiting: int, running: int, busy: int, capacity: int) -> None:
        if self.t and self.t[-1] == t:
            # Keep one point per instant: the state after everything at `t` happened.
            self.waiting[-1], self.running[-1] = waiting, running
            self.busy_gpus[-1], self.capacity_gpus[-1] = busy, capacity
            return
        self.t.append(t)
        self.waiting.append(waiting)
        self.running.append(running)
        self.busy_gpus.append(busy)
        self.capacity_gpus.append(capacity)


@dataclass
class SimulationResult:
    metrics: dict[str, Any]
    jobs: list[JobRecord]
    series: TimeSeries


def _percentile(values: np.ndarray[Any, np.dtype[np.float64]], q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


def compute_metrics(
    records: Sequence[JobRecord],
    *,
    busy_gpu_s: float,
    capacity_gpu_s: float,
    cost_usd: float,
    preemptions: int,
    decision_s: Sequence[float],
    wall_s: float,
) -> dict[str, Any]:
    completed = [r for r in records if r.status == "completed"]
    jct = np.array([r.jct_s for r in completed], dtype=np.float64)
    queue = np.array([r.queue_s for r in completed], dtype=np.float64)
    decisions_ms = np.array(decision_s, dtype=np.float64) * 1000.0
    submits = [r.submit_s for r in records]
    finishes = [r.finish_s for r in completed if r.finish_s is not None]
    makespan = (max(finishes) - min(submits)) if finishes and submits else 0.0
    utility = sum(
        utility_at(r.utility, r.jct_s)
        for r in completed
        if r.utility is not None and r.jct_s is not None
    )
    metrics: dict[str, Any] = {
        "jobs": len(records),
        "jobs_completed": len(completed),
        "jobs_rejected": sum(1 for r in records if r.status == "rejected"),
        "avg_jct_s": float(jct.mean()) if jct.size else None,
        "p50_jct_s": _percentile(jct, 50),
        "p95_jct_s": _percentile(jct, 95),
        "p99_jct_s": _percentile(jct, 99),
        "avg_queue_s": float(queue.mean()) if queue.size else None,
        "makespan_s": makespan,
        "gpu_utilization": busy_gpu_s / capacity_gpu_s if capacity_gpu_s > 0 else 0.0,
        "cost_usd": cost_usd,
        "preemptions": preemptions,
        "utility": utility,
        "sla_satisfaction": None,
        "decision_ms_p50": _percentile(decisions_ms, 50),
        "decision_ms_p99": _percentile(decisions_ms, 99),
        "sim_wall_s": wall_s,
        "jobs_unfinished": sum(1 for r in records if r.status == "unfinished"),
        "decisions": len(decision_s),
        "decide_wall_s": float(sum(decision_s)),
        "jobs_per_s": len(records) / wall_s if wall_s > 0 else None,
        "decisions_per_s": len(decision_s) / wall_s if wall_s > 0 else None,
        "busy_gpu_hours": busy_gpu_s / 3600.0,
    }
    return metrics
