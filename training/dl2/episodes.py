"""Training episodes: windows of the shared traces, on a scaled copy of their paired cluster.

DL2 trains on traces cut into episodes of a few dozen jobs (Peng et al., 2019,
§5.1). Here an episode is a window of consecutive jobs of a shared trace
(`../shared/traces`), run on the cluster the traces README pairs it with, scaled
down so that the window's load contends for GPUs as the full trace does for the
full cluster: with no contention the best scaling is "everything to its maximum",
and there is nothing to learn. The trace lacks elasticity and parameter servers,
which is what DL2 decides, so the episode fills them with
:class:`simulator.workload.WorkloadOptions` (`elastic_fraction`, `ps_fraction`).
Long jobs can be capped (`max_duration_s`) so an episode takes seconds, not a
simulated week.

An episode can also be given its jobs and cluster outright
(:meth:`EpisodeSpec.from_jobs`): that is how jobs read back from the decision
log are replayed (:mod:`training.dl2.logged`).

Every field fixes the episode: the same spec gives the same jobs and the same
simulation for a seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from policies.common.pool import FloorParams
from policies.decision import Stage
from policies.profiles import PolicyChoice, Profile, load_profiles
from policies.registry import Registry, build_registry
from policies.scaling.dl2 import Dl2Scaling
from simulator.cluster import ClusterSpec, load_cluster
from simulator.core import SimOptions, Simulation
from simulator.paths import clusters_dir, traces_dir
from simulator.perf import PerfOptions
from simulator.traces import TraceJob, read_trace
from simulator.workload import JobSpec, WorkloadOptions, make_jobs


@dataclass(frozen=True)
class EpisodeSpec:
    """One simulated episode: which jobs, on which cluster, with what filled in."""

    trace: str
    """A file of the shared traces folder, or a path."""
    cluster: str
    """A file of the shared clusters folder, or a path."""
    start: int = 0
    """Index of the window's first job in the trace."""
    jobs: int = 80
    cluster_fraction: float = 1.0
    """Each node group keeps round(count × fraction) nodes, at least one."""
    max_duration_s: float | None = 7200.0
    """Recorded durations are capped here (None: as recorded)."""
    elastic_fraction: float = 0.6
    ps_fraction: float = 0.3
    model_mix: str = "all"
    """Model families drawn for the jobs (:class:`simulator.workload.WorkloadOptions`)."""
    estimate_error: float = 0.0
    """Sigma of the log-normal error on the jobs' duration estimates
    (:class:`simulator.workload.WorkloadOptions`); 0: the recorded durations, exactly."""
    seed: int = 0
    """Fills the workload options and draws the machines' speed variation."""
    restarts: bool = True
    """Whether a restarted job (preempted or resized) loses its model's restart time
    (:class:`simulator.perf.PerfOptions`); False: re-allocation costs nothing, as DL2's
    paper has it (its MXNet mechanism adds and removes workers and servers in place)."""
    given_jobs: tuple[JobSpec, ...] | None = None
    """Jobs given outright (:meth:`from_jobs`); then `trace` is only a label, and the
    workload options and `start` do not apply."""
    given_cluster: ClusterSpec | None = None
    """A cluster given outright (:meth:`from_jobs`); then `cluster` is only a label."""
    ordering: PolicyChoice | None = dataclasses.field(default=None, hash=False)
    """The ordering DL2's pipeline plays the episode behind, in rollouts and in a model's
    scores (None: the `dl2` profile's); a profile scored on it keeps its own (an
    experiment's setting, `make results-dl2-order`). Left out of the hash: a choice's
    params are a dict."""

    @classmethod
    def from_jobs(
        cls,
        jobs: Sequence[JobSpec],
        cluster: ClusterSpec,
        *,
        label: str,
        start: int = 0,
        max_duration_s: float | None = 7200.0,
        seed: int = 0,
    ) -> EpisodeSpec:
        """An episode of these jobs (in submission order) on this cluster.

        `label` and `start` name the episode in scores (`label@start+jobs`);
        durations are capped at `max_duration_s` as for trace windows.
        """
        return cls(
            trace=label,
            cluster=cluster.name,
            start=start,
            jobs=len(jobs),
            max_duration_s=max_duration_s,
            seed=seed,
            given_jobs=tuple(jobs),
            given_cluster=cluster,
        )

    def job_specs(self) -> list[JobSpec]:
        if self.given_jobs is not None:
            return [_capped(job, self.max_duration_s) for job in self.given_jobs]
        rows = _trace_rows(_resolve(self.trace, traces_dir()), self.start + self.jobs)
        window = list(rows[self.start : self.start + self.jobs])
        if self.max_duration_s is not None:
            cap = self.max_duration_s
            window = [dataclasses.replace(r, duration_s=min(r.duration_s, cap)) for r in window]
        options = WorkloadOptions(
            elastic_fraction=self.elastic_fraction,
            ps_fraction=self.ps_fraction,
            model_mix=self.model_mix,
            estimate_error=self.estimate_error,
        )
        return make_jobs(window, options, seed=self.seed)

    def cluster_spec(self) -> ClusterSpec:
        spec = self.given_cluster or load_cluster(_resolve(self.cluster, clusters_dir()))
        if self.cluster_fraction == 1.0:
            return spec
        groups = tuple(
            g.model_copy(update={"count": max(1, round(g.count * self.cluster_fraction))})
            for g in spec.node_groups
        )
        return spec.model_copy(
            update={"node_groups": groups, "name": f"{spec.name}x{self.cluster_fraction:g}"}
        )

    def simulation(self) -> Simulation:
        """A fresh simulation of the episode (call `reset()` to start it)."""
        return Simulation(
            self.job_specs(),
            self.cluster_spec(),
            perf=PerfOptions(restarts=self.restarts),
            options=SimOptions(record_timeseries=False),
            seed=self.seed,
        )


def _capped(job: JobSpec, cap: float | None) -> JobSpec:
    # The estimate shrinks with the work, as a trace window's estimate is its capped duration.
    if cap is None or job.duration_s <= cap:
        return job
    return dataclasses.replace(job, duration_s=cap, estimate_s=min(job.estimate_s, cap))


def dl2_profile(registry: Registry, ordering: PolicyChoice | None = None) -> Profile:
    """The `dl2` profile, behind `ordering` when given (:attr:`EpisodeSpec.ordering`)."""
    profile = load_profiles(registry)["dl2"]
    return profile if ordering is None else profile.model_copy(update={"ordering": ordering})


@dataclass(frozen=True)
class ServedSetting:
    """What a served DL2 profile fixes for the model it serves: the ordering the model
    plays behind, its floor, and the heuristic its warm-up imitates (the profile's
    scaling fallback, which answers whenever the model cannot). A model is trained,
    validated and judged in its profile's setting, so that it learns what it is served
    in (docs/dl2.md)."""

    profile: str
    ordering: PolicyChoice
    floor: FloorParams
    teacher: str
    model_key: str
    """The key the profile's model versions are stored under (its trainer's name)."""
    shipped_file: str
    """The model the profile serves while no version is active."""

    @classmethod
    def of(cls, profile: str, registry: Registry | None = None) -> ServedSetting:
        """The setting of the built-in profile `profile` (`dl2` or `dl2-srtf`); KeyError
        when there is no such profile, ValueError when it serves no DL2 model."""
        reg = registry or build_registry()
        found = load_profiles(reg)[profile]
        policy = reg.spec(Stage.SCALING, found.scaling.name).cls
        fallback = found.fallback.get(Stage.SCALING)
        if not issubclass(policy, Dl2Scaling) or fallback is None:
            raise ValueError(f"profile {profile!r} serves no DL2 model with a scaling fallback")
        fields = FloorParams.model_fields
        floor = FloorParams.model_validate(
            {k: v for k, v in found.scaling.params.items() if k in fields}
        )
        return cls(
            profile, found.ordering, floor, fallback.name, policy.model_key, policy.shipped_file
        )

    def applied(self, episodes: Sequence[EpisodeSpec]) -> list[EpisodeSpec]:
        """`episodes` played behind this setting's ordering."""
        return [dataclasses.replace(e, ordering=self.ordering) for e in episodes]


def _resolve(name: str, folder: Path) -> Path:
    path = Path(name)
    return path if path.is_absolute() or path.exists() else folder / name


@cache
def _trace_rows(path: Path, count: int) -> tuple[TraceJob, ...]:
    return tuple(read_trace(path, count))


def windows(
    trace: str,
    cluster: str,
    starts: Sequence[int],
    *,
    jobs: int = 80,
    cluster_fraction: float = 0.06,
    seed: int = 0,
) -> list[EpisodeSpec]:
    """Episodes of `jobs` jobs starting at each of `starts`, with seeds `seed`, `seed + 1`, …"""
    return [
        EpisodeSpec(
            trace=trace,
            cluster=cluster,
            start=start,
            jobs=jobs,
            cluster_fraction=cluster_fraction,
            seed=seed + i,
        )
        for i, start in enumerate(starts)
    ]


def training_episodes(jobs: int = 80) -> list[EpisodeSpec]:
    """The default training set: Philly and Helios windows, ~40 GPUs each (docs/dl2.md)."""
    return windows(
        "philly.2w-2017-10-02.csv", "philly.json", [0, 3000, 6000, 9000, 12000], jobs=jobs
    ) + windows(
        "helios_venus.1w-2020-06-01.csv",
        "helios_venus.json",
        [0, 1000, 2000, 3000],
        jobs=jobs,
        cluster_fraction=0.05,
        seed=100,
    )


def validation_episodes(jobs: int = 80) -> list[EpisodeSpec]:
    """Windows for picking among checkpoints (disjoint from training and held-out ones)."""
    return windows(
        "philly.2w-2017-10-02.csv", "philly.json", [4500, 10500], jobs=jobs, seed=400
    ) + windows(
        "helios_venus.1w-2020-06-01.csv",
        "helios_venus.json",
        [1500, 3500],
        jobs=jobs,
        cluster_fraction=0.05,
        seed=500,
    )


def held_out_episodes(jobs: int = 80) -> list[EpisodeSpec]:
    """Held-out windows of the same traces, for the final verdict (disjoint from the rest)."""
    return windows(
        "philly.2w-2017-10-02.csv", "philly.json", [1500, 7500, 15000], jobs=jobs, seed=200
    ) + windows(
        "helios_venus.1w-2020-06-01.csv",
        "helios_venus.json",
        [500, 2500],
        jobs=jobs,
        cluster_fraction=0.05,
        seed=300,
    )
