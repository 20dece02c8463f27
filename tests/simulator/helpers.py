"""Builders shared by the simulator tests: tiny clusters, hand-made traces, runs."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

from policies.decision import Decision
from policies.model import Snapshot
from policies.profiles import PolicyChoice, Profile
from simulator.cluster import ClusterSpec, NodeGroup
from simulator.core import SimOptions, Simulation
from simulator.deciders import EngineDecider
from simulator.metrics import SimulationResult
from simulator.perf import PerfOptions
from simulator.traces import TraceJob
from simulator.workload import WorkloadOptions, make_jobs


def group(count: int, gpus: int, gpu_type: str = "V100", **extra: object) -> NodeGroup:
    fields: dict[str, object] = {
        "count": count,
        "gpus": gpus,
        "gpu_type": gpu_type,
        "gpu_memory_gb": 32,
        "cpus": 64,
        "memory_gb": 512,
        "pool": "training",
        "rack_size": 16,
        "price_per_gpu_hour": 3.6,
    }
    fields.update(extra)
    return NodeGroup.model_validate(fields)


def cluster(*groups: NodeGroup, name: str = "tiny") -> ClusterSpec:
    return ClusterSpec(name=name, node_groups=tuple(groups))


def trace(*rows: tuple[str, float, int, float]) -> list[TraceJob]:
    """Rows of (job id, submit time, GPUs, duration)."""
    return [
        TraceJob(job_id=job_id, submit_time_s=submit, num_gpus=gpus, duration_s=duration)
        for job_id, submit, gpus, duration in rows
    ]


def profile(ordering: str = "fifo", placement: str = "consolidated", **params: object) -> Profile:
    return Profile(
        name=f"test-{ordering}-{placement}",
        ordering=PolicyChoice(name=ordering, params=dict(params)),
        placement=PolicyChoice(name=placement),
    )


def run(
    rows: Sequence[TraceJob],
    spec: ClusterSpec,
    decider: EngineDecider | Callable[[Snapshot, int, str], Decision],
    *,
    perf: PerfOptions | None = None,
    options: SimOptions | None = None,
    model_mix: str = "generic",
    seed: int = 0,
) -> SimulationResult:
    jobs = make_jobs(rows, WorkloadOptions(model_mix=model_mix), seed=seed)
    sim = Simulation(
        jobs,
        spec,
        perf=perf or PerfOptions.for_mode("ideal"),
        options=options or SimOptions(check_snapshots=True),
        seed=seed,
    )
    return sim.run(decider)


def finish_times(result: SimulationResult) -> dict[str, float | None]:
    return {r.job_id: r.finish_s for r in result.jobs}


def write_series(path: Path, busy_gpus: Sequence[float], step_s: float = 300.0) -> Path:
    """An inference load series in the columns of `shared/perf/inference_sd_lora_5min.csv`."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["time_s", "mean_busy_gpus"])
        for k, busy in enumerate(busy_gpus):
            writer.writerow([k * step_s, busy])
    return path
