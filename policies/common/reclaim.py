"""Running a reclaim: check the request, ask the policy, check its answer.

The entry point of the reclaim decision (DESIGN §2, §4) for the API and the
simulator alike: :func:`run_reclaim` is a pure function of the snapshot, the
request and a seed. Like the engine for the stages of a decision, it owns what
no policy should: refusing a request that names servers which are not loaned
(:class:`ReclaimRequestError`, each problem with its JSON path), and
re-checking every answer against the contract of
:class:`policies.protocols.ReclaimPolicy`, so that a buggy policy raises
:class:`policies.engine.PolicyFault` (or hands over to the profile's fallback)
and never returns a server that is not loaned or leaves a job half on one.
"""

from __future__ import annotations

from collections.abc import Iterator

from msgspec.structs import replace

from policies.decision import Fallback, Stage
from policies.engine import PolicyFault
from policies.model import Job, Pool, Problem, Snapshot
from policies.protocols import Context, ReclaimPolicy
from policies.reclaim_models import ReclaimRequest, ReclaimResult

_TOLERANCE = 1e-9


class ReclaimRequestError(ValueError):
    """A request that cannot be answered for this snapshot (an expected outcome, not a fault)."""

    def __init__(self, problems: list[Problem]) -> None:
        first = problems[0]
        super().__init__(
            f"{len(problems)} problem(s) in the request; first: {first.path}: {first.message}"
        )
        self.problems = problems


def request_problems(snapshot: Snapshot, request: ReclaimRequest) -> list[Problem]:
    """Every named server that is unknown, not loaned or named twice; paths are `node_ids[i]`."""
    return list(_request_problems(snapshot, request))


def _request_problems(snapshot: Snapshot, request: ReclaimRequest) -> Iterator[Problem]:
    seen: set[str] = set()
    nodes = snapshot.nodes_by_id
    for i, node_id in enumerate(request.node_ids or ()):
        path = f"node_ids[{i}]"
        node = nodes.get(node_id)
        if node is None:
            yield Problem(path=path, message=f"unknown node {node_id!r}")
        elif not node.loaned:
            what = (
                "an inference server not lent" if node.pool is Pool.INFERENCE else "a training node"
            )
            yield Problem(path=path, message=f"node {node_id!r} is not loaned: it is {what}")
        elif node_id in seen:
            yield Problem(path=path, message=f"node {node_id!r} is named twice")
        seen.add(node_id)


def run_reclaim(
    policy: ReclaimPolicy,
    snapshot: Snapshot,
    request: ReclaimRequest,
    seed: int = 0,
    fallback: ReclaimPolicy | None = None,
) -> ReclaimResult:
    """The checked answer of `policy` (or of `fallback` when `policy` faults).

    The snapshot must already be semantically valid (:func:`policies.model.snapshot_problems`).
    Raises :class:`ReclaimRequestError` for a request naming servers that are not loaned,
    and :class:`PolicyFault` when the policy (and the fallback, if any) breaks its contract.
    """
    problems = request_problems(snapshot, request)
    if problems:
        raise ReclaimRequestError(problems)
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.placement:  # only running jobs hold GPUs in a valid snapshot
            gpus = sum(len(a.gpu_indices) for a in job.placement)
            held[job.tenant] = held.get(job.tenant, 0) + gpus
    ctx = Context(snapshot=snapshot, seed=seed, gpus_by_tenant=held)
    try:
        return _checked(policy, ctx, request)
    except PolicyFault as fault:
        if fallback is None:
            raise
        answer = _checked(fallback, ctx, request)
        return replace(answer, fallback=Fallback(policy=fallback.name, reason=str(fault)))


def _checked(policy: ReclaimPolicy, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
    name = str(getattr(policy, "name", type(policy).__name__))
    try:
        answer = policy.reclaim(ctx, request)
    except Exception as exc:
        raise PolicyFault(Stage.RECLAIM, name, f"raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(answer, ReclaimResult):
        raise PolicyFault(Stage.RECLAIM, name, f"returned {type(answer).__name__}, not a result")
    faults = answer_problems(ctx.snapshot, request, answer)
    if faults:
        more = f" (and {len(faults) - 3} more)" if len(faults) > 3 else ""
        raise PolicyFault(Stage.RECLAIM, name, "; ".join(faults[:3]) + more)
    return answer


def answer_problems(
    snapshot: Snapshot, request: ReclaimRequest, answer: ReclaimResult
) -> list[str]:
    """Every way `answer` breaks the reclaim contract; empty when it keeps it."""
    return list(_answer_problems(snapshot, request, answer))


def _answer_problems(
    snapshot: Snapshot, request: ReclaimRequest, answer: ReclaimResult
) -> Iterator[str]:
    nodes = snapshot.nodes_by_id
    loaned = [n.id for n in snapshot.nodes if n.loaned]
    servers = answer.servers
    if len(set(servers)) != len(servers):
        yield "returns a server more than once"
    for node_id in servers:
        node = nodes.get(node_id)
        if node is None or not node.loaned:
            yield f"returns {node_id!r}, which is not a loaned server"
    if request.node_ids is not None:
        if set(servers) != set(request.node_ids):
            yield f"returns {sorted(servers)}, not the servers named: {sorted(request.node_ids)}"
        if answer.shortfall is not None:
            yield "reports a shortfall although the servers were named"
    elif request.count is not None:
        wanted = min(request.count, len(loaned))
        if len(servers) != wanted:
            yield f"returns {len(servers)} servers, expected {wanted} ({len(loaned)} loaned)"
        if (request.count > len(loaned)) != (answer.shortfall is not None):
            yield "must give a shortfall reason exactly when fewer servers are loaned than asked"

    returned = set(servers)
    affected: dict[str, Job] = {}
    for job in snapshot.jobs:
        for a in job.placement:
            if a.node_id in returned:
                affected[job.id] = job
                break
    shrunk = [entry.job_id for entry in answer.shrink]
    listed = shrunk + list(answer.preempt)
    if len(set(listed)) != len(listed):
        yield "lists a job more than once across shrink and preempt"
    missing = sorted(set(affected) - set(listed))
    if missing:
        yield f"leaves jobs with GPUs on returned servers unhandled: {missing[:5]}"
    unexpected = sorted(set(listed) - set(affected))
    if unexpected:
        yield f"shrinks or preempts jobs with no GPUs on returned servers: {unexpected[:5]}"

    for entry in answer.shrink:
        held = affected.get(entry.job_id)
        if held is None:
            continue
        if not held.accepts_workers(entry.workers):
            yield (
                f"shrinks {held.id!r} to {entry.workers} workers, outside its bounds "
                f"[{held.lo}, {held.hi}] or {held.scaling_rule.value} step rule"
            )
        if entry.workers >= held.placed_workers:
            yield f"'shrinks' {held.id!r} from {held.placed_workers} to {entry.workers} workers"
        owned: dict[str, set[int]] = {}
        for a in held.placement:
            owned.setdefault(a.node_id, set()).update(a.gpu_indices)
        kept_nodes = [a.node_id for a in entry.assignments]
        if len(set(kept_nodes)) != len(kept_nodes):
            yield f"keeps GPUs of {held.id!r} in two assignments on one node"
        kept = 0
        for a in entry.assignments:
            if a.node_id in returned:
                yield f"keeps {held.id!r} on returned server {a.node_id!r}"
            if not set(a.gpu_indices) <= owned.get(a.node_id, set()):
                yield f"keeps GPUs of {held.id!r} on {a.node_id!r} that it does not hold"
            if len(set(a.gpu_indices)) != len(a.gpu_indices):
                yield f"keeps a GPU of {held.id!r} twice on {a.node_id!r}"
            if len(a.gpu_indices) % held.gpus_per_worker:
                yield f"keeps part of a worker of {held.id!r} on {a.node_id!r}"
            kept += len(a.gpu_indices)
        if kept != entry.workers * held.gpus_per_worker:
            yield (
                f"keeps {kept} GPUs of {held.id!r} for {entry.workers} workers of "
                f"{held.gpus_per_worker} GPUs"
            )

    preempted_gpus = 0
    for job_id in answer.preempt:
        held = affected.get(job_id)
        if held is None:
            continue
        preempted_gpus += held.placed_gpus
        lost = sum(len(a.gpu_indices) for a in held.placement if a.node_id in returned)
        left = held.placed_workers - lost // held.gpus_per_worker
        if held.allowed_worker_counts()[0] <= left:
            yield f"preempts {job_id!r}, which could shrink to run on its {left} workers left"
    if abs(answer.cost - len(answer.preempt)) > _TOLERANCE:
        yield f"cost {answer.cost:g} is not the number of preempted jobs ({len(answer.preempt)})"
    if answer.preempted_gpus != preempted_gpus:
        yield f"preempted_gpus {answer.preempted_gpus} is not the {preempted_gpus} they hold"

    unexplained_servers = [s for s in servers if not answer.reasons.servers.get(s)]
    if unexplained_servers:
        yield f"gives no reason for servers {unexplained_servers[:5]}"
    unexplained_jobs = [j for j in listed if not answer.reasons.jobs.get(j)]
    if unexplained_jobs:
        yield f"gives no reason for jobs {unexplained_jobs[:5]}"
