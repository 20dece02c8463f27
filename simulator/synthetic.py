"""Synthetic traces: Poisson arrivals with a configurable job mix, for tests and stress runs.

Inter-arrival times are exponential (a Poisson process, as in Gavel's and
Tiresias' synthetic workloads); GPU counts are drawn from `gpu_mix` and run
times from a log-normal with the given median and sigma. The result is a list
of trace rows in the common schema, so it goes through exactly the same path
as a real trace (and :func:`simulator.traces.write_trace` saves it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from simulator.traces import TraceJob


def _default_mix() -> dict[int, float]:
    # Roughly the GPU-count mix of the Philly window (shared/traces/README.md):
    # mostly single-GPU jobs, a tail of 2-8 and a few larger ones.
    return {1: 0.70, 2: 0.10, 4: 0.10, 8: 0.08, 16: 0.02}


@dataclass(frozen=True)
class SyntheticSpec:
    jobs: int = 1000
    arrivals_per_hour: float = 30.0
    gpu_mix: Mapping[int, float] = field(default_factory=_default_mix)
    median_duration_s: float = 1800.0
    duration_sigma: float = 1.5
    min_duration_s: float = 10.0
    tenants: int = 8

    def check(self) -> None:
        if self.jobs < 0 or self.arrivals_per_hour <= 0 or self.median_duration_s <= 0:
            raise ValueError("jobs >= 0, arrivals_per_hour > 0 and median_duration_s > 0")
        if not self.gpu_mix or any(g < 1 or w < 0 for g, w in self.gpu_mix.items()):
            raise ValueError("gpu_mix maps GPU counts >= 1 to non-negative weights")
        if sum(self.gpu_mix.values()) <= 0:
            raise ValueError("gpu_mix weights must not all be zero")


def generate(spec: SyntheticSpec | None = None, seed: int = 0) -> list[TraceJob]:
    """A synthetic trace, the same for the same spec and seed."""
    cfg = spec or SyntheticSpec()
    cfg.check()
    rng = np.random.default_rng([seed, 0x7ACE])
    gaps = rng.exponential(3600.0 / cfg.arrivals_per_hour, size=cfg.jobs)
    counts = sorted(cfg.gpu_mix)
    weights = np.array([cfg.gpu_mix[c] for c in counts], dtype=np.float64)
    gpus = rng.choice(counts, size=cfg.jobs, p=weights / weights.sum())
    durations = rng.lognormal(math.log(cfg.median_duration_s), cfg.duration_sigma, cfg.jobs)
    tenants = rng.integers(0, max(1, cfg.tenants), size=cfg.jobs)
    jobs: list[TraceJob] = []
    t = 0.0
    for i in range(cfg.jobs):
        t += float(gaps[i])
        jobs.append(
            TraceJob(
                job_id=f"syn-{i:06d}",
                # Whole seconds, like the real traces, so same-second ties occur as there.
                submit_time_s=float(math.floor(t)),
                num_gpus=int(gpus[i]),
                duration_s=float(max(cfg.min_duration_s, round(float(durations[i])))),
                user=f"t{int(tenants[i]):02d}",
                status="completed",
                line=i + 2,
            )
        )
    return jobs
