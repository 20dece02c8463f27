"""From trace rows to simulated jobs: the fields a trace lacks, filled by named options.

Traces record when a job came, how many GPUs it asked for and how long it ran;
they say nothing of its model, its elasticity, its parameter servers or how
well its user guessed its run time. Each of these is filled by a named option
below (DESIGN §6), drawn per job from a stream seeded by `(seed, option, job
id)`, so a job gets the same draw whatever window of the trace is simulated.

* `model_mix` — `all` (default: uniform over every measured family), `gavel`
  (ResNet-18/50, Transformer, LM as in Gavel's job generator), `pollux` (the six
  Pollux/Sia models), `generic` (no model: linear speed-up, no locality), a
  single family name, or a comma-separated list of families.
* `elastic_fraction` — share of jobs that accept between half and twice their
  requested workers (powers of two when the request is one, else any count),
  drawn per job. Default 0: rigid jobs, as recorded. The bounds are an
  assumption in the spirit of Pollux/Optimus, which let jobs scale within a
  range; the share is ours to choose, since no trace records elasticity (Aryl's
  evidence uses 0.5, see docs/results.md).
* `ps_fraction` — share of jobs trained with parameter servers, requesting one
  server per worker and accepting up to twice that (DL2's measured range).
  Default 0: all-reduce jobs.
* `estimate_error` — sigma of a log-normal factor on the duration estimate that
  SJF/SRTF-style policies read. Default 0: the recorded duration is a perfect
  estimate, as in the Tiresias and Gavel simulators' SRTF baselines.
* `utility` — what finishing is worth, for OASiS and the `utility` metric
  (`policies.model.Utility`). `none` (default): no utility. `sigmoid`:
  V / (1 + e^((t − m)/m)) with t the completion time after submission and
  midpoint m = twice the recorded duration (≈ 0.73 V at t = 0, V/2 at t = m,
  ≈ 0.12 V at t = 3m). `step`: a hard deadline, V if t ≤ twice the recorded
  duration, else 0.
* `utility_value` — the value V. `gpu-hours` (default): the job's requested
  GPU-hours (GPUs × recorded duration), no draw, so every GPU-hour is worth the
  same whoever runs it. `priority`: a priority drawn per job, uniform in
  [1, 10] and independent of the job's size, as OASiS's evaluation gives jobs
  random priorities; value per GPU-hour then differs between jobs, which is
  what an admission policy can exploit.
* every job is a gang of one-GPU workers (`gpus_per_worker` 1), the only shape
  that all traces share; fractional GPUs (`gpu_milli`) are rounded up to one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from policies.model import Job, ScalingRule, SigmoidUtility, StepUtility, Utility
from simulator.perf import FAMILY_SOURCES, GENERIC
from simulator.traces import TraceJob

MODEL_MIXES: dict[str, tuple[str, ...]] = {
    "all": tuple(FAMILY_SOURCES),
    "gavel": tuple(f for f, (src, _) in FAMILY_SOURCES.items() if src == "gavel"),
    "pollux": tuple(f for f, (src, _) in FAMILY_SOURCES.items() if src == "pollux_sia"),
    "generic": (GENERIC,),
}


UTILITY_FORMS: tuple[str, ...] = ("none", "sigmoid", "step")
UTILITY_VALUES: tuple[str, ...] = ("gpu-hours", "priority")
PRIORITY_RANGE = (1.0, 10.0)
UTILITY_HORIZON = 2.0
"""Sigmoid midpoint and step deadline, in recorded durations after submission."""


class WorkloadError(ValueError):
    """An option value the workload filler does not understand."""


@dataclass(frozen=True)
class WorkloadOptions:
    model_mix: str = "all"
    elastic_fraction: float = 0.0
    ps_fraction: float = 0.0
    estimate_error: float = 0.0
    utility: Literal["none", "sigmoid", "step"] = "none"
    utility_value: Literal["gpu-hours", "priority"] = "gpu-hours"

    def families(self) -> tuple[str, ...]:
        if self.model_mix in MODEL_MIXES:
            return MODEL_MIXES[self.model_mix]
        names = tuple(n.strip() for n in self.model_mix.split(",") if n.strip())
        known = set(FAMILY_SOURCES) | {GENERIC}
        unknown = [n for n in names if n not in known]
        if not names or unknown:
            raise WorkloadError(
                f"model mix {self.model_mix!r}: use one of {', '.join(MODEL_MIXES)} "
                f"or families from {', '.join(sorted(known))}"
            )
        return names

    def check(self) -> None:
        self.families()
        for name in ("elastic_fraction", "ps_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise WorkloadError(f"{name} must be within [0, 1], not {value}")
        if not 0.0 <= self.estimate_error < math.inf:  # NaN fails the comparison too
            raise WorkloadError(
                f"estimate_error must be a finite number >= 0, not {self.estimate_error}"
            )
        if self.utility not in UTILITY_FORMS:
            raise WorkloadError(
                f"utility must be one of {', '.join(UTILITY_FORMS)}, not {self.utility!r}"
            )
        if self.utility_value not in UTILITY_VALUES:
            raise WorkloadError(
                f"utility_value must be one of {', '.join(UTILITY_VALUES)}, "
                f"not {self.utility_value!r}"
            )


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A simulated job's fixed description: the trace row plus the filled-in fields."""

    index: int
    id: str
    tenant: str
    submit_time: float
    duration_s: float
    """Recorded run time at `workers` packed; also the job's total work."""
    gpus_per_worker: int
    workers: int
    min_workers: int
    max_workers: int
    scaling_rule: ScalingRule
    ps: int
    max_ps: int | None
    family: str
    estimate_s: float
    utility: Utility | None

    @classmethod
    def of_job(  # noqa: PLR0917 - where it starts and runs is the caller's reading
        cls, job: Job, index: int, submit_time: float, work_s: float, family: str, estimate_s: float
    ) -> JobSpec:
        """A snapshot's job as a simulated one: its shape (tenant, workers and their bounds,
        scaling rule, parameter servers, utility) as the snapshot says; when it arrives,
        how much work it has, its model family and the estimate schedulers see, as the
        caller reads them (a run from the cluster's state, a logged window replayed)."""
        return cls(
            index=index,
            id=job.id,
            tenant=job.tenant,
            submit_time=submit_time,
            duration_s=work_s,
            gpus_per_worker=job.gpus_per_worker,
            workers=job.workers,
            min_workers=job.lo,
            max_workers=job.hi,
            scaling_rule=job.scaling_rule,
            ps=job.ps,
            max_ps=job.max_ps,
            family=family,
            estimate_s=estimate_s,
            utility=job.utility,
        )


def _stream(seed: int, option: str, job_id: str) -> random.Random:
    # String seeds hash with SHA-512, so draws do not depend on PYTHONHASHSEED.
    return random.Random(f"{seed}/{option}/{job_id}")


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def make_jobs(
    trace: Sequence[TraceJob], options: WorkloadOptions | None = None, seed: int = 0
) -> list[JobSpec]:
    """Fill the missing fields of every trace job, deterministically for `seed`."""
    opts = options or WorkloadOptions()
    opts.check()
    families = opts.families()
    out: list[JobSpec] = []
    for index, row in enumerate(trace):
        family = (
            families[0]
            if len(families) == 1
            else _stream(seed, "model", row.job_id).choice(families)
        )
        workers = row.num_gpus
        lo = hi = workers
        rule = ScalingRule.LINEAR
        if opts.elastic_fraction > 0 and (
            _stream(seed, "elastic", row.job_id).random() < opts.elastic_fraction
        ):
            lo, hi = max(1, workers // 2), workers * 2
            if _is_power_of_two(workers):
                rule = ScalingRule.POWER_OF_TWO
        ps, max_ps = 0, None
        if opts.ps_fraction > 0 and _stream(seed, "ps", row.job_id).random() < opts.ps_fraction:
            ps, max_ps = workers, 2 * workers
        estimate = row.duration_s
        if opts.estimate_error > 0:
            noise = _stream(seed, "estimate", row.job_id).gauss(0.0, opts.estimate_error)
            estimate = row.duration_s * math.exp(noise)
        utility: Utility | None = None
        value = workers * row.duration_s / 3600.0
        if opts.utility != "none" and opts.utility_value == "priority":
            value = _stream(seed, "utility", row.job_id).uniform(*PRIORITY_RANGE)
        if opts.utility == "sigmoid":
            utility = SigmoidUtility(
                value=value, midpoint_s=UTILITY_HORIZON * row.duration_s, steepness=1.0
            )
        elif opts.utility == "step":
            utility = StepUtility(value=value, deadline_s=UTILITY_HORIZON * row.duration_s)
        out.append(
            JobSpec(
                index=index,
                id=row.job_id,
                tenant=row.tenant,
                submit_time=row.submit_time_s,
                duration_s=row.duration_s,
                gpus_per_worker=1,
                workers=workers,
                min_workers=lo,
                max_workers=hi,
                scaling_rule=rule,
                ps=ps,
                max_ps=max_ps,
                family=family,
                estimate_s=estimate,
                utility=utility,
            )
        )
    return out
