"""Hypothesis strategies for valid snapshots, shared by every test module.

`snapshots()` draws clusters that exercise what policies must cope with: racks
and NVLink domains, training and inference pools with loaned and unhealthy
nodes, running jobs on valid placements (some on nodes training can no longer
use), pending (admitted or not) and suspended jobs, rigid and elastic jobs with
linear and power-of-two rules, gangs and non-gangs, CPU and memory needs,
tenants with weights and quotas, and progress, service and speed-up hints.
Every drawn snapshot passes :func:`policies.model.snapshot_problems`.
"""

from __future__ import annotations

from itertools import product
from typing import Any

from hypothesis import strategies as st

from policies.model import (
    Assignment,
    Job,
    JobState,
    Node,
    Pool,
    ScalingRule,
    Snapshot,
    Tenant,
    Topology,
    convert,
    snapshot_problems,
)

TENANTS = ("alpha", "beta", "gamma")
NOW = 100_000.0

# Each node and job is drawn as a few picks from precomputed combinations rather
# than one draw per field: hypothesis pays per draw, and this keeps a snapshot at
# under a hundred draws. Lists start with the simplest case, where shrinking ends.
_POOLS = [
    (Pool.TRAINING, False),
    (Pool.TRAINING, False),
    (Pool.TRAINING, False),
    (Pool.INFERENCE, True),
    (Pool.INFERENCE, False),
]
_NODE_SHAPES = list(
    product(
        _POOLS,
        [8, 4, 2, 1, 0, 8, 4],  # GPUs
        [16.0, 32.0, 80.0],  # GPU memory
        [(64, 512.0), (16, 128.0), (4, 32.0)],  # CPUs, memory
        ["", "r0", "r1", "r2"],  # rack
        [True, True, True, True, False],  # healthy
    )
)
_JOB_RESOURCES = list(
    product(
        [1, 1, 2, 4],  # GPUs per worker
        [0.0, 0.0, 2.0, 8.0],  # CPUs per worker
        [0.0, 0.0, 16.0, 64.0],  # memory per worker
        [0.0, 0.0, 24.0],  # GPU memory per worker
    )
)
_JOB_PROGRESS = list(
    product(
        [None, 600.0, 3600.0, 36_000.0],  # estimated duration
        [0.0, 1000.0, 5000.0, 50_000.0],  # attained GPU service
        [0.0, 0.0, 600.0, 7200.0],  # executed time
        [{}, {2: 1.8, 4: 3.0}, {1: 1.0, 8: 4.0}],  # speed-up hints
        [None, 0.0, 30.0, 90.0],  # work done of 100 (None: work unknown)
    )
)
_JOB_KIND = list(
    product(
        [*TENANTS, "default"],
        [0, 0, 1, 2],  # parameter servers
        [True, True, False],  # gang
        [True, True, True, False],  # preemptible
        [JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED],
        [True, False],  # admitted (when pending)
    )
)


def _worker_shapes() -> list[dict[str, Any]]:
    """Every valid (workers, min, max, rule, step) up to 8 workers, rigid ones first."""
    shapes: list[dict[str, Any]] = [{"workers": w} for w in range(1, 7)]
    for workers in range(1, 7):
        for lo in range(1, workers + 1):
            for hi in range(max(workers, lo + 1), 9):
                for step in (1, 2, 3):
                    shapes.append(
                        {
                            "workers": workers,
                            "min_workers": lo,
                            "max_workers": hi,
                            "worker_step": step,
                        }
                    )
                if any(lo <= (1 << k) <= hi for k in range(hi.bit_length())):
                    shapes.append(
                        {
                            "workers": workers,
                            "min_workers": lo,
                            "max_workers": hi,
                            "scaling_rule": ScalingRule.POWER_OF_TWO,
                        }
                    )
    return shapes


_WORKER_SHAPES = _worker_shapes()
_ELASTIC_OR_NOT = st.one_of(
    st.sampled_from(_WORKER_SHAPES[:6]), st.sampled_from(_WORKER_SHAPES[6:])
)
_NODE = st.sampled_from(_NODE_SHAPES)
_RESOURCES = st.sampled_from(_JOB_RESOURCES)
_PROGRESS = st.sampled_from(_JOB_PROGRESS)
_KIND = st.sampled_from(_JOB_KIND)
_SUBMIT = st.floats(0, NOW, allow_nan=False)
_TENANT = st.tuples(st.sampled_from([1.0, 0.5, 2.0]), st.one_of(st.none(), st.integers(0, 16)))


def _node(index: int, shape: tuple[Any, ...]) -> Node:
    (pool, loaned), gpus, gpu_memory, (cpus, memory), rack, healthy = shape
    return Node(
        id=f"n{index}",
        gpu_type="A100" if gpu_memory == 80.0 else "V100",
        gpus=gpus,
        gpu_memory_gb=gpu_memory,
        cpus=cpus,
        memory_gb=memory,
        topology=Topology(rack=rack, nvlink_domain=f"{rack}-d{index % 2}" if rack else ""),
        pool=pool,
        loaned=loaned,
        healthy=healthy,
    )


@st.composite
def snapshots(draw: st.DrawFn, max_nodes: int = 6, max_jobs: int = 10) -> Snapshot:
    node_list = [_node(i, draw(_NODE)) for i in range(draw(st.integers(1, max_nodes)))]
    tenants = []
    for name in TENANTS[: draw(st.integers(0, len(TENANTS)))]:
        weight, quota = draw(_TENANT)
        tenants.append(Tenant(id=name, weight=weight, gpu_quota=quota))
    free = {n.id: list(range(n.gpus)) for n in node_list}
    jobs: list[Job] = []
    for i in range(draw(st.integers(0, max_jobs))):
        gpw, cpus, memory, gpu_memory = draw(_RESOURCES)
        duration, attained, executed, speedup, work_done = draw(_PROGRESS)
        tenant, ps, gang, preemptible, state, admitted = draw(_KIND)
        submit = draw(_SUBMIT)
        fields: dict[str, Any] = {
            "id": f"j{i}",
            "tenant": tenant,
            "submit_time": submit,
            "gpus_per_worker": gpw,
            "cpus_per_worker": cpus,
            "memory_gb_per_worker": memory,
            "gpu_memory_gb": gpu_memory,
            "ps": ps,
            "gang": gang,
            "preemptible": preemptible,
            "estimated_duration_s": duration,
            "attained_service_gpu_s": attained,
            "executed_time_s": min(executed, NOW - submit),
            "speedup": speedup,
            **draw(_ELASTIC_OR_NOT),
        }
        if work_done is not None:
            fields.update(total_work=100.0, work_done=work_done)
        if state is JobState.RUNNING:
            placement = _place_running(draw, convert(fields, Job), free)
            if placement:
                fields.update(state=JobState.RUNNING, placement=placement)
            else:
                state = JobState.PENDING
        if state is JobState.SUSPENDED:
            fields["state"] = JobState.SUSPENDED
        if state is JobState.PENDING:
            fields["admitted"] = admitted
        jobs.append(convert(fields, Job))
    snapshot = Snapshot(
        cluster_id="test", now=NOW, nodes=tuple(node_list), jobs=tuple(jobs), tenants=tuple(tenants)
    )
    problems = snapshot_problems(snapshot)
    assert not problems, problems
    return snapshot


def _place_running(draw: st.DrawFn, job: Job, free: dict[str, list[int]]) -> tuple[Assignment, ...]:
    """Take free GPUs for an accepted worker count of `job`, whole workers per node; () if none."""
    counts = job.allowed_worker_counts()
    workers = counts[draw(st.integers(0, len(counts) - 1))]
    gpw = job.gpus_per_worker
    # Rotate the node order so running jobs land on different nodes (unhealthy ones too).
    names = sorted(free)
    start = draw(st.integers(0, len(names) - 1))
    picks: list[Assignment] = []
    left = workers
    for node_id in names[start:] + names[:start]:
        if left == 0:
            break
        take = min(left, len(free[node_id]) // gpw)
        if take == 0:
            continue
        gpus = tuple(free[node_id][: take * gpw])
        picks.append(Assignment(node_id=node_id, gpu_indices=gpus))
        left -= take
    if left:
        return ()
    for a in picks:
        free[a.node_id] = free[a.node_id][len(a.gpu_indices) :]
    return tuple(picks)


@st.composite
def loaned_snapshots(draw: st.DrawFn, max_jobs: int = 8) -> Snapshot:
    """Clusters where inference servers are lent to training and running jobs span them.

    What reclaims are about, drawn far more often than by :func:`snapshots`: a few training
    nodes and loaned servers, running jobs (rigid and elastic, some non-preemptible) whose
    workers spread over both, so that returning a server sometimes only shrinks a job,
    sometimes preempts it, and sometimes frees servers of a job preempted already.
    """
    training = draw(st.integers(0, 3))
    lent = draw(st.integers(1, 4))
    sizes = draw(
        st.lists(
            st.sampled_from([8, 4, 2]), min_size=training + lent + 1, max_size=training + lent + 1
        )
    )
    node_list = [Node(id=f"t{i}", gpu_type="V100", gpus=sizes[i]) for i in range(training)]
    node_list += [
        Node(id=f"i{i}", gpu_type="T4", gpus=sizes[training + i], pool=Pool.INFERENCE, loaned=True)
        for i in range(lent)
    ]
    # One inference server still serving: never returned, never used by training.
    node_list.append(Node(id="serving", gpu_type="T4", gpus=sizes[-1], pool=Pool.INFERENCE))
    free = {n.id: list(range(n.gpus)) for n in node_list if n.schedulable_for_training}
    jobs: list[Job] = []
    for i in range(draw(st.integers(0, max_jobs))):
        fields: dict[str, Any] = {
            "id": f"j{i}",
            "gpus_per_worker": draw(st.sampled_from([1, 1, 2])),
            "preemptible": draw(st.sampled_from([True, True, True, False])),
            "estimated_duration_s": 3600.0,
            **draw(_ELASTIC_OR_NOT),
        }
        placement = _place_running(draw, convert(fields, Job), free)
        if placement:
            fields.update(state=JobState.RUNNING, placement=placement)
        jobs.append(convert(fields, Job))
    snapshot = Snapshot(cluster_id="lent", now=NOW, nodes=tuple(node_list), jobs=tuple(jobs))
    problems = snapshot_problems(snapshot)
    assert not problems, problems
    return snapshot
