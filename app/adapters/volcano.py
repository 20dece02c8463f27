"""Volcano's scheduler extender plugin: its wire format, and a session as Arbiter's snapshot.

Volcano's `extender` plugin posts its session and per-task questions as JSON. The
session's objects are Volcano's own scheduler types (`api.JobInfo`, `api.TaskInfo`,
`api.NodeInfo`, `api.QueueInfo`), which carry no JSON tags: their keys are Go field
names (`UID`, `Job`, `Resreq`, `ScalarResources`, `NodeName`, `MinAvailable`, ...),
the embedded `Pod` and `Node` ordinary Kubernetes JSON. The request wrappers of the
verbs after onSessionOpen do carry tags (`task`, `node`, `nodes`, `evictor`,
`evictees`, `job`, `queue`), and so do their answers (`status`, `code`, `nodeScore`,
`errorMessage`, `victims`, `overused`). Only what Arbiter reads is typed here;
unknown keys are ignored, and tasks are answered back as they came.

Volcano counts extended resources in thousandths (`ScalarResources["nvidia.com/gpu"]`
is 1000 per GPU). A task's status is Volcano's bit flag: Allocated, Pipelined,
Binding, Bound and Running hold their node's resources.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec import field

from app.adapters.k8s import GPU_RESOURCE, PREFIX, KubeNode, Pod, WireError, node_of
from policies.model import Assignment, Job, JobState, Node, Pool, Snapshot, Tenant, Topology

PERMIT, ABSTAIN, REJECT = 1, 0, -1
"""Volcano's plugin verdicts (`util.Permit`, `util.Abstain`, `util.Reject`)."""

SUCCESS, UNSCHEDULABLE = 0, 2
"""Volcano's status codes a predicate answers (`api.Success`, `api.Unschedulable`)."""

_HOLDING = {2, 4, 8, 16, 32}
"""Task statuses that hold node resources: Allocated, Pipelined, Binding, Bound, Running."""


class Resource(msgspec.Struct, kw_only=True):
    milli_cpu: float = field(default=0.0, name="MilliCPU")
    memory: float = field(default=0.0, name="Memory")
    scalar_resources: dict[str, float] | None = field(default=None, name="ScalarResources")

    def gpus(self) -> int:
        return round((self.scalar_resources or {}).get(GPU_RESOURCE, 0.0) / 1000.0)


class TaskInfo(msgspec.Struct, kw_only=True):
    uid: str = field(default="", name="UID")
    job: str = field(default="", name="Job")
    name: str = field(default="", name="Name")
    namespace: str = field(default="", name="Namespace")
    resreq: Resource | None = field(default=None, name="Resreq")
    node_name: str = field(default="", name="NodeName")
    status: int = field(default=0, name="Status")
    priority: int = field(default=0, name="Priority")
    preemptable: bool = field(default=False, name="Preemptable")
    pod: Pod | None = field(default=None, name="Pod")

    def gpus(self) -> int:
        return self.resreq.gpus() if self.resreq is not None else 0

    @property
    def holds(self) -> bool:
        return self.status in _HOLDING and bool(self.node_name)


class JobInfo(msgspec.Struct, kw_only=True):
    uid: str = field(default="", name="UID")
    name: str = field(default="", name="Name")
    namespace: str = field(default="", name="Namespace")
    queue: str = field(default="", name="Queue")
    priority: int = field(default=0, name="Priority")
    min_available: int = field(default=0, name="MinAvailable")
    tasks: dict[str, TaskInfo] | None = field(default=None, name="Tasks")
    creation_timestamp: str | None = field(default=None, name="CreationTimestamp")
    preemptable: bool = field(default=False, name="Preemptable")


class NodeInfo(msgspec.Struct, kw_only=True):
    name: str = field(default="", name="Name")
    node: KubeNode | None = field(default=None, name="Node")
    allocatable: Resource | None = field(default=None, name="Allocatable")
    capability: Resource | None = field(default=None, name="Capability")


class QueueInfo(msgspec.Struct, kw_only=True):
    uid: str = field(default="", name="UID")
    name: str = field(default="", name="Name")
    weight: float = field(default=1.0, name="Weight")


class OnSessionOpenRequest(msgspec.Struct, kw_only=True):
    jobs: dict[str, JobInfo] | None = field(default=None, name="Jobs")
    nodes: dict[str, NodeInfo] | None = field(default=None, name="Nodes")
    queues: dict[str, QueueInfo] | None = field(default=None, name="Queues")
    revocable_nodes: dict[str, NodeInfo] | None = field(default=None, name="RevocableNodes")


class Empty(msgspec.Struct, kw_only=True):
    """OnSessionCloseRequest and the session verbs' answers: an empty object."""


class PredicateRequest(msgspec.Struct, kw_only=True):
    task: TaskInfo
    node: NodeInfo


class PredicateResponse(msgspec.Struct, kw_only=True):
    status: str = ""  # the Go field ErrorMessage, tagged `status`
    code: int = SUCCESS


class PrioritizeRequest(msgspec.Struct, kw_only=True):
    task: TaskInfo
    nodes: list[NodeInfo] | None = None


class PrioritizeResponse(msgspec.Struct, kw_only=True, rename="camel"):
    node_score: dict[str, float] = field(default_factory=dict)
    error_message: str = ""


class EvictionRequest(msgspec.Struct, kw_only=True):
    """PreemptableRequest and ReclaimableRequest (the same shape)."""

    evictor: TaskInfo | None = None
    evictees: list[msgspec.Raw] | None = None


class EvictionResponse(msgspec.Struct, kw_only=True):
    status: int = ABSTAIN
    victims: list[msgspec.Raw] = field(default_factory=list)


class JobRequest(msgspec.Struct, kw_only=True):
    """JobEnqueueableRequest and JobReadyRequest."""

    job: JobInfo | None = None


class EnqueueResponse(msgspec.Struct, kw_only=True):
    status: int = ABSTAIN


class ReadyResponse(msgspec.Struct, kw_only=True):
    status: bool = True


class QueueOverusedRequest(msgspec.Struct, kw_only=True):
    queue: QueueInfo | None = None


class QueueOverusedResponse(msgspec.Struct, kw_only=True):
    overused: bool = False


def decode_task(raw: msgspec.Raw, at: str) -> TaskInfo:
    try:
        return msgspec.json.decode(raw, type=TaskInfo)
    except msgspec.MsgspecError as error:
        raise WireError(f"invalid task at {at}: {error}") from error


def job_id(task: TaskInfo) -> str:
    """The job a task belongs to: its PodGroup job, else the task alone."""
    return task.job or f"{task.namespace}/{task.name}"


def session_node(info: NodeInfo) -> Node:
    """A node of the snapshot: from its Kubernetes object when sent, else its resources."""
    if info.node is not None:
        node = node_of(info.node)
        if node.gpus or info.allocatable is None:
            return node
    resources = info.allocatable or info.capability or Resource()
    return Node(
        id=info.name,
        gpu_type="gpu",
        gpus=min(resources.gpus(), 64),
        cpus=int(resources.milli_cpu // 1000),
        memory_gb=resources.memory / 2**30,
        topology=Topology(),
        pool=Pool.TRAINING,
    )


def session_snapshot(cluster_id: str, now: float, session: OnSessionOpenRequest) -> Snapshot:
    """The session as a job-level snapshot: jobs with GPU tasks, their running placement.

    A job's workers are its tasks asking for GPUs; a gang (MinAvailable > 1) starts
    whole. Running tasks hold GPUs numbered from 0 on their node, in task order:
    Volcano does not say which indices, only how many.
    """
    nodes: dict[str, Node] = {}
    for name, node_info in sorted((session.nodes or {}).items()):
        nodes[name] = session_node(msgspec.structs.replace(node_info, name=node_info.name or name))
    next_gpu: dict[str, int] = dict.fromkeys(nodes, 0)
    jobs: list[Job] = []
    for key, info in sorted((session.jobs or {}).items()):
        tasks = [t for _, t in sorted((info.tasks or {}).items()) if t.gpus() > 0]
        if not tasks:
            continue
        gpus = max(t.gpus() for t in tasks)
        placement: list[Assignment] = []
        for task in tasks:
            if task.holds and task.node_name in nodes:
                start = next_gpu[task.node_name]
                if start + gpus > nodes[task.node_name].gpus:
                    continue  # more than the node has: Volcano's books, not ours, are off
                next_gpu[task.node_name] = start + gpus
                indices = tuple(range(start, start + gpus))
                placement.append(Assignment(node_id=task.node_name, gpu_indices=indices))
        merged: dict[str, list[int]] = {}
        for assignment in placement:
            merged.setdefault(assignment.node_id, []).extend(assignment.gpu_indices)
        held = tuple(Assignment(node_id=n, gpu_indices=tuple(g)) for n, g in merged.items())
        estimate = _estimated_duration(tasks)
        running = len(placement)
        workers = running if running else len(tasks)
        low = min(max(info.min_available, 1), workers)
        jobs.append(
            Job(
                id=info.uid or key,
                tenant=info.queue or "default",
                submit_time=_timestamp(info.creation_timestamp),
                state=JobState.RUNNING if running else JobState.PENDING,
                admitted=bool(running),
                gpus_per_worker=gpus,
                workers=workers,
                min_workers=low,
                max_workers=max(len(tasks), workers),
                gang=info.min_available > 1,
                priority=info.priority,
                estimated_duration_s=estimate,
                preemptible=info.preemptable or all(t.preemptable for t in tasks),
                placement=held,
            )
        )
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    tenants = tuple(
        Tenant(id=q.name or key, weight=q.weight if q.weight > 0 else 1.0)
        for key, q in sorted((session.queues or {}).items())
    )
    return Snapshot(
        cluster_id=cluster_id,
        now=now,
        nodes=tuple(nodes.values()),
        jobs=tuple(jobs),
        tenants=tenants,
    )


def _estimated_duration(tasks: list[TaskInfo]) -> float | None:
    """`arbiter.io/estimated-duration-s` from a task's pod (annotation, else label)."""
    key = PREFIX + "estimated-duration-s"
    for task in tasks:
        meta = task.pod.metadata if task.pod is not None else None
        if meta is None:
            continue
        raw = (meta.annotations or {}).get(key) or (meta.labels or {}).get(key)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            raise WireError(f"task {task.name!r}: {key} {raw!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise WireError(f"task {task.name!r}: {key} {raw!r} is not > 0")
        return value
    return None


def _timestamp(raw: str | None) -> float:
    if not raw:
        return 0.0
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise WireError(f"CreationTimestamp {raw!r} is not a time") from None
