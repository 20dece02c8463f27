"""The invariants every decision and every reclaim must satisfy (DESIGN §2), as reusable checks."""

from __future__ import annotations

from policies.decision import Decision, JobStatus, Stage, Verdict
from policies.model import Job, JobState, Snapshot
from policies.reclaim_models import ReclaimRequest, ReclaimResult

_RUNS_AFTER = {JobStatus.STARTED, JobStatus.RUNNING, JobStatus.RESIZED, JobStatus.MOVED}


def assert_valid_decision(snapshot: Snapshot, decision: Decision) -> None:
    jobs = snapshot.jobs_by_id
    nodes = snapshot.nodes_by_id

    # Every job of the snapshot is explained exactly once.
    explained = [e.job_id for e in decision.explanations]
    assert sorted(explained) == sorted(jobs), "one explanation per job"
    status = {e.job_id: e.status for e in decision.explanations}
    assert all(e.reason for e in decision.explanations), "every explanation gives a reason"

    # Admission judged exactly the pending jobs not admitted before.
    judged = {j.id for j in snapshot.jobs if j.state is JobState.PENDING and not j.admitted}
    assert sorted(a.job_id for a in decision.admission) == sorted(judged)
    for verdict in decision.admission:
        assert verdict.admitted == (verdict.verdict is Verdict.ADMIT)
        if verdict.verdict is Verdict.REJECT:
            assert status[verdict.job_id] is JobStatus.REJECTED
        if verdict.verdict is Verdict.DEFER:
            assert status[verdict.job_id] is JobStatus.PENDING
    admitted_now = {a.job_id for a in decision.admission if a.admitted}
    schedulable = {
        j.id
        for j in snapshot.jobs
        if j.state is not JobState.PENDING or j.admitted or j.id in admitted_now
    }

    # Ordering is a permutation of the schedulable jobs.
    if Stage.ORDERING in decision.stages:
        assert len(decision.ordering) == len(set(decision.ordering))
        assert set(decision.ordering) == schedulable

    # Scaling answers each schedulable job with 0 or an accepted count.
    scaling = {r.job_id: r for r in decision.scaling}
    if Stage.SCALING in decision.stages:
        assert len(decision.scaling) == len(scaling)
        assert set(scaling) == schedulable
        for r in decision.scaling:
            assert r.workers == 0 or jobs[r.job_id].accepts_workers(r.workers), r

    if Stage.PLACEMENT not in decision.stages:
        return

    used: set[tuple[str, int]] = set()
    placed: dict[str, int] = {}
    cpu_checked: set[str] = set()  # nodes given new workers that need CPUs
    memory_checked: set[str] = set()
    cpus_after: dict[str, float] = {}
    memory_after: dict[str, float] = {}
    for entry in decision.placement:
        assert entry.job_id not in placed, "a job is placed once"
        job = jobs[entry.job_id]
        gpw = job.gpus_per_worker
        node_ids = [a.node_id for a in entry.assignments]
        assert len(node_ids) == len(set(node_ids)), "one assignment per node"
        before = {a.node_id: set(a.gpu_indices) for a in job.placement}
        total = 0
        for a in entry.assignments:
            node = nodes[a.node_id]
            assert node.schedulable_for_training, f"{a.node_id} cannot take training"
            assert len(a.gpu_indices) % gpw == 0, "whole workers per node"
            for gpu in a.gpu_indices:
                assert 0 <= gpu < node.gpus, "a GPU index the node has"
                assert (a.node_id, gpu) not in used, f"GPU {gpu} of {a.node_id} given twice"
                used.add((a.node_id, gpu))
            total += len(a.gpu_indices)
            workers_here = len(a.gpu_indices) // gpw
            cpus_after[a.node_id] = (
                cpus_after.get(a.node_id, 0.0) + workers_here * job.cpus_per_worker
            )
            memory_after[a.node_id] = (
                memory_after.get(a.node_id, 0.0) + workers_here * job.memory_gb_per_worker
            )
            if set(a.gpu_indices) - before.get(a.node_id, set()):
                if job.cpus_per_worker > 0:
                    cpu_checked.add(a.node_id)
                if job.memory_gb_per_worker > 0:
                    memory_checked.add(a.node_id)
        placed[job.id] = total
        assert total > 0
        assert job.accepts_workers(total // gpw), f"{job.id}: {total // gpw} workers not accepted"
        assert status[job.id] in _RUNS_AFTER, (job.id, status[job.id])
        target = scaling[job.id].workers
        if status[job.id] is JobStatus.STARTED:
            assert job.state is not JobState.RUNNING
            if job.gang:
                assert total == target * gpw, "a gang starts with all its workers"
            else:
                assert total <= target * gpw
        elif status[job.id] is JobStatus.RESIZED:
            assert job.state is JobState.RUNNING
            assert total == target * gpw, "a resize gives exactly the target"
        elif status[job.id] is JobStatus.MOVED:
            assert job.state is JobState.RUNNING
            assert total == job.placed_gpus, "a move keeps every worker"
            assert len(entry.assignments) == 1 < len(job.placement), "a move gathers onto one node"
            if job.gpu_memory_gb:
                assert all(
                    nodes[a.node_id].gpu_memory_gb >= job.gpu_memory_gb for a in entry.assignments
                ), "a move lands only where the job's GPU memory fits"
        else:
            assert job.state is JobState.RUNNING
            assert before == {a.node_id: set(a.gpu_indices) for a in entry.assignments}

    for job_id, st in status.items():
        assert (st in _RUNS_AFTER) == (job_id in placed), (job_id, st)

    # CPUs and memory: new workers that need them do not overcommit their node.
    for node_id in cpu_checked:
        assert cpus_after[node_id] <= nodes[node_id].cpus + 1e-6, f"CPUs of {node_id}"
    for node_id in memory_checked:
        assert memory_after[node_id] <= nodes[node_id].memory_gb + 1e-6, f"memory of {node_id}"

    # Quotas: a tenant that started or grew a job ends within its quota.
    grew = {
        jobs[i].tenant
        for i, st in status.items()
        if st is JobStatus.STARTED or (st is JobStatus.RESIZED and placed[i] > jobs[i].placed_gpus)
    }
    for tenant in grew:
        spec = snapshot.tenants_by_id.get(tenant)
        if spec is not None and spec.gpu_quota is not None:
            held = sum(g for i, g in placed.items() if jobs[i].tenant == tenant)
            assert held <= spec.gpu_quota, f"tenant {tenant} holds {held} > {spec.gpu_quota}"

    # Preemptions: only running jobs, and a non-preemptible one only when it must.
    preempted = {note.job_id for note in decision.preemptions}
    for job_id in preempted:
        assert jobs[job_id].state is JobState.RUNNING
        assert status[job_id] is JobStatus.PREEMPTED
    for job_id, st in status.items():
        if st is JobStatus.PREEMPTED:
            assert job_id in preempted
    for job in snapshot.jobs:
        if job.id in preempted and not job.preemptible:
            assert _lost_node(snapshot, job) or scaling[job.id].workers == 0, job.id

    for note in decision.pending:
        assert status[note.job_id] is JobStatus.PENDING


def _lost_node(snapshot: Snapshot, job: Job) -> bool:
    nodes = snapshot.nodes_by_id
    return any(not nodes[a.node_id].schedulable_for_training for a in job.placement)


def assert_valid_reclaim(
    snapshot: Snapshot, request: ReclaimRequest, result: ReclaimResult
) -> None:
    """The reclaim contract, checked independently of :mod:`policies.common.reclaim`."""
    jobs = snapshot.jobs_by_id
    loaned = [n.id for n in snapshot.nodes if n.loaned]
    servers = list(result.servers)
    assert len(servers) == len(set(servers)), "a server returned twice"
    assert set(servers) <= set(loaned), "only loaned servers are returned"
    if request.node_ids is not None:
        assert set(servers) == set(request.node_ids), "exactly the servers named"
        assert result.shortfall is None
    else:
        assert request.count is not None
        assert len(servers) == min(request.count, len(loaned)), "the count, when possible"
        assert (result.shortfall is not None) == (request.count > len(loaned))

    returned = set(servers)
    on_returned = {j.id for j in snapshot.jobs for a in j.placement if a.node_id in returned}
    shrunk = {entry.job_id: entry for entry in result.shrink}
    preempted = set(result.preempt)
    assert len(shrunk) == len(result.shrink), "a job shrunk twice"
    assert len(preempted) == len(result.preempt), "a job preempted twice"
    assert not set(shrunk) & preempted, "a job both shrunk and preempted"
    assert set(shrunk) | preempted == on_returned, "each job on a returned server, and no other"

    for entry in result.shrink:
        job = jobs[entry.job_id]
        assert job.accepts_workers(entry.workers), (job.id, entry.workers)
        assert entry.workers < job.placed_workers, "a shrink takes workers away"
        held = {(a.node_id, g) for a in job.placement for g in a.gpu_indices}
        kept = [(a.node_id, g) for a in entry.assignments for g in a.gpu_indices]
        assert len(kept) == len(set(kept)), "a kept GPU listed twice"
        assert set(kept) <= held, "a shrunk job keeps only GPUs it held"
        assert not {node for node, _ in kept} & returned, "kept workers are off returned servers"
        assert len(kept) == entry.workers * job.gpus_per_worker
        assert all(len(a.gpu_indices) % job.gpus_per_worker == 0 for a in entry.assignments)

    for job_id in result.preempt:
        job = jobs[job_id]
        kept_gpus = sum(len(a.gpu_indices) for a in job.placement if a.node_id not in returned)
        left = kept_gpus // job.gpus_per_worker
        assert min(job.allowed_worker_counts()) > left, f"{job_id} preempted but could shrink"

    assert abs(result.cost - len(result.preempt)) < 1e-9, "cost counts the preempted jobs"
    assert result.preempted_gpus == sum(jobs[j].placed_gpus for j in result.preempt)
    assert all(result.reasons.servers.get(s) for s in servers), "a reason per server"
    assert all(result.reasons.jobs.get(j) for j in on_returned), "a reason per job"
