"""Episodes from the decision log: the jobs a cluster actually saw, replayed in the simulator.

DESIGN §5 has retraining run RL "in the simulator seeded from the logged jobs".
Every logged decision keeps the snapshot it was made on, and across a window of
the log those snapshots name each job the cluster saw, with what it asked for,
and the nodes it had. :func:`logged_episodes` turns them into
:class:`~training.dl2.episodes.EpisodeSpec` episodes:

* **Jobs**: one per distinct job id of a cluster. The first snapshot that shows
  the job gives its submit time, tenant, requested workers and bounds, scaling
  rule, GPUs per worker, parameter servers and their cap, model and utility.
  Its work is a run time in seconds at the requested workers, from the first
  snapshot that logs one: its `estimated_duration_s`, else its `total_work`
  read as seconds (the unit the simulator logs; a client may use another,
  which is why the estimate, seconds by contract, comes first). A job that
  never logs either is skipped and counted. Logged durations are the clients'
  estimates, not measured run times.
* **Model**: the job's `model` if the simulator's performance model knows it
  (by family or by the source's model name, case and punctuation aside), else
  the generic family (linear speed-up, no locality or GPU-type effect).
* **Cluster**: the training nodes with GPUs of the cluster's most recent
  snapshot that lists nodes, grouped into node groups of identical nodes
  (rack size: the most nodes of a group on one logged rack). The most recent
  snapshot, not the union over the window, because it is the cluster the
  candidate will serve, and a union counts replaced or renamed nodes twice.
  Inference servers are left out: the episode simulates no inference load.
* **Windows**: each cluster's jobs in submission order, cut into consecutive
  windows of `jobs_per_episode` jobs, each re-based so that its first job
  arrives at time 0. A last window with fewer jobs is left unused: episodes of
  one size keep their scores comparable.

What a snapshot says and a simulated job cannot hold is dropped: `worker_step`
(the simulator grows jobs one worker at a time), per-worker CPUs and memory,
parameter servers' CPUs and memory, speed-up hints (the simulator derives its own
from the family), priority and preemptibility. A window starts on an empty
cluster, so jobs that were already running when its first job arrived do not
contend with it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from policies.model import Job, Node, Pool, Snapshot, convert
from simulator.cluster import ClusterSpec, NodeGroup
from simulator.perf import FAMILY_SOURCES, GENERIC
from simulator.workload import JobSpec
from training.dl2.episodes import EpisodeSpec

LoggedRecord = tuple[Snapshot | Mapping[str, object], object]
"""A decision record (snapshot, decision); only the snapshot is read here."""


@dataclass(frozen=True)
class LoggedEpisodes:
    """The episodes cut from the log, and how many logged jobs went where."""

    episodes: tuple[EpisodeSpec, ...]
    jobs: int
    """Distinct logged jobs that could be simulated (with work, on a cluster with GPUs)."""
    skipped: int
    """Distinct logged jobs left out: no work logged, or no GPU node in their cluster."""
    left_over: int
    """Jobs after each cluster's last full window."""
    clusters: tuple[str, ...]
    """Clusters (snapshot `cluster_id`) that gave at least one episode."""


@dataclass
class _Seen:
    """What one cluster's snapshots told, in log order."""

    jobs: dict[str, Job] = field(default_factory=dict)
    work_s: dict[str, float] = field(default_factory=dict)
    nodes: Sequence[Node | Mapping[str, object]] = ()


def logged_episodes(
    records: Iterable[LoggedRecord],
    jobs_per_episode: int,
    *,
    seed: int = 0,
    max_duration_s: float | None = 7200.0,
) -> LoggedEpisodes:
    """Episodes of `jobs_per_episode` logged jobs each, oldest first (see the module docstring).

    `records` are in log order (oldest first), snapshots as models or as their
    JSON. Episode `k` gets seed `seed + k`; durations are capped at
    `max_duration_s` as in trace windows. The same records give the same episodes.
    """
    if jobs_per_episode < 1:
        raise ValueError("jobs_per_episode must be at least 1")
    seen: dict[str, _Seen] = {}
    for snapshot, _decision in records:
        _read(snapshot, seen)
    episodes: list[EpisodeSpec] = []
    usable = skipped = left_over = 0
    clusters: list[str] = []
    for cluster_id, found in seen.items():
        with_work = [job for job in found.jobs.values() if job.id in found.work_s]
        skipped += len(found.jobs) - len(with_work)
        cluster = _cluster(cluster_id, found.nodes)
        if cluster is None:
            skipped += len(with_work)
            continue
        usable += len(with_work)
        # A stable sort: jobs submitted at one instant keep the order they were first seen in.
        ordered = sorted(with_work, key=lambda job: job.submit_time)
        full = len(ordered) // jobs_per_episode * jobs_per_episode
        left_over += len(ordered) - full
        for first in range(0, full, jobs_per_episode):
            window = ordered[first : first + jobs_per_episode]
            episodes.append(
                EpisodeSpec.from_jobs(
                    _job_specs(window, found.work_s),
                    cluster,
                    label=f"log:{cluster_id}",
                    start=first,
                    max_duration_s=max_duration_s,
                    seed=seed + len(episodes),
                )
            )
        if full:
            clusters.append(cluster_id)
    return LoggedEpisodes(
        episodes=tuple(episodes),
        jobs=usable,
        skipped=skipped,
        left_over=left_over,
        clusters=tuple(clusters),
    )


def _read(snapshot: Snapshot | Mapping[str, object], seen: dict[str, _Seen]) -> None:
    # Stored snapshots are JSON; each job is validated once, on its first sighting (and
    # again only while it still lacks work), rather than every snapshot in full: a long
    # window shows the same jobs in thousands of snapshots.
    jobs: Sequence[Job | Mapping[str, object]]
    nodes: Sequence[Node | Mapping[str, object]]
    if isinstance(snapshot, Snapshot):
        cluster_id, jobs, nodes = snapshot.cluster_id, snapshot.jobs, snapshot.nodes
    else:
        cluster_id = str(snapshot.get("cluster_id", "default"))
        jobs = _sequence(snapshot.get("jobs"))
        nodes = _sequence(snapshot.get("nodes"))
    found = seen.setdefault(cluster_id, _Seen())
    if nodes:
        found.nodes = nodes
    for raw in jobs:
        job_id = raw.id if isinstance(raw, Job) else str(raw.get("id"))
        if job_id in found.work_s:
            continue
        # Fields come from the first sighting; the work from the first sighting that logs one.
        first_sighting = job_id not in found.jobs
        if not first_sighting and not isinstance(raw, Job) and _lacks_work(raw):
            continue
        job = raw if isinstance(raw, Job) else convert(raw, Job)
        if first_sighting:
            found.jobs[job_id] = job
        work = job.estimated_duration_s or job.total_work
        if work is not None:
            found.work_s[job_id] = work


def _lacks_work(raw: Mapping[str, object]) -> bool:
    return raw.get("estimated_duration_s") is None and raw.get("total_work") is None


def _sequence(value: object) -> Sequence[Mapping[str, object]]:
    if not isinstance(value, list | tuple):
        return ()
    return [item for item in value if isinstance(item, Mapping)]


def _job_specs(window: Sequence[Job], work_s: Mapping[str, float]) -> list[JobSpec]:
    origin = window[0].submit_time
    specs: list[JobSpec] = []
    for index, job in enumerate(window):
        work = work_s[job.id]
        specs.append(
            JobSpec.of_job(
                job,
                index,
                job.submit_time - origin,
                work,
                simulated_family(job.model),
                job.estimated_duration_s or work,
            )
        )
    return specs


def _plain(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@cache
def _families() -> dict[str, str]:
    names = {_plain(source_name): family for family, (_, source_name) in FAMILY_SOURCES.items()}
    names.update({_plain(family): family for family in FAMILY_SOURCES})
    return names


def simulated_family(model: str) -> str:
    """The performance model's family for a logged `model` name; generic when unknown."""
    return _families().get(_plain(model), GENERIC)


def _cluster(
    cluster_id: str, raw_nodes: Sequence[Node | Mapping[str, object]]
) -> ClusterSpec | None:
    nodes = [n if isinstance(n, Node) else convert(n, Node) for n in raw_nodes]
    groups: dict[tuple[str, int, float, int, float, float], list[Node]] = {}
    for node in nodes:
        if node.pool is Pool.TRAINING and node.gpus > 0:
            key = (
                node.gpu_type,
                node.gpus,
                node.gpu_memory_gb,
                node.cpus,
                node.memory_gb,
                node.price_per_gpu_hour,
            )
            groups.setdefault(key, []).append(node)
    if not groups:
        return None
    node_groups = []
    for (gpu_type, gpus, gpu_memory_gb, cpus, memory_gb, price), members in groups.items():
        per_rack: dict[str, int] = {}
        for node in members:
            per_rack[node.topology.rack] = per_rack.get(node.topology.rack, 0) + 1
        node_groups.append(
            NodeGroup(
                count=len(members),
                gpus=gpus,
                gpu_type=gpu_type,
                gpu_memory_gb=gpu_memory_gb,
                cpus=cpus,
                memory_gb=memory_gb,
                rack_size=max(per_rack.values()),
                price_per_gpu_hour=price,
            )
        )
    return ClusterSpec(
        name=cluster_id,
        description="the training nodes of the cluster's most recent logged snapshot",
        node_groups=tuple(node_groups),
    )
