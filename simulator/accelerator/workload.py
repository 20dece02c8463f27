"""Request arrivals by tenant and model, and the scenarios they make.

Arrival process (docs/relmas.md, "Workload"): a non-homogeneous Poisson process whose
rate follows the intra-day shape of `shared/perf/inference_genai_qps_5min.csv`
(generative + API QPS of a production GenAI gateway, 5-minute bins). Each episode
takes a window of consecutive bins chosen by the seed, normalises it to mean 1, and
plays each bin in `bin_s` simulated seconds (the shape is kept, the clock compressed:
an accelerator system serves requests in milliseconds, the trace counts in minutes).
The mean rate is set by the scenario's offered load ρ: ρ = λ × E[isolated time], the
isolated time being a model's time alone with each layer on its fastest style, so
ρ = 1 keeps one sub-accelerator running alone busy all the time.

Each arrival picks a tenant by its share and a model uniformly among the tenant's
models; its deadline is arrival + the tenant's `deadline_factor` × that isolated time
(the per-tenant SLA, as the issue asks). Deterministic for a seed.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from simulator.accelerator.costs import LARGE_MODELS, MODELS, SMALL_MODELS, CostTable
from simulator.paths import perf_dir


@dataclass(frozen=True)
class TenantSpec:
    id: str
    share: float
    """Fraction of the arrivals."""
    deadline_factor: float
    """Deadline = arrival + this × the model's isolated best time."""
    priority: float = 1.0
    models: tuple[str, ...] = MODELS


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    load: float
    """Offered load ρ (see the module docstring)."""
    tenants: tuple[TenantSpec, ...]
    accelerators: tuple[str, ...] = ("ws", "ws", "os", "rs")
    """Style of each sub-accelerator."""
    dram_gbps: float = 256.0
    """One HBM2 stack: 1,024 bits at 2 Gb/s per pin = 256 GB/s."""
    requests: int = 120
    """Mean arrivals per episode (the horizon is set from it and the rate)."""
    bins: int = 24
    """5-minute bins of the QPS series the episode plays."""


@dataclass(frozen=True)
class Arrival:
    id: str
    tenant: str
    model: str
    arrival: float
    deadline: float


def _tenants(models: tuple[str, ...]) -> tuple[TenantSpec, ...]:
    # Three SLA classes (ours): interactive (tight, weighted 2 by PREMA), standard, batch.
    return (
        TenantSpec("interactive", 0.3, 4.0, 2.0, models),
        TenantSpec("standard", 0.4, 8.0, 1.0, models),
        TenantSpec("batch", 0.3, 16.0, 1.0, models),
    )


def scenarios() -> dict[str, Scenario]:
    """The named scenarios, light to heavy load, homogeneous (small models) to mixed."""
    out = []
    for load_name, load in (("light", 0.6), ("medium", 1.2), ("heavy", 2.0)):
        out.append(
            Scenario(
                name=f"{load_name}-homogeneous",
                description=f"offered load {load}, small models only ({', '.join(SMALL_MODELS)})",
                load=load,
                tenants=_tenants(SMALL_MODELS),
            )
        )
        out.append(
            Scenario(
                name=f"{load_name}-mixed",
                description=(
                    f"offered load {load}, small and large models "
                    f"({', '.join(SMALL_MODELS + LARGE_MODELS)})"
                ),
                load=load,
                tenants=_tenants(MODELS),
            )
        )
    return {s.name: s for s in out}


@cache
def qps_shape(path: Path | None = None) -> tuple[float, ...]:
    """The gateway's QPS per 5-minute bin (generative + API)."""
    source = path or perf_dir() / "inference_genai_qps_5min.csv"
    with source.open(newline="") as handle:
        return tuple(
            float(row["generative_qps_anon"] or 0.0) + float(row["api_qps_anon"] or 0.0)
            for row in csv.DictReader(handle)
        )


def mean_isolated_s(scenario: Scenario, costs: CostTable) -> float:
    styles = frozenset(scenario.accelerators)
    total = 0.0
    for tenant in scenario.tenants:
        each = [costs.isolated_best_s(m, styles) for m in tenant.models]
        total += tenant.share * sum(each) / len(each)
    return total / sum(t.share for t in scenario.tenants)


def arrivals(scenario: Scenario, costs: CostTable, seed: int) -> list[Arrival]:
    """One episode's arrivals, in time order; the same seed gives the same list."""
    rng = np.random.default_rng(seed)
    styles = frozenset(scenario.accelerators)
    series = np.asarray(qps_shape(), dtype=float)
    start = int(rng.integers(0, len(series) - scenario.bins))
    shape = series[start : start + scenario.bins]
    # A window of the night's idle bins would make an empty episode: keep a floor.
    shape = np.maximum(shape, 0.05 * max(float(series.mean()), 1e-9))
    shape = shape / shape.mean()
    rate = scenario.load / mean_isolated_s(scenario, costs)
    horizon = scenario.requests / rate
    bin_s = horizon / scenario.bins
    peak = rate * float(shape.max())
    shares = np.asarray([t.share for t in scenario.tenants])
    shares = shares / shares.sum()
    out: list[Arrival] = []
    now = 0.0
    while True:
        now += float(rng.exponential(1.0 / peak))
        if now >= horizon:
            break
        # Thinning (Lewis and Shedler, 1979): keep with probability rate(t) / peak.
        if rng.random() * peak > rate * shape[min(int(now / bin_s), scenario.bins - 1)]:
            continue
        tenant = scenario.tenants[int(rng.choice(len(shares), p=shares))]
        model = tenant.models[int(rng.integers(len(tenant.models)))]
        isolated = costs.isolated_best_s(model, styles)
        out.append(
            Arrival(
                id=f"r{len(out)}",
                tenant=tenant.id,
                model=model,
                arrival=now,
                deadline=now + tenant.deadline_factor * isolated,
            )
        )
    return out
