"""The Kubernetes scheduler extender's wire format, and pods and nodes as Arbiter sees them.

Two halves, both pure:

* The extender API types of `k8s.io/kube-scheduler/extender/v1` (`ExtenderArgs`,
  `ExtenderFilterResult`, `HostPriority`, `ExtenderBindingArgs`,
  `ExtenderBindingResult`, `ExtenderPreemptionArgs`, `ExtenderPreemptionResult`).
  Those Go structs carry no JSON tags, so their keys are the Go field names (`Pod`,
  `NodeNames`, `PodUID`, ...); the `Pod` and `NodeList` inside them are ordinary
  Kubernetes JSON (camelCase). Only the parts Arbiter reads are typed; the rest of a
  node is kept raw, so that a filter answer hands back the scheduler's own objects.
* The translation of a pod and a node into :class:`PodInfo` and
  :class:`policies.model.Node`, from the labels and annotations documented in
  docs/integration.md (:data:`LABELS`), and of the view of one cluster
  (:class:`ClusterView`) into a job-level :class:`policies.model.Snapshot`.

GPUs are the `nvidia.com/gpu` extended resource: a pod's GPUs are what its
containers ask for, a node's what it has allocatable (else its capacity). Kubernetes
does not say which GPU indices a pod gets (the device plugin picks them); Arbiter
numbers them itself, per node, so that its snapshot and invariants hold: the count
per node is real, the indices are Arbiter's bookkeeping.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Annotated, TypeVar

import msgspec
from msgspec import Meta, field

from app.errors import decoder_problem
from policies.model import Assignment, Job, JobState, Node, Pool, Snapshot, Topology

T = TypeVar("T")

GPU_RESOURCE = "nvidia.com/gpu"
MAX_SCORE = 10
"""`MaxExtenderPriority` of the extender API: scores go from 0 to 10."""

PREFIX = "arbiter.io/"
LABELS: dict[str, str] = {
    "job": "Job id; pods with the same id form one job (default: the pod's namespace/name).",
    "gang-size": "Pods the job starts together, all or none (default 1).",
    "gpus-per-pod": f"GPUs each pod uses (default: its `{GPU_RESOURCE}` request).",
    "min-workers": "Fewest pods an elastic job runs with (default: the gang size).",
    "max-workers": "Most pods an elastic job runs with (default: the gang size).",
    "tenant": "Tenant or queue for quotas and fair shares (default: the pod's namespace).",
    "priority": "Higher is more important (default: the pod's spec.priority, else 0).",
    "preemptible": "`false` keeps the job from being preempted (default `true`).",
    "estimated-duration-s": "Expected run time in seconds, for SJF, SRTF and the like.",
    "model": "Model or model family, for throughput hints (e.g. `resnet50`).",
    "pool": "`inference` marks a serving pod; a node label: `training` or `inference`.",
    "loaned": "Node label: `true` for an inference server lent to training.",
    "gpu-type": "Node label: GPU model (default: `nvidia.com/gpu.product`, else `gpu`).",
    "rack": "Node label: rack or switch (default: `topology.kubernetes.io/zone`).",
    "price-per-gpu-hour": "Node label: USD per GPU-hour.",
}
"""Every label (or annotation, which wins) Arbiter reads, without the `arbiter.io/` prefix."""


class WireError(ValueError):
    """A payload Arbiter cannot read; the message says why, `path` names the field."""

    def __init__(self, message: str, path: str = "body") -> None:
        super().__init__(message)
        self.path = path


# -- Kubernetes objects: only what Arbiter reads ------------------------------------------------


class _Kube(msgspec.Struct, rename="camel", kw_only=True):
    """Kubernetes JSON is camelCase; unknown keys (most of a pod) are ignored."""


class ObjectMeta(_Kube):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: str | None = None


class ResourceRequirements(_Kube):
    requests: dict[str, str | int | float] | None = None
    limits: dict[str, str | int | float] | None = None


class Container(_Kube):
    name: str = ""
    resources: ResourceRequirements | None = None


class PodSpec(_Kube):
    containers: list[Container] = field(default_factory=list)
    node_name: str | None = None
    priority: int | None = None


class Pod(_Kube):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: PodSpec = field(default_factory=PodSpec)


class NodeCondition(_Kube):
    type: str = ""
    status: str = ""


class NodeSpec(_Kube):
    unschedulable: bool | None = None


class NodeStatus(_Kube):
    capacity: dict[str, str | int | float] | None = None
    allocatable: dict[str, str | int | float] | None = None
    conditions: list[NodeCondition] | None = None


class KubeNode(_Kube):
    metadata: ObjectMeta = field(default_factory=ObjectMeta)
    spec: NodeSpec = field(default_factory=NodeSpec)
    status: NodeStatus = field(default_factory=NodeStatus)


class NodeList(_Kube):
    items: list[msgspec.Raw] | None = None


# -- the extender API: Go field names as keys -------------------------------------------------


class ExtenderArgs(msgspec.Struct, kw_only=True):
    """What `filter` and `prioritize` receive. The scheduler always sends the pod; the
    nodes come as `Nodes` or, with `nodeCacheCapable`, as `NodeNames`."""

    pod: Pod = field(name="Pod")
    nodes: NodeList | None = field(default=None, name="Nodes")
    node_names: list[str] | None = field(default=None, name="NodeNames")


class ExtenderFilterResult(msgspec.Struct, kw_only=True):
    nodes: dict[str, list[msgspec.Raw]] | None = field(default=None, name="Nodes")
    node_names: list[str] | None = field(default=None, name="NodeNames")
    failed_nodes: dict[str, str] = field(default_factory=dict, name="FailedNodes")
    failed_and_unresolvable_nodes: dict[str, str] = field(
        default_factory=dict, name="FailedAndUnresolvableNodes"
    )
    error: str = field(default="", name="Error")


class HostPriority(msgspec.Struct, kw_only=True):
    host: str = field(name="Host")
    score: Annotated[int, Meta(ge=0, le=MAX_SCORE)] = field(name="Score")


class ExtenderBindingArgs(msgspec.Struct, kw_only=True):
    pod_name: str = field(default="", name="PodName")
    pod_namespace: str = field(default="", name="PodNamespace")
    pod_uid: str = field(default="", name="PodUID")
    node: str = field(default="", name="Node")


class ExtenderBindingResult(msgspec.Struct, kw_only=True):
    error: str = field(default="", name="Error")


class MetaPod(msgspec.Struct, kw_only=True):
    uid: str = field(default="", name="UID")


class MetaVictims(msgspec.Struct, kw_only=True):
    pods: list[MetaPod] | None = field(default=None, name="Pods")
    num_pdb_violations: int = field(default=0, name="NumPDBViolations")


class Victims(msgspec.Struct, kw_only=True):
    pods: list[Pod] | None = field(default=None, name="Pods")
    num_pdb_violations: int = field(default=0, name="NumPDBViolations")


class ExtenderPreemptionArgs(msgspec.Struct, kw_only=True):
    pod: Pod = field(name="Pod")
    node_name_to_victims: dict[str, Victims | None] | None = field(
        default=None, name="NodeNameToVictims"
    )
    node_name_to_meta_victims: dict[str, MetaVictims | None] | None = field(
        default=None, name="NodeNameToMetaVictims"
    )


class ExtenderPreemptionResult(msgspec.Struct, kw_only=True):
    node_name_to_meta_victims: dict[str, MetaVictims] = field(
        default_factory=dict, name="NodeNameToMetaVictims"
    )


def decode_wire(body: bytes, kind: type[T]) -> T:
    """`kind` from a request body, or a :class:`WireError` naming the offending field."""
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as error:
        problem = decoder_problem(error)
        where = "" if problem.path == "body" else f" at {problem.path}"
        message = f"invalid {kind.__name__}{where}: {problem.message}"
        raise WireError(message, problem.path) from error
    except msgspec.DecodeError as error:
        raise WireError(f"{kind.__name__} is not JSON: {error}") from error


def decode_node(raw: msgspec.Raw, at: str) -> KubeNode:
    try:
        return msgspec.json.decode(raw, type=KubeNode)
    except msgspec.MsgspecError as error:
        raise WireError(f"invalid node at {at}: {error}") from error


# -- quantities ---------------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX = {
    None: 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def quantity(value: str | int | float, at: str) -> float:
    """A Kubernetes resource quantity (`500m`, `32`, `256Gi`) as a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if match is None:
            raise WireError(f"{at}: {value!r} is not a Kubernetes quantity")
        number = float(match.group(1)) * _SUFFIX[match.group(2)]
    if not math.isfinite(number) or number < 0:
        raise WireError(f"{at}: {value!r} is not a non-negative quantity")
    return number


# -- pods ---------------------------------------------------------------------------------------


class PodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One pod as Arbiter schedules it: its job, its share of the job, its demands."""

    uid: str
    name: str
    namespace: str
    job_id: str
    tenant: str
    gpus: int
    gang_size: int = 1
    min_workers: int | None = None
    max_workers: int | None = None
    priority: int = 0
    preemptible: bool = True
    submit_time: float = 0.0
    estimated_duration_s: float | None = None
    model: str = ""
    cpus: float = 0.0
    memory_gb: float = 0.0
    inference: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _arbiter_value(meta: ObjectMeta, name: str) -> str | None:
    """An `arbiter.io/` annotation, else the label of that name."""
    key = PREFIX + name
    for source in (meta.annotations, meta.labels):
        if source and key in source:
            return source[key]
    return None


def _int(meta: ObjectMeta, name: str, lowest: int) -> int | None:
    raw = _arbiter_value(meta, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise WireError(f"Pod.metadata: {PREFIX}{name} {raw!r} is not an integer") from None
    if value < lowest:
        raise WireError(f"Pod.metadata: {PREFIX}{name} {raw!r} is below {lowest}")
    return value


def _resource(containers: Iterable[Container], resource: str, at: str) -> float:
    """The pod's request of `resource` (limits stand in where only they are set)."""
    total = 0.0
    for i, container in enumerate(containers):
        resources = container.resources or ResourceRequirements()
        asked = (resources.requests or {}).get(resource)
        if asked is None:
            asked = (resources.limits or {}).get(resource)
        if asked is not None:
            total += quantity(asked, f"{at}.containers[{i}].resources[{resource!r}]")
    return total


def _timestamp(raw: str | None) -> float:
    if not raw:
        return 0.0
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise WireError(f"Pod.metadata.creationTimestamp {raw!r} is not a time") from None


def pod_info(pod: Pod) -> PodInfo:
    """What Arbiter needs of a pod, from its labels, annotations and requests."""
    meta = pod.metadata
    if not meta.name or not meta.uid:
        raise WireError("Pod.metadata needs a name and a uid")
    namespace = meta.namespace or "default"
    requested = _resource(pod.spec.containers, GPU_RESOURCE, "Pod.spec")
    gpus = _int(meta, "gpus-per-pod", 0)
    if gpus is None:
        gpus = int(requested)
    gang = _int(meta, "gang-size", 1) or 1
    low, high = _int(meta, "min-workers", 1), _int(meta, "max-workers", 1)
    if (low or gang) > gang or gang > (high or gang):
        raise WireError(
            f"Pod.metadata: {PREFIX}min-workers {low} <= {PREFIX}gang-size {gang} <= "
            f"{PREFIX}max-workers {high} does not hold"
        )
    duration = _arbiter_value(meta, "estimated-duration-s")
    try:
        estimated = float(duration) if duration is not None else None
    except ValueError:
        raise WireError(
            f"Pod.metadata: {PREFIX}estimated-duration-s {duration!r} is not a number"
        ) from None
    if estimated is not None and not (math.isfinite(estimated) and estimated > 0):
        raise WireError(f"Pod.metadata: {PREFIX}estimated-duration-s {duration!r} is not > 0")
    priority = _int(meta, "priority", -(2**31))
    return PodInfo(
        uid=meta.uid,
        name=meta.name,
        namespace=namespace,
        job_id=_arbiter_value(meta, "job") or f"{namespace}/{meta.name}",
        tenant=_arbiter_value(meta, "tenant") or namespace,
        gpus=gpus,
        gang_size=gang,
        min_workers=low,
        max_workers=high,
        priority=priority if priority is not None else (pod.spec.priority or 0),
        preemptible=(_arbiter_value(meta, "preemptible") or "true").lower() != "false",
        submit_time=_timestamp(meta.creation_timestamp),
        estimated_duration_s=estimated,
        model=_arbiter_value(meta, "model") or "",
        cpus=_resource(pod.spec.containers, "cpu", "Pod.spec"),
        memory_gb=_resource(pod.spec.containers, "memory", "Pod.spec") / 2**30,
        inference=(_arbiter_value(meta, "pool") or "") == Pool.INFERENCE.value,
    )


# -- nodes --------------------------------------------------------------------------------------


def node_of(kube: KubeNode) -> Node:
    """A node of the snapshot from a Kubernetes node (allocatable, else capacity)."""
    meta = kube.metadata
    if not meta.name:
        raise WireError("a node needs metadata.name")
    status = kube.status
    resources = status.allocatable or status.capacity or {}
    at = f"node {meta.name!r} status.allocatable"
    gpus = int(quantity(resources.get(GPU_RESOURCE, 0), at))
    labels = meta.labels or {}
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())
    pool = _arbiter_value(meta, "pool") or Pool.TRAINING.value
    if pool not in {p.value for p in Pool}:
        raise WireError(f"node {meta.name!r}: {PREFIX}pool {pool!r} is not training or inference")
    price = _arbiter_value(meta, "price-per-gpu-hour")
    try:
        price_value = float(price) if price is not None else 0.0
    except ValueError:
        raise WireError(f"node {meta.name!r}: {PREFIX}price-per-gpu-hour {price!r}") from None
    return Node(
        id=meta.name,
        gpu_type=_arbiter_value(meta, "gpu-type") or labels.get("nvidia.com/gpu.product") or "gpu",
        gpus=min(gpus, 64),
        cpus=int(quantity(resources.get("cpu", 0), at)),
        memory_gb=quantity(resources.get("memory", 0), at) / 2**30,
        topology=Topology(
            rack=_arbiter_value(meta, "rack") or labels.get("topology.kubernetes.io/zone", "")
        ),
        pool=Pool(pool),
        loaned=pool == Pool.INFERENCE.value
        and (_arbiter_value(meta, "loaned") or "").lower() == "true",
        price_per_gpu_hour=max(price_value, 0.0),
        healthy=ready and not kube.spec.unschedulable,
    )


# -- the view of one cluster and its snapshot ----------------------------------------------------


class SeenNode(msgspec.Struct, kw_only=True):
    node: Node
    seen: float


class SeenPod(msgspec.Struct, kw_only=True):
    pod: PodInfo
    seen: float


class Binding(msgspec.Struct, kw_only=True):
    pod: PodInfo
    node: str
    gpu_indices: tuple[int, ...]
    at: float


class PlannedJob(msgspec.Struct, kw_only=True):
    """What the plan does with a job: its worker slots (one per pod), or why it waits."""

    status: str
    reason: str
    slots: tuple[Assignment, ...] = ()


class Plan(msgspec.Struct, kw_only=True):
    """The engine's answer for one round, kept to answer each pod of the round."""

    decision_id: str
    profile: str
    at: float
    generation: int
    jobs: dict[str, PlannedJob] = field(default_factory=dict)
    preempt: dict[str, str] = field(default_factory=dict)


class ClusterView(msgspec.Struct, kw_only=True):
    """What the extender has seen of one cluster, kept in the cache between calls.

    `generation` moves whenever something that changes the plan is seen (a new or
    changed node, a new job, something expired or bound off the plan); a plan made at
    an older generation is made again.
    """

    generation: int = 0
    nodes: dict[str, SeenNode] = field(default_factory=dict)
    pods: dict[str, SeenPod] = field(default_factory=dict)
    bound: dict[str, Binding] = field(default_factory=dict)
    reservations: dict[str, tuple[Assignment, ...]] = field(default_factory=dict)
    plan: Plan | None = None

    def held_gpus(self) -> dict[str, set[int]]:
        """GPU indices taken on each node: reserved for jobs, or used by serving pods."""
        held: dict[str, set[int]] = {}
        for slots in self.reservations.values():
            for slot in slots:
                held.setdefault(slot.node_id, set()).update(slot.gpu_indices)
        for binding in self.bound.values():
            if binding.pod.inference:
                held.setdefault(binding.node, set()).update(binding.gpu_indices)
        return held

    def serving_nodes(self) -> set[str]:
        return {b.node for b in self.bound.values() if b.pod.inference}

    def job_pods(self, job_id: str) -> list[PodInfo]:
        pods = [s.pod for s in self.pods.values() if s.pod.job_id == job_id]
        return pods + [b.pod for b in self.bound.values() if b.pod.job_id == job_id]


def worker_slots(assignments: Iterable[Assignment], gpus_per_worker: int) -> list[Assignment]:
    """A placement cut into one assignment per worker (a pod each)."""
    slots: list[Assignment] = []
    step = max(gpus_per_worker, 1)
    for assignment in assignments:
        indices = assignment.gpu_indices
        for start in range(0, len(indices), step):
            slots.append(
                Assignment(node_id=assignment.node_id, gpu_indices=indices[start : start + step])
            )
    return slots


def _job(pods: list[PodInfo], placement: tuple[Assignment, ...]) -> Job:
    first = min(pods, key=lambda p: (p.submit_time, p.uid))
    gpus = max(first.gpus, 1)
    running = bool(placement)
    workers = len(placement) if running else first.gang_size
    low = first.min_workers if first.min_workers is not None else first.gang_size
    high = first.max_workers if first.max_workers is not None else first.gang_size
    return Job(
        id=first.job_id,
        tenant=first.tenant,
        submit_time=min(p.submit_time for p in pods),
        state=JobState.RUNNING if running else JobState.PENDING,
        admitted=running,
        gpus_per_worker=gpus,
        workers=workers,
        min_workers=min(low, workers),
        max_workers=max(high, workers),
        cpus_per_worker=first.cpus,
        memory_gb_per_worker=first.memory_gb,
        gang=first.gang_size > 1,
        model=first.model,
        estimated_duration_s=first.estimated_duration_s,
        priority=first.priority,
        preemptible=first.preemptible,
        placement=_merged(placement),
    )


def _merged(slots: Iterable[Assignment]) -> tuple[Assignment, ...]:
    by_node: dict[str, list[int]] = {}
    for slot in slots:
        by_node.setdefault(slot.node_id, []).extend(slot.gpu_indices)
    return tuple(
        Assignment(node_id=node, gpu_indices=tuple(sorted(gpus))) for node, gpus in by_node.items()
    )


def build_snapshot(cluster_id: str, now: float, view: ClusterView) -> Snapshot:
    """The job-level snapshot of what the view holds.

    A job with a bound pod runs on its whole reservation (the slots the plan gave it
    when its first pod was bound), so that a gang half-way through binding keeps its
    GPUs; other jobs are pending. Serving pods are not jobs: a loaned server that
    hosts one is back with inference.
    """
    serving = view.serving_nodes()
    nodes = tuple(
        msgspec.structs.replace(seen.node, loaned=False) if name in serving else seen.node
        for name, seen in sorted(view.nodes.items())
    )
    pods_by_job: dict[str, list[PodInfo]] = {}
    for seen_pod in view.pods.values():
        if not seen_pod.pod.inference and seen_pod.pod.gpus > 0:
            pods_by_job.setdefault(seen_pod.pod.job_id, []).append(seen_pod.pod)
    for binding in view.bound.values():
        if not binding.pod.inference:
            pods_by_job.setdefault(binding.pod.job_id, []).append(binding.pod)
    jobs = [_job(pods, view.reservations.get(job_id, ())) for job_id, pods in pods_by_job.items()]
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    return Snapshot(cluster_id=cluster_id, now=now, nodes=nodes, jobs=tuple(jobs))


def plan_jobs(
    decision_placement: Mapping[str, tuple[Assignment, ...]],
    explanations: Mapping[str, tuple[str, str]],
    gpus_per_worker: Mapping[str, int],
) -> dict[str, PlannedJob]:
    """Each job's slots (from the decision's placement) or its status and reason."""
    planned: dict[str, PlannedJob] = {}
    for job_id, (status, reason) in explanations.items():
        placement = decision_placement.get(job_id, ())
        planned[job_id] = PlannedJob(
            status=status,
            reason=reason,
            slots=tuple(worker_slots(placement, gpus_per_worker.get(job_id, 1))),
        )
    return planned
