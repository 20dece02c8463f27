"""Episodes from the decision log: the jobs a cluster actually saw, replayed in the simulator.

DESIGN §5 has retraining run RL "in the simulator seeded from the logged jobs".
Every logged decision keeps the snapshot it was made on, and across a window of
the log those snapshots name each job the cluster saw, with what it asked for,
and the nodes it had. :func:`logged_episodes` turns them into
:class:`~training.dl2.episodes.EpisodeSpec` episodes:

* **Jobs**: one per distinct job id of a cluster. The first snapshot that shows
  the job gives its submit time, tenant, requested workers and bounds, scaling
  rule, GPUs per worker, parameter servers and their cap, model and utility.
  Its work is a run time in seconds at the requested workers: the **measured**
  one where the caller reported the job finished (below), else the first one a
  snapshot logs: its `estimated_duration_s`, else its `total_work` read as
  seconds (the unit the simulator logs; a client may use another, which is why
  the estimate, seconds by contract, comes first). A job with neither is
  skipped and counted. Either way the simulated job shows schedulers the
  client's estimate, as the live job did (its run time where it logged none:
  a simulated job always carries an estimate).
* **Measured run times**: a decision record may carry, under
  :data:`FINISHED`, the `job_finished` feedback of jobs its snapshot names
  (`DecisionRepository.snapshots_and_decisions(finishes=True)` joins each
  job's event to the first record that names it). An event with `started_at`
  before `finished_at` measures the job's run: `finished_at - started_at`,
  whatever its outcome (a failed or killed job held its GPUs that long too).
  It is used only for a job the log shows running as requested and without a
  break: a job some snapshot shows pending again after running (preempted), or
  running on other than its requested GPUs (resized), ran at more than one
  speed, and its span is no run time at the requested workers; such a job
  keeps its estimate and is counted in `interrupted`.
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

import math
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
"""A decision record (snapshot, decision): the snapshot, and the decision's
:data:`FINISHED` when it is a mapping that has them, are read here."""

FINISHED = "finished"
"""The key of a decision record's joined `job_finished` feedback: the event's payload
(`started_at`, `finished_at`, `outcome`, ...) by job id."""


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
    measured: int = 0
    """Of `jobs`, those whose work is their measured run time (`job_finished` feedback)."""
    interrupted: int = 0
    """Jobs with a measured run that keep their estimate: the log shows them preempted or
    resized, so the run's span is no run time at the requested workers."""

    def split_newest(self) -> tuple[tuple[EpisodeSpec, ...], tuple[EpisodeSpec, ...]]:
        """(the rest, the newest window of each cluster whose log fills two or more), in
        episode order: the newest windows judge a candidate on the cluster's own jobs,
        which its training then never played."""
        last: dict[str, int] = {}
        count: dict[str, int] = {}
        for index, episode in enumerate(self.episodes):
            last[episode.trace] = index
            count[episode.trace] = count.get(episode.trace, 0) + 1
        newest = {index for trace, index in last.items() if count[trace] >= 2}
        rest = tuple(e for i, e in enumerate(self.episodes) if i not in newest)
        return rest, tuple(e for i, e in enumerate(self.episodes) if i in newest)


@dataclass
class _Seen:
    """What one cluster's snapshots told, in log order."""

    jobs: dict[str, Job] = field(default_factory=dict)
    work_s: dict[str, float] = field(default_factory=dict)
    """The first run time a snapshot logs (estimate, else total work), by job."""
    measured_s: dict[str, float] = field(default_factory=dict)
    """Measured run times (`job_finished` spans), by job."""
    running: set[str] = field(default_factory=set)
    """Jobs some snapshot showed running as requested."""
    interrupted: set[str] = field(default_factory=set)
    """Jobs some snapshot showed pending after running, or running on other GPUs than asked."""
    nodes: Sequence[Node | Mapping[str, object]] = ()

    def ran_as_measured(self, job_id: str) -> bool:
        """Whether the job has a measured run and the log shows that run unbroken."""
        return job_id in self.measured_s and job_id not in self.interrupted

    def work(self, job_id: str) -> float | None:
        """The job's simulated run time: measured when its run was unbroken, else logged."""
        if self.ran_as_measured(job_id):
            return self.measured_s[job_id]
        return self.work_s.get(job_id)


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
    rows = records if isinstance(records, Sequence) else list(records)
    # The measured runs first: only their jobs need every sighting read (`_note_run`).
    seen: dict[str, _Seen] = {}
    for snapshot, decision in rows:
        if isinstance(decision, Mapping) and decision.get(FINISHED):
            found = seen.setdefault(_cluster_id(snapshot), _Seen())
            _read_finishes(decision[FINISHED], found)
    for snapshot, _decision in rows:
        _read(snapshot, seen)
    episodes: list[EpisodeSpec] = []
    usable = skipped = left_over = measured = interrupted = 0
    clusters: list[str] = []
    for cluster_id, found in seen.items():
        work = {job_id: w for job_id in found.jobs if (w := found.work(job_id)) is not None}
        with_work = [job for job in found.jobs.values() if job.id in work]
        skipped += len(found.jobs) - len(with_work)
        cluster = _cluster(cluster_id, found.nodes)
        if cluster is None:
            skipped += len(with_work)
            continue
        usable += len(with_work)
        measured += sum(1 for job in with_work if found.ran_as_measured(job.id))
        interrupted += len(found.interrupted & found.measured_s.keys())
        # A stable sort: jobs submitted at one instant keep the order they were first seen in.
        ordered = sorted(with_work, key=lambda job: job.submit_time)
        full = len(ordered) // jobs_per_episode * jobs_per_episode
        left_over += len(ordered) - full
        for first in range(0, full, jobs_per_episode):
            window = ordered[first : first + jobs_per_episode]
            episodes.append(
                EpisodeSpec.from_jobs(
                    _job_specs(window, work, found.work_s),
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
        measured=measured,
        interrupted=interrupted,
    )


def _read(snapshot: Snapshot | Mapping[str, object], seen: dict[str, _Seen]) -> None:
    # Stored snapshots are JSON; each job is validated once, on its first sighting (and
    # again only while it still lacks work), rather than every snapshot in full: a long
    # window shows the same jobs in thousands of snapshots. Later sightings of a job with
    # a measured run are read for whether it still runs as requested (`_note_run`).
    jobs: Sequence[Job | Mapping[str, object]]
    nodes: Sequence[Node | Mapping[str, object]]
    if isinstance(snapshot, Snapshot):
        jobs, nodes = snapshot.jobs, snapshot.nodes
    else:
        jobs = _sequence(snapshot.get("jobs"))
        nodes = _sequence(snapshot.get("nodes"))
    found = seen.setdefault(_cluster_id(snapshot), _Seen())
    if nodes:
        found.nodes = nodes
    watched = found.measured_s
    for raw in jobs:
        job_id = raw.id if isinstance(raw, Job) else str(raw.get("id"))
        if job_id in found.work_s:
            if job_id in watched:
                _note_run(job_id, raw, found)
            continue
        # Fields come from the first sighting; the work from the first sighting that logs one.
        first_sighting = job_id not in found.jobs
        if first_sighting or isinstance(raw, Job) or not _lacks_work(raw):
            job = raw if isinstance(raw, Job) else convert(raw, Job)
            if first_sighting:
                found.jobs[job_id] = job
            work = job.estimated_duration_s or job.total_work
            if work is not None:
                found.work_s[job_id] = work
        if job_id in watched:
            _note_run(job_id, raw, found)


def _cluster_id(snapshot: Snapshot | Mapping[str, object]) -> str:
    if isinstance(snapshot, Snapshot):
        return snapshot.cluster_id
    return str(snapshot.get("cluster_id", "default"))


def _note_run(job_id: str, raw: Job | Mapping[str, object], found: _Seen) -> None:
    """Whether this sighting breaks the job's run: not running again after running
    (preempted), or running on other GPUs than its first sighting asked for (resized)."""
    if job_id in found.interrupted:
        return
    if isinstance(raw, Job):
        state: object = raw.state.value
        held = raw.placed_gpus
    else:
        state = raw.get("state", "pending")
        held = _placed_gpus(raw.get("placement"))
    if state == "running":
        asked = found.jobs[job_id]
        if held == asked.workers * asked.gpus_per_worker:
            found.running.add(job_id)
        else:
            found.interrupted.add(job_id)
    elif job_id in found.running:  # pending or suspended again: it was preempted
        found.interrupted.add(job_id)


def _placed_gpus(placement: object) -> int:
    gpus = 0
    for assignment in _sequence(placement):
        indices = assignment.get("gpu_indices")
        gpus += len(indices) if isinstance(indices, list | tuple) else 0
    return gpus


def _read_finishes(finished: object, found: _Seen) -> None:
    """The measured run of each job a record's joined `job_finished` events name."""
    if not isinstance(finished, Mapping):
        return
    for job_id, event in finished.items():
        if not isinstance(event, Mapping):
            continue
        started, ended = event.get("started_at"), event.get("finished_at")
        if (
            isinstance(started, int | float)
            and isinstance(ended, int | float)
            and math.isfinite(started)
            and math.isfinite(ended)
            and ended > started
        ):
            found.measured_s.setdefault(str(job_id), float(ended - started))


def without_finishes(decision: Mapping[str, object]) -> Mapping[str, object]:
    """A decision record's own fields: its joined :data:`FINISHED` feedback left out."""
    if FINISHED not in decision:
        return decision
    return {key: value for key, value in decision.items() if key != FINISHED}


def _lacks_work(raw: Mapping[str, object]) -> bool:
    return raw.get("estimated_duration_s") is None and raw.get("total_work") is None


def _sequence(value: object) -> Sequence[Mapping[str, object]]:
    if not isinstance(value, list | tuple):
        return ()
    return [item for item in value if isinstance(item, Mapping)]


def _job_specs(
    window: Sequence[Job], work_s: Mapping[str, float], logged_s: Mapping[str, float]
) -> list[JobSpec]:
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
                # What schedulers saw live: the estimate; with none, the logged work in
                # unknown units, else the run time (a simulated job always has one).
                job.estimated_duration_s or logged_s.get(job.id) or work,
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
