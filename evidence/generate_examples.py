"""Generate the example snapshots committed under `examples/`.

The examples are what a user posts first (`examples/decision-request.json`), what the
benchmark posts (`small.json`, `large.json`, DESIGN §8) and what tests replay. They are
generated, never edited by hand: the same seed gives byte-identical files, and the
test suite checks that the committed files are exactly what this script writes.

Where the numbers come from (all embedded below, so the script needs nothing but the
standard library and `policies`):

* Prices per GPU-hour: `shared/perf/gpu_prices.json`, `default_usd_per_gpu_hour`
  (V100 3.06, P100 1.46 USD).
* Relative speed per GPU type and speed-up with workers: Gavel's measured throughputs
  (`shared/perf/gavel_throughput.csv`, consolidated placement). A family's P100 speed
  is its 1-GPU P100 throughput over its 1-GPU V100 throughput (V100 = 1.0); its
  speed-up at N GPUs is the P100 throughput at N over that at 1 (the P100 series is
  the smooth one; Gavel's V100 series is super-linear in places).
* Durations: log-normal with a median of about 30 minutes and a long tail, clipped to
  [60 s, 7 days], which sits between the Philly and Helios-Venus quantiles of
  `shared/traces/README.md` (p50 1,144 s and 277 s, p90 11,265 s and 18,370 s).
* GPUs per job: a mix close to Helios-Venus (55% one GPU, most others 4 or 8, a few
  16 or 32), which exercises placement more than Philly's 93% of one-GPU jobs.

`small.json` (16 nodes, 50 jobs) is written readable, `large.json` (512 × 8 GPUs,
2,000 jobs) compact; posted as compact JSON they are about 16 KB and 590 KB.
`reclaim.json` asks `POST /v1/reclaim` for two of three loaned inference servers of a
10-node cluster (30 jobs, most multi-GPU ones elastic), after a loan that put elastic
jobs' extra workers on the first lent servers and rigid jobs on the last.

Usage: `python -m evidence.generate_examples --out examples` (add `--check` to compare
with the files already there instead of writing them).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias, TypeVar

from evidence.runner import command_line
from policies.model import Job, Snapshot, convert, snapshot_problems

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]
T = TypeVar("T")

DEFAULT_SEED = 20240601
HOUR = 3600
DAY = 24 * HOUR

# USD per GPU-hour, from shared/perf/gpu_prices.json (default_usd_per_gpu_hour).
PRICE_PER_GPU_HOUR = {"V100": 3.06, "P100": 1.46}


@dataclass(frozen=True)
class NodeKind:
    """A server model: GPUs and host resources of each node of that kind."""

    gpu_type: str
    gpus: int
    gpu_memory_gb: float
    cpus: int
    memory_gb: float
    nvlink: bool


# An 8×V100 SXM2 server (NVLink within the node) and 4- or 8-GPU P100 PCIe servers.
V100_X8 = NodeKind("V100", 8, 16.0, 64, 488.0, nvlink=True)
P100_X4 = NodeKind("P100", 4, 16.0, 32, 244.0, nvlink=False)
P100_X8 = NodeKind("P100", 8, 16.0, 64, 488.0, nvlink=False)


@dataclass(frozen=True)
class Family:
    """A model family: its speed on a P100 relative to a V100 and its speed-up with GPUs."""

    model: str
    weight: float
    p100_speed: float
    # speed-up at N GPUs relative to one GPU; only 1 GPU when Gavel has no multi-GPU data.
    speedup_by_gpus: tuple[tuple[int, float], ...]
    gpu_memory_gb: float
    uses_ps: bool = False

    @property
    def multi_gpu(self) -> bool:
        return len(self.speedup_by_gpus) > 1


# From gavel_throughput.csv (see the module docstring): ResNet-50 batch 32, ResNet-18
# batch 64, Transformer batch 64, LM batch 20, Recommendation batch 1024, CycleGAN, A3C.
FAMILIES = (
    Family("resnet50", 3.0, 0.63, ((1, 1.0), (2, 1.99), (4, 3.79), (8, 6.87)), 12.0, True),
    Family("resnet18", 2.0, 0.93, ((1, 1.0), (2, 1.86), (4, 3.36), (8, 5.38)), 6.0),
    Family("transformer", 3.0, 0.59, ((1, 1.0), (2, 1.55), (4, 2.61), (8, 3.92)), 14.0),
    Family("lm", 2.0, 0.90, ((1, 1.0), (2, 1.07), (4, 1.61), (8, 2.01)), 8.0),
    Family("recommendation", 1.0, 2.31, ((1, 1.0),), 4.0),
    Family("cyclegan", 1.0, 0.54, ((1, 1.0),), 10.0),
    Family("a3c", 1.0, 0.79, ((1, 1.0),), 2.0),
)


@dataclass(frozen=True)
class Rack:
    name: str
    kind: NodeKind
    nodes: int
    inference_nodes: int = 0  # the last nodes of the rack serve inference
    loaned: int = 0  # of which this many are lent to training
    unhealthy: int = 0  # nodes (first of the rack's training nodes) marked unhealthy


@dataclass(frozen=True)
class TenantSpec:
    id: str
    weight: float
    share: float  # fraction of the jobs submitted by this tenant
    gpu_quota: int | None = None


@dataclass(frozen=True)
class Layout:
    """Everything that differs between the example sizes."""

    cluster_id: str
    racks: tuple[Rack, ...]
    jobs: int
    tenants: tuple[TenantSpec, ...]
    gpu_mix: tuple[tuple[int, float], ...]  # (GPUs per job, weight)
    submit_window_s: int  # jobs were submitted within this many seconds before `now`
    run_fraction: float  # chance that an old enough job is running (if it fits)
    # Running jobs stop being added once this share of the training GPUs is busy, so that
    # a decision has free GPUs to hand out as well as a queue to order.
    max_busy_fraction: float
    inference_needed: int
    inference_forecast: tuple[int, ...]
    # How often a job carries optional hints (host resources, utility, progress, speed per
    # GPU type); scales the base rates in `draft_jobs`.
    hint_rate: float = 1.0
    # Share of the jobs of multi-GPU model families that are elastic.
    elastic_fraction: float = 0.25
    now: int = 14 * DAY


SMALL = Layout(
    cluster_id="example-small",
    racks=(
        Rack("r0", V100_X8, 8),
        Rack("r1", P100_X4, 8, inference_nodes=2, loaned=1),
    ),
    jobs=50,
    tenants=(
        TenantSpec("prod", 4.0, 0.4),
        TenantSpec("research", 2.0, 0.4),
        TenantSpec("interns", 1.0, 0.2, gpu_quota=16),
    ),
    gpu_mix=((1, 0.5), (2, 0.12), (4, 0.16), (8, 0.16), (16, 0.06)),
    submit_window_s=2 * DAY,
    run_fraction=0.75,
    max_busy_fraction=0.85,
    inference_needed=1,
    inference_forecast=(1, 1, 2, 2),
    hint_rate=0.6,
)

LARGE = Layout(
    cluster_id="example-large",
    racks=tuple(Rack(f"r{i:02d}", V100_X8, 16, unhealthy=int(i == 3)) for i in range(20))
    + tuple(Rack(f"r{i:02d}", P100_X8, 16) for i in range(20, 31))
    + (Rack("r31", P100_X8, 16, inference_nodes=16, loaned=4),),
    jobs=2000,
    tenants=(
        TenantSpec("prod", 4.0, 0.3),
        TenantSpec("search", 3.0, 0.15),
        TenantSpec("speech", 2.0, 0.12),
        TenantSpec("vision", 2.0, 0.12),
        TenantSpec("nlp", 2.0, 0.12),
        TenantSpec("research", 1.0, 0.1),
        TenantSpec("interns", 1.0, 0.05, gpu_quota=128),
        TenantSpec("batch", 0.5, 0.04, gpu_quota=256),
    ),
    gpu_mix=((1, 0.55), (2, 0.08), (4, 0.12), (8, 0.17), (16, 0.06), (32, 0.02)),
    submit_window_s=4 * DAY,
    run_fraction=0.7,
    max_busy_fraction=0.9,
    inference_needed=12,
    inference_forecast=(12, 13, 14, 16),
    hint_rate=0.3,
)


# Six training servers and four inference servers, three of them lent to training, with
# many elastic jobs: the cluster that `reclaim.json` asks to give two servers back from.
RECLAIM = Layout(
    cluster_id="example-reclaim",
    racks=(
        Rack("r0", V100_X8, 6),
        Rack("r1", P100_X8, 4, inference_nodes=4, loaned=3),
    ),
    jobs=30,
    tenants=(TenantSpec("prod", 2.0, 0.6), TenantSpec("research", 1.0, 0.4)),
    gpu_mix=((1, 0.3), (2, 0.2), (4, 0.3), (8, 0.2)),
    submit_window_s=DAY,
    run_fraction=0.8,
    max_busy_fraction=0.9,
    inference_needed=3,
    inference_forecast=(3, 4, 4, 2),
    hint_rate=0.5,
    elastic_fraction=0.6,
)


@dataclass
class NodeState:
    """A node while the generator places the running jobs on it."""

    id: str
    rack: str
    kind: NodeKind
    inference: bool
    loaned: bool
    healthy: bool
    free: list[int]
    free_cpus: float
    free_memory_gb: float

    @property
    def trainable(self) -> bool:
        return self.healthy and (not self.inference or self.loaned)

    def workers_fitting(self, gpus_per_worker: int, cpus: float, memory_gb: float) -> int:
        by_gpu = len(self.free) // gpus_per_worker
        by_cpu = int(self.free_cpus // cpus) if cpus else by_gpu
        by_memory = int(self.free_memory_gb // memory_gb) if memory_gb else by_gpu
        return min(by_gpu, by_cpu, by_memory)


@dataclass
class JobDraft:
    """A job before its state is settled; becomes a JSON object in :func:`job_json`."""

    id: str
    tenant: str
    family: Family
    submit_time: int
    gpus_per_worker: int
    workers: int
    duration_s: int | None
    cpus_per_worker: float = 0.0  # host resources: 0 when the owner did not declare them
    memory_gb_per_worker: float = 0.0
    gpu_memory_gb: float = 0.0
    min_workers: int | None = None
    max_workers: int | None = None
    scaling_rule: str = "linear"
    worker_step: int = 1
    gang: bool = True
    ps: int = 0
    max_ps: int | None = None
    priority: int = 0
    preemptible: bool = True
    utility: JsonObject | None = None
    with_progress: bool = False
    with_type_speed: bool = False
    state: str = "pending"
    admitted: bool = False
    executed_s: int = 0
    placement: list[tuple[str, list[int]]] = field(default_factory=list)

    @property
    def hi(self) -> int:
        return self.max_workers if self.max_workers is not None else self.workers


def weighted_choice(rng: random.Random, options: Sequence[tuple[T, float]]) -> T:
    values = [value for value, _ in options]
    weights = [weight for _, weight in options]
    return rng.choices(values, weights=weights, k=1)[0]


def sample_duration(rng: random.Random) -> int:
    """Run time at the requested size: log-normal, median 30 min, clipped to [60 s, 7 d]."""
    seconds = math.exp(rng.gauss(math.log(1800.0), 1.7))
    return int(min(max(seconds, 60.0), 7 * DAY))


def build_nodes(layout: Layout) -> list[NodeState]:
    nodes: list[NodeState] = []
    for rack in layout.racks:
        first_inference = rack.nodes - rack.inference_nodes
        for index in range(rack.nodes):
            inference = index >= first_inference
            nodes.append(
                NodeState(
                    id=f"{rack.name}-n{index:02d}",
                    rack=rack.name,
                    kind=rack.kind,
                    inference=inference,
                    loaned=inference and index - first_inference < rack.loaned,
                    healthy=inference or index >= rack.unhealthy,
                    free=list(range(rack.kind.gpus)),
                    free_cpus=float(rack.kind.cpus),
                    free_memory_gb=rack.kind.memory_gb,
                )
            )
    return nodes


def node_json(node: NodeState) -> JsonObject:
    topology: JsonObject = {"rack": node.rack}
    if node.kind.nvlink:
        topology["nvlink_domain"] = node.id
    out: JsonObject = {
        "id": node.id,
        "gpu_type": node.kind.gpu_type,
        "gpus": node.kind.gpus,
        "gpu_memory_gb": node.kind.gpu_memory_gb,
        "cpus": node.kind.cpus,
        "memory_gb": node.kind.memory_gb,
        "topology": topology,
        "pool": "inference" if node.inference else "training",
    }
    if node.inference:
        out["loaned"] = node.loaned
    out["price_per_gpu_hour"] = PRICE_PER_GPU_HOUR[node.kind.gpu_type]
    if not node.healthy:
        out["healthy"] = False
    return out


def place(nodes: list[NodeState], job: JobDraft) -> list[tuple[str, list[int]]] | None:
    """Consolidated placement of a running job: one node if it fits, else fewest nodes of a rack.

    Best fit (the fullest node that still takes the job) keeps large holes for large jobs,
    the way a cluster that has been running a consolidating scheduler looks.
    """
    g, cpus, memory = job.gpus_per_worker, job.cpus_per_worker, job.memory_gb_per_worker
    by_rack: dict[str, list[tuple[NodeState, int]]] = {}
    best_whole: tuple[int, int, NodeState] | None = None
    for position, node in enumerate(nodes):
        if not node.trainable or node.kind.gpu_memory_gb < job.gpu_memory_gb:
            continue
        fit = node.workers_fitting(g, cpus, memory)
        if fit >= job.workers and (best_whole is None or len(node.free) < best_whole[0]):
            best_whole = (len(node.free), position, node)
        if fit > 0:
            by_rack.setdefault(node.rack, []).append((node, fit))
    picks: list[tuple[NodeState, int]] | None = None
    if best_whole is not None:
        picks = [(best_whole[2], job.workers)]
    else:
        for in_rack in by_rack.values():
            chosen: list[tuple[NodeState, int]] = []
            left = job.workers
            for node, fit in sorted(in_rack, key=lambda pair: -pair[1]):
                if left == 0:
                    break
                chosen.append((node, min(fit, left)))
                left -= min(fit, left)
            if left == 0 and (picks is None or len(chosen) < len(picks)):
                picks = chosen
    if picks is None:
        return None
    placement: list[tuple[str, list[int]]] = []
    for node, workers in picks:
        taken, node.free = node.free[: workers * g], node.free[workers * g :]
        node.free_cpus -= workers * cpus
        node.free_memory_gb -= workers * memory
        placement.append((node.id, taken))
    return placement


def draft_jobs(layout: Layout, rng: random.Random) -> list[JobDraft]:
    """Job requests, oldest first, before any is placed."""
    tenants = [(t.id, t.share) for t in layout.tenants]
    low, high = math.log(60.0), math.log(layout.submit_window_s)
    ages = sorted((int(math.exp(rng.uniform(low, high))) for _ in range(layout.jobs)), reverse=True)
    jobs: list[JobDraft] = []
    for number, age in enumerate(ages, start=1):
        gpus = weighted_choice(rng, layout.gpu_mix)
        candidates = [f for f in FAMILIES if gpus == 1 or f.multi_gpu]
        family = weighted_choice(rng, [(f, f.weight) for f in candidates])
        gpus_per_worker = 1
        if gpus >= 8 and rng.random() < 0.5:
            gpus_per_worker = 8
        elif gpus >= 4 and rng.random() < 0.25:
            gpus_per_worker = 2
        jobs.append(
            JobDraft(
                id=f"job-{number:04d}",
                tenant=weighted_choice(rng, tenants),
                family=family,
                submit_time=layout.now - age,
                gpus_per_worker=gpus_per_worker,
                workers=gpus // gpus_per_worker,
                duration_s=sample_duration(rng) if rng.random() < 0.9 else None,
            )
        )
    add_hints(layout, jobs, rng)
    return jobs


def pick(rng: random.Random, jobs: Sequence[JobDraft], fraction: float) -> list[JobDraft]:
    """A seeded sample of round(fraction × len) jobs, in their original order.

    Exact counts rather than a coin per job, so even the 50-job example shows every
    kind of hint whatever the seed.
    """
    count = min(len(jobs), max(1, round(fraction * len(jobs)))) if jobs and fraction else 0
    chosen = set(rng.sample(range(len(jobs)), count))
    return [job for i, job in enumerate(jobs) if i in chosen]


def add_hints(layout: Layout, jobs: list[JobDraft], rng: random.Random) -> None:
    """Elastic bounds, parameter servers, utilities, priorities and the optional hints."""
    hint = layout.hint_rate
    for job in pick(rng, [j for j in jobs if j.family.multi_gpu], layout.elastic_fraction):
        make_elastic(job, rng)
    ps_capable = [j for j in jobs if j.family.uses_ps and j.workers > 1]
    for job in pick(rng, ps_capable, 0.5):
        job.ps = max(1, job.workers // 2)
        job.max_ps = job.workers
    for job in pick(rng, jobs, 0.3 * hint):
        job.cpus_per_worker = 4.0 * job.gpus_per_worker
        job.memory_gb_per_worker = float(rng.choice((24, 32, 48)) * job.gpus_per_worker)
        job.gpu_memory_gb = job.family.gpu_memory_gb
    with_utility = pick(rng, jobs, 0.1 * hint)
    for number, job in enumerate(with_utility):
        if number % 2 == 0:  # half decay smoothly, half have a hard deadline
            job.utility = {
                "kind": "sigmoid",
                "value": float(rng.choice((10, 20, 50))),
                "midpoint_s": float(4 * (job.duration_s or HOUR)),
                "steepness": 1.0,
            }
        else:
            age = layout.now - job.submit_time
            job.utility = {
                "kind": "step",
                "value": float(rng.choice((10, 20))),
                "deadline_s": float(age + rng.randint(1, 12) * HOUR),
            }
    for job in pick(rng, jobs, 0.1):
        job.priority = rng.randint(1, 2)
    for job in pick(rng, jobs, 0.05):
        job.preemptible = False
    for job in pick(rng, [j for j in jobs if j.duration_s is not None], 0.25 * hint):
        job.with_progress = True
    for job in pick(rng, jobs, 0.25 * hint):
        job.with_type_speed = True


def make_elastic(job: JobDraft, rng: random.Random) -> None:
    """Bounds around the requested workers: halving/doubling or a linear step."""
    if job.workers & (job.workers - 1) == 0 and rng.random() < 0.5:
        job.scaling_rule = "power_of_two"
        job.min_workers = max(1, job.workers // 2)
        job.max_workers = job.workers * 2
    else:
        job.worker_step = rng.choice((1, 2)) if job.workers >= 2 else 1
        job.min_workers = max(1, job.workers - job.worker_step)
        job.max_workers = job.workers + 2 * job.worker_step
    job.gang = rng.random() < 0.7


def settle_states(
    layout: Layout, nodes: list[NodeState], jobs: list[JobDraft], rng: random.Random
) -> None:
    """Decide which jobs run (and where), which wait and which were preempted earlier."""
    quota = {t.id: t.gpu_quota for t in layout.tenants}
    used = dict.fromkeys(quota, 0)
    busy_limit = int(layout.max_busy_fraction * sum(n.kind.gpus for n in nodes if n.trainable))
    busy = 0
    waiting: list[JobDraft] = []
    for job in jobs:
        age = layout.now - job.submit_time
        gpus = job.workers * job.gpus_per_worker
        limit = quota[job.tenant]
        within_limits = (limit is None or used[job.tenant] + gpus <= limit) and (
            busy + gpus <= busy_limit
        )
        wants_to_run = age > 300 and rng.random() < layout.run_fraction
        placement = place(nodes, job) if wants_to_run and within_limits else None
        if placement is None:
            waiting.append(job)
            continue
        job.state, job.admitted, job.placement = "running", True, placement
        used[job.tenant] += gpus
        busy += gpus
        job.executed_s = max(1, age - int(age * rng.uniform(0.0, 0.3)))
        outlive_executed(job, rng)
    old_waiting = [j for j in waiting if layout.now - j.submit_time > HOUR]
    for job in pick(rng, old_waiting, 0.4):
        # Ran for a while, then was preempted (a Tiresias demotion, a reclaim).
        job.state, job.admitted = "suspended", True
        job.executed_s = max(1, int((layout.now - job.submit_time) * rng.uniform(0.05, 0.5)))
        outlive_executed(job, rng)
    for job in waiting:
        if job.state == "pending":
            job.admitted = layout.now - job.submit_time > 600 and rng.random() < 0.5


def outlive_executed(job: JobDraft, rng: random.Random) -> None:
    """A job that has run longer than its sampled duration would be over: stretch it."""
    if job.duration_s is not None and job.duration_s <= job.executed_s:
        job.duration_s = int(job.executed_s / rng.uniform(0.3, 0.95))


def job_json(job: JobDraft) -> JsonObject:
    out: JsonObject = {
        "id": job.id,
        "tenant": job.tenant,
        "submit_time": job.submit_time,
        "state": job.state,
    }
    if job.admitted and job.state == "pending":
        out["admitted"] = True
    out["gpus_per_worker"] = job.gpus_per_worker
    out["workers"] = job.workers
    if job.min_workers is not None and job.max_workers is not None:
        out["min_workers"] = job.min_workers
        out["max_workers"] = job.max_workers
        out["scaling_rule"] = job.scaling_rule
        if job.worker_step != 1:
            out["worker_step"] = job.worker_step
    if job.ps:
        out["ps"] = job.ps
        out["max_ps"] = job.max_ps
    if job.cpus_per_worker:
        out["cpus_per_worker"] = job.cpus_per_worker
        out["memory_gb_per_worker"] = job.memory_gb_per_worker
        out["gpu_memory_gb"] = job.gpu_memory_gb
    if not job.gang:
        out["gang"] = False
    out["model"] = job.family.model
    if job.duration_s is not None:
        if job.with_progress:
            # Work in iterations at one iteration per second at the requested size.
            out["total_work"] = job.duration_s
            out["work_done"] = job.executed_s
        out["estimated_duration_s"] = job.duration_s
    if job.executed_s:
        out["attained_service_gpu_s"] = job.executed_s * job.workers * job.gpus_per_worker
        out["executed_time_s"] = job.executed_s
    speedup = speedup_hints(job)
    if speedup:
        out["speedup"] = speedup
    if job.with_type_speed:
        out["gpu_type_speed"] = {"V100": 1.0, "P100": job.family.p100_speed}
    if job.utility is not None:
        out["utility"] = job.utility
    if job.priority:
        out["priority"] = job.priority
    if not job.preemptible:
        out["preemptible"] = False
    if job.placement:
        out["placement"] = [
            {"node_id": node_id, "gpu_indices": list(indices)} for node_id, indices in job.placement
        ]
    return out


def speedup_hints(job: JobDraft) -> dict[str, JsonValue]:
    """Speed-up at N workers relative to one, where Gavel measured N × gpus_per_worker GPUs.

    Only for elastic jobs, whose worker count a scaling policy may change; keys are JSON
    strings.
    """
    if job.min_workers is None or job.hi < 2:
        return {}
    by_gpus = dict(job.family.speedup_by_gpus)
    base = by_gpus.get(job.gpus_per_worker)
    if base is None:
        return {}
    hints: dict[str, JsonValue] = {}
    for workers in (1, 2, 4, 8):
        gpus = workers * job.gpus_per_worker
        if workers <= job.hi and gpus in by_gpus:
            hints[str(workers)] = round(by_gpus[gpus] / base, 2)
    return hints if len(hints) > 1 else {}


def tenant_json(tenant: TenantSpec) -> JsonObject:
    out: JsonObject = {"id": tenant.id, "weight": tenant.weight}
    if tenant.gpu_quota is not None:
        out["gpu_quota"] = tenant.gpu_quota
    return out


def build_snapshot(layout: Layout, seed: int) -> JsonObject:
    """One snapshot as a JSON object; deterministic for (layout, seed)."""
    rng = random.Random(f"{layout.cluster_id}:{seed}")
    nodes = build_nodes(layout)
    jobs = draft_jobs(layout, rng)
    settle_states(layout, nodes, jobs, rng)
    return snapshot_json(layout, nodes, jobs)


def build_loaned_snapshot(layout: Layout, seed: int) -> JsonObject:
    """A snapshot after a loan: training settled in its own pool, then grew onto lent servers.

    Training first runs on the training pool alone (the servers are not lent yet); then
    the loan of `Rack.loaned` inference servers lets elastic jobs add workers there and
    waiting rigid jobs start there (:func:`lend_servers`). Deterministic for (layout, seed).
    """
    rng = random.Random(f"{layout.cluster_id}:{seed}")
    nodes = build_nodes(layout)
    lent = [node for node in nodes if node.loaned]
    for node in lent:
        node.loaned = False
    jobs = draft_jobs(layout, rng)
    settle_states(layout, nodes, jobs, rng)
    for node in lent:
        node.loaned = True
    lend_servers(lent, jobs, rng)
    return snapshot_json(layout, nodes, jobs)


def lend_servers(servers: list[NodeState], jobs: list[JobDraft], rng: random.Random) -> None:
    """Put training work on lent servers the way Aryl would.

    Running elastic jobs, oldest first, grow one accepted count at a time while a lent
    server other than the last has room for the added workers (extra workers, which a
    reclaim only needs to shrink away); then waiting rigid jobs, oldest first, start on
    the last servers, best fit on one server (work a reclaim must preempt). The first
    server ends up with extra workers only, the last with rigid jobs only.
    """
    for job in jobs:
        if job.state != "running" or job.min_workers is None:
            continue
        held = sum(len(gpus) for _, gpus in job.placement) // job.gpus_per_worker
        counts = convert(job_json(job), Job).allowed_worker_counts()
        for count in (c for c in counts if c > held):
            fits = [
                node
                for node in servers[:-1]
                if node.workers_fitting(
                    job.gpus_per_worker, job.cpus_per_worker, job.memory_gb_per_worker
                )
                >= count - held
            ]
            if not fits:
                break
            take_workers(fits[0], job, count - held)
            held = count
    for job in jobs:
        if job.state == "running" or job.min_workers is not None:
            continue
        need = (job.gpus_per_worker, job.cpus_per_worker, job.memory_gb_per_worker)
        fits = [
            node for node in reversed(servers[1:]) if node.workers_fitting(*need) >= job.workers
        ]
        if not fits:
            continue
        take_workers(min(fits, key=lambda node: len(node.free)), job, job.workers)
        job.state, job.admitted = "running", True
        job.executed_s = 600  # started when the servers were lent, ten minutes ago
        outlive_executed(job, rng)


def take_workers(node: NodeState, job: JobDraft, workers: int) -> None:
    """Give `job` `workers` more workers on `node`, lowest free GPUs first."""
    gpus = workers * job.gpus_per_worker
    taken, node.free = node.free[:gpus], node.free[gpus:]
    node.free_cpus -= workers * job.cpus_per_worker
    node.free_memory_gb -= workers * job.memory_gb_per_worker
    for index, (node_id, held) in enumerate(job.placement):
        if node_id == node.id:
            job.placement[index] = (node_id, held + taken)
            return
    job.placement.append((node.id, taken))


def snapshot_json(layout: Layout, nodes: list[NodeState], jobs: list[JobDraft]) -> JsonObject:
    return {
        "cluster_id": layout.cluster_id,
        "now": layout.now,
        "nodes": [node_json(n) for n in nodes],
        "jobs": [job_json(j) for j in jobs],
        "tenants": [tenant_json(t) for t in layout.tenants],
        "inference": {
            "servers_needed": layout.inference_needed,
            "forecast": list(layout.inference_forecast),
        },
    }


def every_waiting_job(
    snapshot: JsonObject, every: int
) -> tuple[JsonObject, list[dict[str, JsonValue]]]:
    """A copy of `snapshot`, and every `every`-th of its waiting jobs (in that copy, to be
    changed in place), first one included."""
    copied: JsonObject = json.loads(json.dumps(snapshot))
    jobs = copied["jobs"]
    assert isinstance(jobs, list)
    waiting = [j for j in jobs if isinstance(j, dict) and j.get("state", "pending") == "pending"]
    return copied, waiting[::every]


WIDE_RANGES = ((1, 4096, 1), (2, 8190, 2), (1, 1000, 3))
"""(min_workers, max_workers, worker_step) that `widen_waiting_jobs` gives in turn; each
holds at most 4,096 counts, the most a job may accept."""


def widen_waiting_jobs(snapshot: JsonObject, every: int) -> JsonObject:
    """A copy of `snapshot` in which every `every`-th waiting job accepts a wide range of
    worker counts (`WIDE_RANGES` in turn), its request moved onto the range's step.

    Elastic jobs of the traces and examples accept a few counts; a caller may send up to
    4,096 per job, and policies that price or score every count (OASiS, Aryl, DL2) must
    decide such a snapshot exactly, and in reasonable time. The golden set and
    `bench_engine --widen` use it.
    """
    widened, chosen = every_waiting_job(snapshot, every)
    for turn, job in enumerate(chosen):
        lo, hi, step = WIDE_RANGES[turn % len(WIDE_RANGES)]
        workers = job.get("workers", 1)
        assert isinstance(workers, int)
        # The request stays an accepted count: a multiple of the step above `lo`.
        workers = max(lo, lo + (workers - lo) // step * step)
        job.update(min_workers=lo, max_workers=hi, worker_step=step, workers=workers)
        job.pop("scaling_rule", None)
    check_snapshot(f"widened (every {every})", widened)
    return widened


WIDE_SERVER_JOB: JsonObject = {
    "workers": 1,
    "min_workers": 1,
    "max_workers": 4096,
    "ps": 2,
    "max_ps": 4,
    "ps_cpus": 1.0,
}
"""What `wide_jobs_with_servers` makes of a waiting job: any of 1 to 4,096 workers, with
two to four parameter servers of one CPU each (few enough that every count's fit)."""


def wide_jobs_with_servers(snapshot: JsonObject, every: int) -> JsonObject:
    """A copy of `snapshot` in which every `every`-th waiting job is `WIDE_SERVER_JOB`
    (its other sizing fields dropped): OASiS lays out each count's servers on what its
    workers leave, for thousands of counts. The golden set and `bench_engine
    --wide-servers` use it."""
    changed, chosen = every_waiting_job(snapshot, every)
    for job in chosen:
        job.update(WIDE_SERVER_JOB)
        for key in ("scaling_rule", "worker_step", "workers_per_ps"):
            job.pop(key, None)
    check_snapshot(f"wide jobs with servers (every {every})", changed)
    return changed


def check_snapshot(name: str, snapshot: JsonObject) -> None:
    """Refuse to write an example that the service would reject."""
    problems = snapshot_problems(convert(snapshot, Snapshot))
    if problems:
        listed = "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
        raise SystemExit(f"{name}: generated snapshot has {len(problems)} problem(s): {listed}")


def dumps_readable(
    value: JsonValue,
    width: int = 100,
    indent: int = 1,
    one_line_items: Collection[str] = ("nodes", "tenants"),
) -> str:
    """JSON with one level of `indent` per nesting, short values kept on one line.

    Plain `indent=1` would put every GPU index of a placement on its own line; this keeps
    any array or object that fits in `width` columns inline, so a job reads as a block.
    Items of the arrays named in `one_line_items` (nodes, which all look alike) take one
    line each whatever their length.
    """

    def flat(item: JsonValue) -> str:
        return json.dumps(item, separators=(", ", ": "), ensure_ascii=False)

    def render(item: JsonValue, depth: int, items_flat: bool = False) -> str:
        text = flat(item)
        if not isinstance(item, dict | list) or not item or depth * indent + len(text) <= width:
            return text
        pad = " " * ((depth + 1) * indent)
        end = "\n" + " " * (depth * indent)
        if isinstance(item, dict):
            lines = [
                f"{pad}{flat(key)}: {render(sub, depth + 1, key in one_line_items)}"
                for key, sub in item.items()
            ]
            return "{\n" + ",\n".join(lines) + end + "}"
        lines = [pad + (flat(sub) if items_flat else render(sub, depth + 1)) for sub in item]
        return "[\n" + ",\n".join(lines) + end + "]"

    return render(value, 0) + "\n"


def dumps_compact(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"


def render_examples(seed: int) -> dict[str, str]:
    """File name → content of every example this script owns."""
    small = build_snapshot(SMALL, seed)
    large = build_snapshot(LARGE, seed)
    check_snapshot("small.json", small)
    check_snapshot("large.json", large)
    loaned = build_loaned_snapshot(RECLAIM, seed)
    check_snapshot("reclaim.json", loaned)
    request: JsonObject = {"profile": "tiresias", "snapshot": small}
    # Inference needs three servers now (`servers_needed`) and one is not lent: two come back.
    reclaim: JsonObject = {"profile": "aryl", "count": 2, "snapshot": loaned}
    return {
        "small.json": dumps_readable(small),
        "large.json": dumps_compact(large),
        "decision-request.json": dumps_readable(request),
        "reclaim.json": dumps_readable(reclaim),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line(__doc__)
    parser.add_argument(
        "--out", type=Path, default=Path("examples"), help="directory to write into"
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="seed (the committed files use the default)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare with the files in --out instead of writing; exit 1 if any differs",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.out
    files = render_examples(args.seed)
    if args.check:
        stale = [
            name
            for name, text in files.items()
            if not (out / name).is_file() or (out / name).read_bytes() != text.encode("utf-8")
        ]
        for name in stale:
            print(f"{out / name} is missing or differs from the generator's output")
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_bytes(text.encode("utf-8"))
        print(f"wrote {out / name} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
