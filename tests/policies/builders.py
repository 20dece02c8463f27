"""Small builders for hand-made snapshots and decisions in behaviour tests."""

from __future__ import annotations

from collections.abc import Mapping

from policies.decision import Decision, JobStatus, Stage, Verdict
from policies.engine import Pipeline
from policies.model import (
    Assignment,
    Job,
    JobState,
    Node,
    Snapshot,
    Tenant,
    convert,
    snapshot_problems,
    to_builtins,
)
from policies.profiles import PolicyChoice, Profile, load_profiles
from policies.protocols import Context
from policies.registry import build_registry


def node(node_id: str, gpus: int = 8, **fields: object) -> Node:
    return convert({"id": node_id, "gpu_type": "V100", "gpus": gpus, **fields}, Node)


def job(job_id: str, **fields: object) -> Job:
    """A pending job already admitted (so admission does not get in the way) unless told."""
    return convert({"id": job_id, "admitted": True, **fields}, Job)


def running(job_id: str, on: Mapping[str, tuple[int, ...]], **fields: object) -> Job:
    """A running job holding GPU indices `on[node]` of each node."""
    placement = tuple(Assignment(node_id=n, gpu_indices=g) for n, g in on.items())
    gpw = fields.get("gpus_per_worker", 1)
    assert isinstance(gpw, int)
    workers = sum(len(g) for g in on.values()) // gpw
    base: dict[str, object] = {"id": job_id, "workers": workers}
    return convert({**base, **fields, "state": JobState.RUNNING, "placement": placement}, Job)


def snap(
    nodes: list[Node], jobs: list[Job], tenants: tuple[Tenant, ...] = (), now: float = 0.0
) -> Snapshot:
    snapshot = Snapshot(now=now, nodes=tuple(nodes), jobs=tuple(jobs), tenants=tenants)
    assert not snapshot_problems(snapshot), snapshot_problems(snapshot)
    return snapshot


def ctx(snapshot: Snapshot, seed: int = 0) -> Context:
    held: dict[str, int] = {}
    for j in snapshot.jobs:
        if j.state is JobState.RUNNING:
            held[j.tenant] = held.get(j.tenant, 0) + j.placed_gpus
    return Context(snapshot=snapshot, seed=seed, gpus_by_tenant=held)


def decide(
    snapshot: Snapshot,
    profile: str = "fifo",
    *,
    seed: int = 0,
    **stages: PolicyChoice,
) -> Decision:
    """Run a built-in profile, with any stage swapped for another choice."""
    registry = build_registry()
    chosen: Profile = load_profiles(registry)[profile]
    if stages:
        chosen = chosen.model_copy(update=stages)
    return Pipeline.build(chosen, registry).decide(snapshot, decision_id="test", seed=seed)


def choice(name: str, **params: object) -> PolicyChoice:
    return PolicyChoice.model_validate({"name": name, "params": params})


def statuses(decision: Decision) -> dict[str, JobStatus]:
    return {e.job_id: e.status for e in decision.explanations}


def reasons(decision: Decision) -> dict[str, str]:
    return {e.job_id: e.reason for e in decision.explanations}


def gpus_by_node(decision: Decision, job_id: str) -> dict[str, int]:
    for entry in decision.placement:
        if entry.job_id == job_id:
            return {a.node_id: len(a.gpu_indices) for a in entry.assignments}
    return {}


def next_snapshot(snapshot: Snapshot, decision: Decision, advance_s: float = 0.0) -> Snapshot:
    """The snapshot a caller sends after applying `decision` and waiting `advance_s`.

    Placed jobs run where they were placed, running jobs left out are suspended,
    verdicts are recorded (`admitted`) and rejected jobs leave; no job finishes.
    """
    verdicts = {a.job_id: a.verdict for a in decision.admission}
    placed = {p.job_id: p.assignments for p in decision.placement}
    jobs = []
    for j in snapshot.jobs:
        verdict = verdicts.get(j.id)
        if verdict is Verdict.REJECT:
            continue
        update: dict[str, object] = {}
        if verdict is Verdict.ADMIT:
            update["admitted"] = True
        if Stage.PLACEMENT in decision.stages:
            if j.id in placed:
                update.update(state=JobState.RUNNING, placement=placed[j.id])
            elif j.state is JobState.RUNNING:
                update.update(state=JobState.SUSPENDED, placement=())
        jobs.append(convert({**to_builtins(j), **update}, Job))
    # A new model rather than model_copy, which would carry over cached lookups.
    return Snapshot(
        cluster_id=snapshot.cluster_id,
        now=snapshot.now + advance_s,
        nodes=snapshot.nodes,
        jobs=tuple(jobs),
        tenants=snapshot.tenants,
        inference=snapshot.inference,
    )


def full_cluster_with_a_short_job_waiting() -> Snapshot:
    """A long job holds the only node; a short elastic one (minimum 2) arrives."""
    return snap(
        [node("n0")],
        [
            running("long", {"n0": tuple(range(8))}, workers=8, estimated_duration_s=50_000),
            job("short", workers=4, min_workers=2, max_workers=8, estimated_duration_s=600,
                submit_time=10),
        ],
    )  # fmt: skip
