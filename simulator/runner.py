"""Run a trace on a cluster under one or more profiles: what the CLI and scripts call."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from policies.model import Assignment
from simulator.cluster import ClusterSpec, load_cluster
from simulator.core import SimOptions, Simulation
from simulator.deciders import Decider, EngineDecider
from simulator.inference import InferenceOptions
from simulator.metrics import SimulationResult
from simulator.perf import PerfMode, PerfOptions
from simulator.traces import TraceJob, read_trace
from simulator.workload import JobSpec, WorkloadOptions, make_jobs


@dataclass(frozen=True)
class RunConfig:
    """Everything that fixes a run besides the profile (same config, same seed: same metrics)."""

    seed: int = 0
    perf_mode: PerfMode = "measured"
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    sim: SimOptions = field(default_factory=SimOptions)
    inference: InferenceOptions = field(default_factory=InferenceOptions)


@dataclass(frozen=True)
class ProfileRun:
    profile: str
    result: SimulationResult
    cluster_id: str
    """The cluster id the run's snapshots carried (where a service kept its state)."""


def build_simulation(
    jobs: Sequence[JobSpec],
    cluster: ClusterSpec,
    config: RunConfig,
    initial_placements: Mapping[str, tuple[Assignment, ...]] | None = None,
    perf: PerfOptions | None = None,
    *,
    cluster_id: str | None = None,
) -> Simulation:
    """A simulation of already filled-in jobs (see :func:`simulator.workload.make_jobs`);
    `initial_placements` names the jobs already running when it begins, and their GPUs.
    `perf` replaces the effects `config.perf_mode` turns on (an experiment that turns one
    off). `cluster_id` is the id its snapshots carry (default: the spec's name); it changes
    no metric, only where a service answering them keeps the run's policy state."""
    return Simulation(
        jobs,
        cluster,
        perf=perf or PerfOptions.for_mode(config.perf_mode),
        options=config.sim,
        inference=config.inference,
        seed=config.seed,
        cluster_id=cluster_id,
        initial_placements=initial_placements,
    )


def simulate(
    trace: Sequence[TraceJob],
    cluster: ClusterSpec,
    profiles: Sequence[str],
    config: RunConfig | None = None,
    *,
    decider_for: Callable[[str], Decider] | None = None,
    on_progress: Callable[[str], Callable[[int], None] | None] | None = None,
    cluster_ids: Sequence[str] | None = None,
) -> list[ProfileRun]:
    """One run per profile, on the same jobs and seed; in process unless `decider_for` says.

    `cluster_ids` gives each run's snapshots their cluster id, one per profile in order
    (default: the spec's name for all; see :func:`simulator.cluster_ids.run_cluster_ids`
    for runs through a service)."""
    cfg = config or RunConfig()
    jobs = make_jobs(trace, cfg.workload, seed=cfg.seed)
    return simulate_jobs(
        jobs,
        cluster,
        profiles,
        cfg,
        decider_for=decider_for,
        on_progress=on_progress,
        cluster_ids=cluster_ids,
    )


def simulate_jobs(
    jobs: Sequence[JobSpec],
    cluster: ClusterSpec,
    profiles: Sequence[str],
    config: RunConfig,
    *,
    initial_placements: Mapping[str, tuple[Assignment, ...]] | None = None,
    decider_for: Callable[[str], Decider] | None = None,
    on_progress: Callable[[str], Callable[[int], None] | None] | None = None,
    cluster_ids: Sequence[str] | None = None,
) -> list[ProfileRun]:
    """:func:`simulate` of already filled-in jobs, some of them perhaps already running."""
    if cluster_ids is not None and len(cluster_ids) != len(profiles):
        raise ValueError(f"{len(cluster_ids)} cluster ids for {len(profiles)} profiles")
    make_decider = decider_for or EngineDecider.named
    runs: list[ProfileRun] = []
    for index, name in enumerate(profiles):
        decider = make_decider(name)
        sim = build_simulation(
            jobs,
            cluster,
            config,
            initial_placements,
            cluster_id=cluster_ids[index] if cluster_ids is not None else None,
        )
        progress = on_progress(name) if on_progress is not None else None
        result = sim.run(decider, progress)
        runs.append(ProfileRun(profile=name, result=result, cluster_id=sim.cluster_id))
    return runs


def simulate_files(
    trace_path: str | Path,
    cluster_path: str | Path,
    profiles: Sequence[str],
    config: RunConfig | None = None,
    *,
    max_jobs: int | None = None,
    decider_for: Callable[[str], Decider] | None = None,
    on_progress: Callable[[str], Callable[[int], None] | None] | None = None,
    cluster_ids: Sequence[str] | None = None,
) -> list[ProfileRun]:
    return simulate(
        read_trace(trace_path, max_jobs),
        load_cluster(cluster_path),
        profiles,
        config,
        decider_for=decider_for,
        on_progress=on_progress,
        cluster_ids=cluster_ids,
    )
