"""The cluster snapshot: the immutable, self-contained input of every decision.

A snapshot says everything a policy may know about the cluster at one instant
(DESIGN §3). It is built by a cluster manager (or the simulator), posted as JSON
and never mutated: policies read it and return new values.

Type-level checks (ranges, enums) live on the fields; cross-field checks that
need the whole snapshot (unique ids, placements on known GPUs, no GPU used
twice) are in :func:`snapshot_problems`, which reports *every* problem with the
JSON path of the offending value rather than stopping at the first.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta, field

T = TypeVar("T")


MAX_WORKERS = 1_000_000
"""More workers (or parameter servers) than any cluster runs: larger counts are refused
when decoded, so no request can make a policy enumerate millions of worker counts."""

MAX_WORKER_COUNTS = 4_096
"""Most worker counts one job may accept (`min_workers` to `max_workers` by
`worker_step`). Policies list, price or score every accepted count, job by job: a range
of a million counts in a request of a few bytes held a decision for seconds per job.
4,096 counts is every count of a job that grows to 4,096 workers one at a time."""

MAX_NODE_GPUS = 64
"""The most GPUs a node may have (a DGX-class server has 8 or 16)."""


class Frozen(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False):
    """Base of every domain model: immutable, strict about unknown keys.

    msgspec Structs rather than pydantic models: a large snapshot holds ~10,000 of
    them, and decoding, building and encoding them is the hot path of every decision
    (typed decoding straight from JSON bytes, validation in the decoder, no
    intermediate dicts). Construction in Python does not validate; values from
    outside come in through :func:`decode` or :func:`convert`, which do. Copies with
    changes: :func:`msgspec.structs.replace`.
    """


class Problem(Frozen, frozen=True):
    """One semantic problem of a snapshot, located by its JSON path."""

    path: Annotated[
        str,
        Meta(description="JSON path of the offending value, e.g. `jobs[3].placement[0].node_id`."),
    ]
    message: str


class Pool(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"


class ScalingRule(StrEnum):
    """Which worker counts an elastic job accepts between its bounds."""

    LINEAR = "linear"  # min, min + step, min + 2·step, …
    POWER_OF_TWO = "power_of_two"  # the powers of two within [min, max]


class Topology(Frozen, frozen=True):
    rack: Annotated[str, Meta(description="Rack (or top-of-rack switch) the node hangs off.")] = ""
    nvlink_domain: Annotated[
        str, Meta(description="GPUs of nodes sharing a domain talk over NVLink/NVSwitch.")
    ] = ""


class Node(Frozen, frozen=True):
    id: Annotated[str, Meta(min_length=1, description="Unique node id.")]
    gpu_type: Annotated[str, Meta(min_length=1, examples=["V100"], description="GPU model.")]
    gpus: Annotated[
        int, Meta(ge=0, le=MAX_NODE_GPUS, description="GPU count; GPU indices are 0..gpus-1.")
    ]
    gpu_memory_gb: Annotated[float, Meta(gt=0, description="Memory of each GPU, GB.")] = 16.0
    cpus: Annotated[int, Meta(ge=0, description="CPU cores.")] = 32
    memory_gb: Annotated[float, Meta(ge=0, description="Host memory, GB.")] = 256.0
    topology: Annotated[
        Topology, Meta(description="Where the node sits: rack or switch, NVLink domain.")
    ] = Topology()
    pool: Annotated[Pool, Meta(description="Which pool the node serves.")] = Pool.TRAINING
    loaned: Annotated[bool, Meta(description="An inference server currently lent to training.")] = (
        False
    )
    price_per_gpu_hour: Annotated[float, Meta(ge=0, description="USD per GPU-hour.")] = 0.0
    healthy: Annotated[bool, Meta(description="An unhealthy node takes no work.")] = True

    @property
    def schedulable_for_training(self) -> bool:
        return self.healthy and (self.pool is Pool.TRAINING or self.loaned)


NonEmpty = Annotated[str, Meta(min_length=1)]
"""A string that must not be empty (ids, names)."""


class Assignment(Frozen, frozen=True):
    """GPUs of one node given to a job."""

    node_id: Annotated[str, Meta(min_length=1, description="The node, by its `id`.")]
    gpu_indices: Annotated[
        tuple[int, ...],
        Meta(min_length=1, description="GPU indices on that node, each in 0..gpus-1."),
    ]


class SigmoidUtility(Frozen, frozen=True, tag_field="kind", tag="sigmoid"):
    """Utility that decays smoothly with completion time (OASiS §5)."""

    value: Annotated[float, Meta(gt=0, description="Utility if the job finishes immediately.")]
    midpoint_s: Annotated[
        float, Meta(gt=0, description="Time after submission at which half the value is lost.")
    ]
    steepness: Annotated[
        float, Meta(gt=0, description="How sharp the decay is around the midpoint.")
    ] = 1.0

    def value_at(self, elapsed_s: float) -> float:
        """Utility of finishing `elapsed_s` after submission: value / (1 + e^(s·(t − m)/m))."""
        exponent = self.steepness * (elapsed_s - self.midpoint_s) / self.midpoint_s
        # Past ~700 the exponential overflows; the utility is 0 to double precision anyway.
        return self.value / (1.0 + math.exp(min(exponent, 700.0)))


class StepUtility(Frozen, frozen=True, tag_field="kind", tag="step"):
    """Full value before the deadline, nothing after (a hard deadline)."""

    value: Annotated[float, Meta(gt=0, description="Utility if finished by the deadline.")]
    deadline_s: Annotated[float, Meta(gt=0, description="Deadline, seconds after submission.")]

    def value_at(self, elapsed_s: float) -> float:
        """Utility of finishing `elapsed_s` after submission (the deadline itself counts)."""
        return self.value if elapsed_s <= self.deadline_s else 0.0


Utility = SigmoidUtility | StepUtility


class Job(Frozen, frozen=True):
    id: Annotated[str, Meta(min_length=1, max_length=255, description="Unique job id.")]
    tenant: Annotated[
        str,
        Meta(
            description=(
                "Tenant (team, queue) the job belongs to. A tenant not listed in the "
                "snapshot's `tenants` is served as one with weight 1 and no GPU quota."
            )
        ),
    ] = "default"
    submit_time: Annotated[float, Meta(description="Seconds on the caller's clock.")] = 0.0
    state: Annotated[
        JobState,
        Meta(
            description=(
                "`pending` (never ran, or waiting to be admitted), `running` (holds the GPUs "
                "in `placement`) or `suspended` (preempted earlier, progress kept)."
            )
        ),
    ] = JobState.PENDING
    admitted: Annotated[
        bool,
        Meta(description="A pending job already admitted in an earlier round skips admission."),
    ] = False
    gpus_per_worker: Annotated[int, Meta(ge=1, le=64, description="GPUs each worker uses.")] = 1
    workers: Annotated[int, Meta(ge=1, le=MAX_WORKERS, description="Requested worker count.")] = 1
    min_workers: Annotated[
        Annotated[int, Meta(ge=1, le=MAX_WORKERS)] | None,
        Meta(description="Fewest workers the job runs with; none = `workers`."),
    ] = None
    max_workers: Annotated[
        Annotated[int, Meta(ge=1, le=MAX_WORKERS)] | None,
        Meta(
            description=(
                "Most workers the job runs with; none = `workers`. Under the linear rule the "
                f"range holds at most {MAX_WORKER_COUNTS:,} counts (`worker_step` apart)."
            )
        ),
    ] = None
    scaling_rule: Annotated[
        ScalingRule, Meta(description="Which worker counts between the bounds it accepts.")
    ] = ScalingRule.LINEAR
    worker_step: Annotated[
        int, Meta(ge=1, description="Step between accepted counts under the linear rule.")
    ] = 1
    ps: Annotated[
        int, Meta(ge=0, description="Parameter servers requested (0: all-reduce job).")
    ] = 0
    max_ps: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(description="Most parameter servers it accepts; none = no limit."),
    ] = None
    workers_per_ps: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(
            description=(
                "Workers one parameter server feeds at full speed (OASiS's worker:PS "
                "ratio); none = the requested `workers` / `ps`."
            )
        ),
    ] = None
    ps_cpus: Annotated[float, Meta(ge=0, description="CPUs each parameter server needs.")] = 0.0
    ps_memory_gb: Annotated[
        float, Meta(ge=0, description="Memory each parameter server needs, GB.")
    ] = 0.0
    cpus_per_worker: Annotated[
        float, Meta(ge=0, description="CPU cores each worker needs on its node.")
    ] = 0.0
    memory_gb_per_worker: Annotated[
        float, Meta(ge=0, description="Host memory each worker needs on its node, GB.")
    ] = 0.0
    gpu_memory_gb: Annotated[float, Meta(ge=0, description="GPU memory each worker needs.")] = 0.0
    gang: Annotated[bool, Meta(description="All workers start together or none does.")] = True
    model: Annotated[str, Meta(description="Model or model family, e.g. `resnet50`.")] = ""
    total_work: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(description="Work in any unit; with `work_done`, gives progress; none = unknown."),
    ] = None
    work_done: Annotated[
        float, Meta(ge=0, description="Work done so far, in the unit of `total_work`.")
    ] = 0.0
    estimated_duration_s: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(description="Run time at the requested worker count, from start; none = unknown."),
    ] = None
    attained_service_gpu_s: Annotated[
        float, Meta(ge=0, description="GPU-seconds received so far.")
    ] = 0.0
    executed_time_s: Annotated[float, Meta(ge=0, description="Wall seconds run so far.")] = 0.0
    speedup: Annotated[
        dict[int, float],
        Meta(description="Throughput at N workers relative to one worker (N → factor)."),
    ] = field(default_factory=dict)
    gpu_type_speed: Annotated[
        dict[str, float], Meta(description="Relative speed per GPU type (1.0 = reference).")
    ] = field(default_factory=dict)
    utility: Annotated[
        Utility | None,
        Meta(
            description=(
                "What finishing is worth over time (OASiS): a sigmoid decay or a hard "
                "deadline; none = no utility."
            )
        ),
    ] = None
    priority: Annotated[
        int, Meta(description="Higher is more important; policies that use it say how.")
    ] = 0
    preemptible: Annotated[
        bool, Meta(description="Whether the job may be stopped for others (progress is kept).")
    ] = True
    placement: Annotated[
        tuple[Assignment, ...], Meta(description="Current GPUs; empty unless running.")
    ] = ()

    @property
    def lo(self) -> int:
        return self.min_workers if self.min_workers is not None else self.workers

    @property
    def hi(self) -> int:
        return self.max_workers if self.max_workers is not None else self.workers

    @property
    def elastic(self) -> bool:
        return self.lo < self.hi

    @property
    def gpus(self) -> int:
        """GPUs at the requested worker count."""
        return self.workers * self.gpus_per_worker

    @property
    def placed_gpus(self) -> int:
        # Not cached: on Python 3.11 a cached_property takes a lock on every first read,
        # and each round's snapshot holds new Job objects, so caching cost more than
        # this sum (usually over one assignment).
        placement = self.placement
        if len(placement) == 1:
            return len(placement[0].gpu_indices)
        return sum(len(a.gpu_indices) for a in placement)

    @property
    def placed_workers(self) -> int:
        return self.placed_gpus // self.gpus_per_worker

    def allowed_worker_counts(self) -> Sequence[int]:
        """Worker counts this job accepts, ascending (always includes `workers`).

        A `range` when they are evenly spaced (the linear rule, the request on its step):
        a job may accept thousands of counts, and most callers read the first, or look
        one up by bisection, so none is listed until it is read.
        """
        lo, hi = self.lo, self.hi
        if lo == hi:
            return [self.workers]  # a rigid job (the bounds hold `workers`)
        workers = self.workers
        if self.scaling_rule is ScalingRule.POWER_OF_TWO:
            counts = [1 << k for k in range(hi.bit_length()) if lo <= (1 << k) <= hi]
            off_rule = workers & (workers - 1) != 0
        else:
            spaced = range(lo, hi + 1, self.worker_step)
            if (workers - lo) % self.worker_step == 0 or not lo <= workers <= hi:
                return spaced
            counts, off_rule = list(spaced), True
        if off_rule and lo <= workers <= hi:
            bisect.insort(counts, workers)
        return counts

    def accepts_workers(self, count: int) -> bool:
        lo, hi = self.lo, self.hi
        if not lo <= count <= hi:
            return False
        if count == self.workers:
            return True
        if self.scaling_rule is ScalingRule.POWER_OF_TWO:
            return count & (count - 1) == 0
        return (count - lo) % self.worker_step == 0

    def progress(self) -> float:
        """Fraction of the work done, 0–1 (0 when the work is unknown)."""
        if self.total_work is None:
            return 0.0
        return min(1.0, self.work_done / self.total_work)

    def speedup_at(self, workers: int) -> float:
        """Throughput at `workers` relative to one worker.

        Uses the caller's hint when it has one; otherwise assumes linear scaling,
        the assumption of the classic baselines that do not model speed-up.
        """
        if workers <= 0:
            return 0.0
        if workers in self.speedup:
            return self.speedup[workers]
        return self._between_hints(sorted(self.speedup), workers)

    def speedups_at(self, counts: Sequence[int]) -> list[float]:
        """:meth:`speedup_at` of each of `counts`, the hints sorted once: the same
        figures for a job that accepts thousands of counts and states many hints."""
        known = sorted(self.speedup)
        hints = self.speedup
        return [
            0.0 if w <= 0 else hints[w] if w in hints else self._between_hints(known, w)
            for w in counts
        ]

    def _between_hints(self, known: list[int], workers: int) -> float:
        """Speed-up at a count with no hint of its own, `known` the hinted counts sorted."""
        if not known:
            return float(workers)
        # Piecewise-linear between the nearest hints, flat beyond the largest.
        above = bisect.bisect_right(known, workers)  # the first hint above `workers`
        if above == len(known):
            return self.speedup[known[-1]]
        lo_k = known[above - 1] if above else 0
        lo_v = self.speedup[lo_k] if above else 0.0
        hi_k = known[above]
        frac = (workers - lo_k) / (hi_k - lo_k)
        return lo_v + frac * (self.speedup[hi_k] - lo_v)

    def remaining_times_s(self, counts: Sequence[int]) -> list[float] | None:
        """:meth:`remaining_time_s` at each of `counts` (the same figures, the hints
        sorted once), or None if the remaining time is unknown."""
        left = self.remaining_time_s()
        if left is None:
            return None
        requested = self.speedup_at(self.workers)
        return [
            left if at == self.workers else left * (requested / max(speed, 1e-9))
            for at, speed in zip(counts, self.speedups_at(counts), strict=True)
        ]

    def remaining_time_s(self, workers: int | None = None) -> float | None:
        """Estimated seconds left at `workers` (default: requested), or None if unknown."""
        if self.estimated_duration_s is None:
            return None
        left = self.estimated_duration_s * (1.0 - self.progress())
        if self.total_work is None:
            left = max(0.0, self.estimated_duration_s - self.executed_time_s)
        at = self.workers if workers is None else workers
        if at == self.workers:
            return left
        ratio = self.speedup_at(self.workers) / max(self.speedup_at(at), 1e-9)
        return left * ratio


class Tenant(Frozen, frozen=True):
    id: Annotated[str, Meta(min_length=1, description="Unique tenant id.")]
    weight: Annotated[float, Meta(gt=0, description="Share weight (DRF and fair policies).")] = 1.0
    gpu_quota: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(description="Most GPUs the tenant's jobs hold at once; none = unlimited."),
    ] = None


class InferenceRequest(Frozen, frozen=True, kw_only=True):
    id: Annotated[str, Meta(min_length=1, description="Unique request id.")]
    tenant: Annotated[str, Meta(description="Tenant the request belongs to.")] = "default"
    model: Annotated[str, Meta(description="Model the request runs.")] = ""
    size: Annotated[
        float, Meta(gt=0, description="Work of the request (e.g. GFLOPs or tokens).")
    ] = 1.0
    arrival: Annotated[float, Meta(description="Arrival time, seconds on the caller's clock.")] = (
        0.0
    )
    sla_deadline: Annotated[float, Meta(description="Absolute time by which it must be served.")]


class Accelerator(Frozen, frozen=True):
    id: Annotated[str, Meta(min_length=1, description="Unique accelerator id.")]
    kind: Annotated[
        str, Meta(min_length=1, description="Accelerator type, e.g. `T4` or a dataflow style.")
    ]
    node_id: Annotated[str, Meta(description="Node the accelerator sits in, if any.")] = ""
    speed: Annotated[float, Meta(gt=0, description="Work units per second.")] = 1.0
    busy_until: Annotated[float, Meta(description="When its current work ends.")] = 0.0


class InferenceLoad(Frozen, frozen=True):
    servers_needed: Annotated[int, Meta(ge=0, description="Inference servers needed now.")] = 0
    forecast: Annotated[
        tuple[int, ...], Meta(description="Servers needed in the coming intervals, nearest first.")
    ] = ()
    requests: Annotated[
        tuple[InferenceRequest, ...], Meta(description="Pending inference requests.")
    ] = ()
    accelerators: Annotated[
        tuple[Accelerator, ...], Meta(description="Accelerators that serve them.")
    ] = ()


class Snapshot(Frozen, frozen=True, dict=True, gc=True):
    """The cluster at one instant (DESIGN §3); `dict=True` keeps its cached lookups."""

    cluster_id: Annotated[
        str,
        Meta(min_length=1, max_length=255, description="The cluster this snapshot describes."),
    ] = "default"
    now: Annotated[float, Meta(description="Seconds on the caller's clock.")] = 0.0
    nodes: Annotated[tuple[Node, ...], Meta(description="Every node, in the caller's order.")] = ()
    jobs: Annotated[
        tuple[Job, ...], Meta(description="Every job, in the caller's order (the tie-break).")
    ] = ()
    tenants: Annotated[
        tuple[Tenant, ...],
        Meta(
            description=(
                "Tenants with weights or quotas; jobs of a tenant not listed get weight 1 "
                "and no quota."
            )
        ),
    ] = ()
    inference: Annotated[
        InferenceLoad, Meta(description="Inference demand and pending requests.")
    ] = InferenceLoad()

    @cached_property
    def nodes_by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    @cached_property
    def jobs_by_id(self) -> dict[str, Job]:
        return {j.id: j for j in self.jobs}

    @cached_property
    def job_positions(self) -> dict[str, int]:
        """Each job's index in `jobs`: the tie-break of orderings, so that jobs submitted
        in the same second keep the order the cluster manager (or a trace) lists them in."""
        return {j.id: i for i, j in enumerate(self.jobs)}

    @cached_property
    def tenants_by_id(self) -> dict[str, Tenant]:
        return {t.id: t for t in self.tenants}

    def training_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes if n.schedulable_for_training)


def snapshot_problems(snapshot: Snapshot) -> list[Problem]:
    """Every semantic problem of `snapshot`; empty when it is consistent."""
    return list(_problems(snapshot))


def _index_bits(indices: tuple[int, ...]) -> int:
    """The GPU indices as the bits of an int; -1 when one is negative, past any node's
    last GPU (no int of a caller's billion bits is built) or repeats: such a placement is
    walked GPU by GPU, which says what is wrong."""
    bits = 0
    for gpu in indices:
        if not 0 <= gpu < MAX_NODE_GPUS or bits >> gpu & 1:
            return -1
        bits |= 1 << gpu
    return bits


def _holders_before(s: Snapshot, job: int, assignment: int) -> dict[str, dict[int, str]]:
    """Who holds each GPU of each node, by the placements before `s.jobs[job]`'s
    `assignment`-th, all of which were found in range and free (see `_problems`)."""
    holders: dict[str, dict[int, str]] = {}
    nodes_by_id = s.nodes_by_id
    for i, held in enumerate(s.jobs[: job + 1]):
        for a in held.placement if i < job else held.placement[:assignment]:
            if a.node_id in nodes_by_id:
                on_node = holders.setdefault(a.node_id, {})
                for gpu in a.gpu_indices:
                    on_node[gpu] = held.id
    return holders


def _problems(s: Snapshot) -> Iterator[Problem]:
    seen_nodes: set[str] = set()
    for i, node in enumerate(s.nodes):
        if node.id in seen_nodes:
            yield Problem(path=f"nodes[{i}].id", message=f"duplicate node id {node.id!r}")
        seen_nodes.add(node.id)
        if node.loaned and node.pool is not Pool.INFERENCE:
            yield Problem(
                path=f"nodes[{i}].loaned", message="only inference-pool nodes can be loaned"
            )

    seen_tenants: set[str] = set()
    for i, tenant in enumerate(s.tenants):
        if tenant.id in seen_tenants:
            yield Problem(path=f"tenants[{i}].id", message=f"duplicate tenant id {tenant.id!r}")
        seen_tenants.add(tenant.id)

    # Each job's index, kept as it is checked: the snapshot's `job_positions`, which the
    # orderings read, then need not be built again by the decision that follows.
    positions: dict[str, int] = {}
    # Who holds each GPU, node by node. This walk runs on every snapshot the service is
    # sent, over every placement, so nodes are first checked a placement at a time: the
    # GPUs held on each as the bits of an int, and a placement that is in range, repeats
    # no index and takes only free bits is added with one `|`. Paths are formatted only
    # for a problem. The first placement that fails this turns the walk GPU by GPU for
    # the rest of the snapshot (`holders`, who holds each GPU, worked out once from the
    # placements before it), which finds the problems and the jobs to name in them.
    held_bits: dict[str, int] = {}
    bits_of: dict[tuple[int, ...], int] = {}
    holders: dict[str, dict[int, str]] | None = None
    nodes_by_id = s.nodes_by_id
    running = JobState.RUNNING
    power_of_two, linear = ScalingRule.POWER_OF_TWO, ScalingRule.LINEAR
    for i, job in enumerate(s.jobs):
        job_id, workers, gpw, placement = job.id, job.workers, job.gpus_per_worker, job.placement
        # `job.lo` and `job.hi`, without two property calls per job.
        lo = job.min_workers
        if lo is None:
            lo = workers
        hi = job.max_workers
        if hi is None:
            hi = workers
        if job_id in positions:
            yield Problem(path=f"jobs[{i}].id", message=f"duplicate job id {job_id!r}")
        positions[job_id] = i
        if lo > workers:
            yield Problem(
                path=f"jobs[{i}].min_workers",
                message=f"min_workers {lo} exceeds requested workers {workers}",
            )
        if workers > hi:
            yield Problem(
                path=f"jobs[{i}].max_workers",
                message=f"max_workers {hi} is below requested workers {workers}",
            )
        # A range narrower than the limit holds few enough counts whatever its step: this
        # walk runs over every job of every snapshot sent, so only wide ones are counted.
        rule = job.scaling_rule
        if hi - lo >= MAX_WORKER_COUNTS and rule is linear:
            accepted = (hi - lo) // job.worker_step + 1
            if accepted > MAX_WORKER_COUNTS:
                yield Problem(
                    path=f"jobs[{i}].max_workers",
                    message=(
                        f"accepts {accepted:,} worker counts ({lo} to {hi} by "
                        f"{job.worker_step}); at most {MAX_WORKER_COUNTS:,}: raise worker_step "
                        "or narrow the range"
                    ),
                )
        if job.max_ps is not None and job.ps > job.max_ps:
            yield Problem(
                path=f"jobs[{i}].max_ps", message=f"max_ps {job.max_ps} is below ps {job.ps}"
            )
        if (
            rule is power_of_two
            and lo <= hi
            and not any(lo <= (1 << k) <= hi for k in range(hi.bit_length()))
        ):
            yield Problem(
                path=f"jobs[{i}].scaling_rule",
                message=f"no power of two lies within [{lo}, {hi}]",
            )
        is_running = job.state is running
        if not placement:
            if is_running:
                yield Problem(
                    path=f"jobs[{i}].placement", message="a running job needs a placement"
                )
            continue
        if not is_running:
            yield Problem(
                path=f"jobs[{i}].placement", message=f"a {job.state.value} job cannot hold GPUs"
            )
        placed = (
            len(placement[0].gpu_indices)
            if len(placement) == 1
            else sum(len(a.gpu_indices) for a in placement)
        )
        if placed % gpw:
            yield Problem(
                path=f"jobs[{i}].placement",
                message=f"{placed} GPUs placed is not a multiple of gpus_per_worker {gpw}",
            )
        for k, assignment in enumerate(placement):
            indices = assignment.gpu_indices
            if len(indices) % gpw:
                yield Problem(
                    path=f"jobs[{i}].placement[{k}].gpu_indices",
                    message=(f"{len(indices)} GPUs on one node is not whole workers of {gpw} GPUs"),
                )
            on = nodes_by_id.get(assignment.node_id)
            if on is None:
                yield Problem(
                    path=f"jobs[{i}].placement[{k}].node_id",
                    message=f"unknown node {assignment.node_id!r}",
                )
                continue
            node_id, gpus = on.id, on.gpus
            if holders is None:
                bits = bits_of.get(indices)
                if bits is None:
                    bits = bits_of[indices] = _index_bits(indices)
                held = held_bits.get(node_id, 0)
                if 0 <= bits < 1 << gpus and not held & bits:
                    held_bits[node_id] = held | bits
                    continue
                holders = _holders_before(s, i, k)
            on_node = holders.get(node_id)
            if on_node is None:
                on_node = holders[node_id] = {}
            for g, gpu in enumerate(indices):
                if not 0 <= gpu < gpus:
                    yield Problem(
                        path=f"jobs[{i}].placement[{k}].gpu_indices[{g}]",
                        message=f"node {node_id!r} has GPUs 0..{gpus - 1}, not {gpu}",
                    )
                    continue
                holder = on_node.get(gpu)
                if holder is not None:
                    yield Problem(
                        path=f"jobs[{i}].placement[{k}].gpu_indices[{g}]",
                        message=f"GPU {gpu} of node {node_id!r} is already used by job {holder!r}",
                    )
                on_node[gpu] = job_id
    # What `job_positions` computes (a repeated id keeps its last index, as there).
    s.__dict__.setdefault("job_positions", positions)

    seen_requests: set[str] = set()
    for i, request in enumerate(s.inference.requests):
        if request.id in seen_requests:
            yield Problem(
                path=f"inference.requests[{i}].id",
                message=f"duplicate request id {request.id!r}",
            )
        seen_requests.add(request.id)
    seen_accelerators: set[str] = set()
    for i, acc in enumerate(s.inference.accelerators):
        if acc.id in seen_accelerators:
            yield Problem(
                path=f"inference.accelerators[{i}].id",
                message=f"duplicate accelerator id {acc.id!r}",
            )
        seen_accelerators.add(acc.id)


_SNAPSHOT_DECODER = msgspec.json.Decoder(Snapshot)


class ThroughputObservation(Frozen, frozen=True):
    """A job's speed as observed on one node, relative to what its speed table expected there.

    `relative_speed` = observed speed ÷ the job's expected speed on that node's GPU
    type (1.0: as the table says). Fed to feedback-learning policies
    (:class:`policies.protocols.FeedbackLearner`) by `POST /v1/feedback` `throughput`
    events and by the simulator.
    """

    node_id: str
    job_id: str
    relative_speed: Annotated[float, Meta(gt=0)]
    model: str = ""


def decode_snapshot(raw: bytes | str) -> Snapshot:
    """A snapshot from its JSON encoding (type-level validation only; see `snapshot_problems`).

    Raises :class:`msgspec.ValidationError` (a wrong value, with its JSON path) or
    :class:`msgspec.DecodeError` (not JSON).
    """
    return _SNAPSHOT_DECODER.decode(raw)


def decode(raw: bytes | str, kind: type[T]) -> T:
    """A value of `kind` from JSON, validated by the types' constraints."""
    return msgspec.json.decode(raw, type=kind)


def convert(value: object, kind: type[T]) -> T:
    """A value of `kind` from plain Python data (dicts, lists), validated like `decode`.

    Lax like a JSON round trip: string keys of integer-keyed maps become integers.
    """
    return msgspec.convert(value, kind, strict=False)


def encode(value: object) -> bytes:
    """JSON bytes of a domain value (the wire format)."""
    return msgspec.json.encode(value)


def to_builtins(value: object) -> Any:
    """A domain value as plain JSON-compatible Python data."""
    return msgspec.to_builtins(value)
