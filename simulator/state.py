"""A what-if run that starts from a cluster's current state instead of an empty cluster.

A snapshot (DESIGN §3) says what the cluster holds now: its nodes, the jobs running on
them and the jobs waiting. This turns it, with the jobs still to come (trace rows), into
what the simulator runs: a cluster spec, the jobs, and the GPUs each running job holds
when the run begins. The snapshot's instant is the run's time 0; an arrival's
`submit_time_s` counts from it.

What the simulator keeps of a job is what a trace row and the workload options give it
(:class:`simulator.workload.JobSpec`): a snapshot job keeps its tenant, worker counts and
bounds, scaling rule, parameter servers, utility and the caller's estimate of its run
time; the work still to do is that estimate less the progress made
(:meth:`policies.model.Job.remaining_time_s`). Its priority, preemptibility, tenant
weights and quotas are not simulated.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from policies.model import Assignment, JobState, Node, Snapshot
from simulator.cluster import ClusterSpec, NodeGroup
from simulator.perf import FAMILY_SOURCES, GENERIC
from simulator.traces import TraceJob
from simulator.workload import JobSpec, WorkloadOptions, make_jobs

MIN_WORK_S = 1.0
"""Work left to a job the caller's estimate says is done: it finishes at its first second."""


class StateError(ValueError):
    """What keeps a snapshot from being simulated: `(path, message)` pairs, with paths
    in the what-if request (`snapshot.jobs[2].estimated_duration_s`, `arrivals[0].job_id`)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = problems


@dataclass(frozen=True)
class StartState:
    cluster: ClusterSpec
    jobs: list[JobSpec]
    """The snapshot's jobs (submitted at 0, in its order), then the arrivals."""
    placements: dict[str, tuple[Assignment, ...]]
    """The GPUs each running job holds at time 0, on the cluster spec's node ids."""


def _alike(node: Node) -> tuple[str, int, float, int, float, float]:
    return (
        node.gpu_type,
        node.gpus,
        node.gpu_memory_gb,
        node.cpus,
        node.memory_gb,
        node.price_per_gpu_hour,
    )


def _groups(nodes: Sequence[Node]) -> list[NodeGroup]:
    """Runs of alike nodes, in the snapshot's order (so the spec builds them in it)."""
    runs: list[list[Node]] = []
    for node in nodes:
        if runs and _alike(runs[-1][0]) == _alike(node):
            runs[-1].append(node)
        else:
            runs.append([node])
    groups = []
    for run in runs:
        first = run[0]
        per_rack = Counter(n.topology.rack for n in run)
        groups.append(
            NodeGroup(
                count=len(run),
                gpus=first.gpus,
                gpu_type=first.gpu_type,
                gpu_memory_gb=first.gpu_memory_gb,
                cpus=first.cpus,
                memory_gb=first.memory_gb,
                rack_size=max(per_rack.values()),
                price_per_gpu_hour=first.price_per_gpu_hour,
            )
        )
    return groups


def start_state(
    snapshot: Snapshot,
    arrivals: Sequence[TraceJob],
    options: WorkloadOptions,
    seed: int = 0,
) -> StartState:
    """The simulation of `snapshot` going on with `arrivals` (raises :class:`StateError`).

    The cluster is the nodes that take training work (healthy, and in the training pool
    or loaned to it); a job running on any other node starts the run waiting.
    """
    problems: list[tuple[str, str]] = []
    kept = [n for n in snapshot.nodes if n.schedulable_for_training and n.gpus > 0]
    if not kept:
        message = "no node takes training work (healthy, with GPUs, training or loaned)"
        raise StateError([("snapshot.nodes", message)])
    cluster = ClusterSpec(name=snapshot.cluster_id, node_groups=tuple(_groups(kept)))
    node_ids = {n.id: built.id for n, built in zip(kept, cluster.build_nodes(), strict=True)}
    families = options.families()
    known = set(FAMILY_SOURCES) | {GENERIC}
    jobs: list[JobSpec] = []
    placements: dict[str, tuple[Assignment, ...]] = {}
    for i, job in enumerate(snapshot.jobs):
        left = job.remaining_time_s()
        if left is None:
            problems.append(
                (
                    f"snapshot.jobs[{i}].estimated_duration_s",
                    "required to simulate the job: its run time at the requested workers",
                )
            )
            continue
        family = (
            job.model
            if job.model in known
            else random.Random(f"{seed}/model/{job.id}").choice(families)
        )
        work = max(left, MIN_WORK_S)
        jobs.append(JobSpec.of_job(job, len(jobs), 0.0, work, family, work))
        on = [a.node_id in node_ids for a in job.placement]
        if job.state is JobState.RUNNING and on and all(on):
            placements[job.id] = tuple(
                Assignment(node_id=node_ids[a.node_id], gpu_indices=a.gpu_indices)
                for a in job.placement
            )
    present = {job.id for job in snapshot.jobs}
    for k, row in enumerate(arrivals):
        if row.job_id in present:
            problems.append((f"arrivals[{k}].job_id", f"{row.job_id!r} is a job of the snapshot"))
    if problems:
        raise StateError(problems)
    coming = make_jobs(arrivals, options, seed=seed)
    jobs += [replace(spec, index=len(jobs) + k) for k, spec in enumerate(coming)]
    return StartState(cluster=cluster, jobs=jobs, placements=placements)
