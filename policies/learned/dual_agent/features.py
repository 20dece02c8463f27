"""What the dual agent sees: per-job features for the ordering agent, machine data for RWGP.

Xing et al., "A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public
Cloud via Reinforcement Learning", KDD 2023. The paper's state encoding is not
available here; these features are ours (docs/dual-agent.md lists each and why).
Everything is computed from the snapshot alone, in NumPy, for serving and
training alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from policies.model import Job, JobState, Node, Snapshot

FAMILIES: tuple[str, ...] = (
    "resnet18",
    "resnet50",
    "transformer",
    "lm",
    "bert",
    "cifar10",
    "deepspeech2",
    "imagenet",
    "ncf",
    "yolov3",
)
"""Model families with measured speeds (`shared/perf`); any other model is one more bucket."""

JOB_SCALARS = (
    "log_gpus",
    "log_workers",
    "log_attained_gpu_h",
    "log_waiting_h",
    "running",
    "tenant_share",
    "log_cheapest_price",
    "log_dearest_price",
    "best_speed_per_dollar",
)
JOB_FEATURES = len(JOB_SCALARS) + len(FAMILIES) + 1
CLUSTER_FEATURES = 4


def family_index(model: str) -> int:
    """Index of a job's family in the one-hot block (the last slot: any other model)."""
    name = model.lower()
    return FAMILIES.index(name) if name in FAMILIES else len(FAMILIES)


@dataclass(frozen=True)
class FreeByType:
    """Free training GPUs per GPU type and the price per GPU-hour of each type (cheapest)."""

    free: Mapping[str, int]
    price: Mapping[str, float]


def free_by_type(snapshot: Snapshot) -> FreeByType:
    used: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.state is JobState.RUNNING:
            for assignment in job.placement:
                used[assignment.node_id] = used.get(assignment.node_id, 0) + len(
                    assignment.gpu_indices
                )
    free: dict[str, int] = {}
    price: dict[str, float] = {}
    for node in snapshot.nodes:
        if not node.schedulable_for_training:
            continue
        free[node.gpu_type] = free.get(node.gpu_type, 0) + max(0, node.gpus - used.get(node.id, 0))
        price[node.gpu_type] = min(price.get(node.gpu_type, math.inf), node.price_per_gpu_hour)
    return FreeByType(free=free, price=price)


def job_features(snapshot: Snapshot, jobs: Sequence[Job]) -> np.ndarray:
    """One row of :data:`JOB_FEATURES` float32 values per job, in `jobs`' order.

    Prices are those of the GPU types that have room for the whole job now (all
    types when none has), so a job learns what it would pay if started now.
    """
    capacity = max(1, snapshot.training_gpus())
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.state is JobState.RUNNING:
            held[job.tenant] = held.get(job.tenant, 0) + job.placed_gpus
    by_type = free_by_type(snapshot)
    rows = np.zeros((len(jobs), JOB_FEATURES), dtype=np.float32)
    for i, job in enumerate(jobs):
        gpus = job.gpus_per_worker * job.workers
        waiting = max(0.0, snapshot.now - job.submit_time - job.executed_time_s)
        fitting = [t for t, n in by_type.free.items() if n >= gpus] or list(by_type.price)
        prices = [by_type.price[t] for t in fitting] or [0.0]
        per_dollar = max(
            (job.gpu_type_speed.get(t, 1.0) / max(by_type.price[t], 0.01) for t in fitting),
            default=0.0,
        )
        rows[i, : len(JOB_SCALARS)] = (
            math.log2(1 + gpus) / 6.0,
            math.log2(1 + job.workers) / 6.0,
            math.log1p(job.attained_service_gpu_s / 3600.0) / 5.0,
            math.log1p(waiting / 3600.0) / 5.0,
            1.0 if job.state is JobState.RUNNING else 0.0,
            held.get(job.tenant, 0) / capacity,
            math.log1p(min(prices)),
            math.log1p(max(prices)),
            math.log1p(per_dollar),
        )
        rows[i, len(JOB_SCALARS) + family_index(job.model)] = 1.0
    return rows


def cluster_features(snapshot: Snapshot, jobs: Sequence[Job]) -> np.ndarray:
    """Free share of training GPUs, queue and running counts, mean price of free GPUs."""
    by_type = free_by_type(snapshot)
    free = sum(by_type.free.values())
    capacity = max(1, snapshot.training_gpus())
    waiting = sum(1 for j in jobs if j.state is not JobState.RUNNING)
    running = len(jobs) - waiting
    mean_price = sum(by_type.price[t] * n for t, n in by_type.free.items()) / free if free else 0.0
    return np.array(
        [
            free / capacity,
            math.log1p(waiting) / 5.0,
            math.log1p(running) / 5.0,
            math.log1p(mean_price),
        ],
        dtype=np.float32,
    )


MACHINE_FEATURES = 4


def machine_features(nodes: Sequence[Node]) -> np.ndarray:
    """Static features of each machine for RWGP's feature kernel: log price, GPU memory,
    log CPUs per GPU, log GPUs (all O(1) in scale)."""
    rows = np.zeros((len(nodes), MACHINE_FEATURES), dtype=np.float64)
    for i, node in enumerate(nodes):
        rows[i] = (
            math.log1p(node.price_per_gpu_hour),
            node.gpu_memory_gb / 32.0,
            math.log1p(node.cpus / max(1, node.gpus)) / 3.0,
            math.log2(1 + node.gpus) / 4.0,
        )
    return rows
