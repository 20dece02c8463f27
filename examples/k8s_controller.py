"""A small Kubernetes controller that schedules GPU pods with Arbiter's decisions.

Each round it lists nodes and pods with the official `kubernetes` client, builds a
snapshot (one job per `arbiter.io/job`, its pods the workers), posts it to
`POST /v1/decisions`, binds the waiting pods of every job the decision places, and
reports the jobs whose pods all finished to `POST /v1/feedback`. Pods opt in with
`spec.schedulerName: arbiter`. docs/integration.md walks through it.

    python examples/k8s_controller.py --arbiter http://127.0.0.1:8000 --profile tiresias

It needs only `kubernetes` and `httpx`; the labels are those of docs/integration.md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import httpx
from kubernetes import client, config

SCHEDULER = "arbiter"
GPU = "nvidia.com/gpu"
LABEL = "arbiter.io/"


def _label(obj: Any, name: str, default: str = "") -> str:
    meta = obj.metadata
    for source in (meta.annotations or {}, meta.labels or {}):
        if LABEL + name in source:
            return str(source[LABEL + name])
    return default


def _gpus(pod: client.V1Pod) -> int:
    total = 0
    for container in pod.spec.containers:
        resources = container.resources
        asked = (resources.limits or {}).get(GPU) or (resources.requests or {}).get(GPU)
        total += int(asked or 0)
    return total


def job_of(pod: client.V1Pod) -> str:
    return _label(pod, "job", f"{pod.metadata.namespace}/{pod.metadata.name}")


def snapshot_of(
    nodes: Iterable[client.V1Node], pods: Iterable[client.V1Pod], cluster_id: str, now: float
) -> dict[str, Any]:
    """The snapshot of the cluster: GPU nodes, and one job per `arbiter.io/job`."""
    snapshot_nodes = []
    for node in nodes:
        allocatable = node.status.allocatable or {}
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        snapshot_nodes.append(
            {
                "id": node.metadata.name,
                "gpu_type": (node.metadata.labels or {}).get("nvidia.com/gpu.product", "gpu"),
                "gpus": int(allocatable.get(GPU, 0)),
                "healthy": ready and not node.spec.unschedulable,
            }
        )
    by_job: dict[str, list[client.V1Pod]] = defaultdict(list)
    for pod in pods:
        if pod.spec.scheduler_name == SCHEDULER and pod.status.phase in {"Pending", "Running"}:
            by_job[job_of(pod)].append(pod)
    jobs = []
    next_gpu: dict[str, int] = defaultdict(int)
    for job_id, members in by_job.items():
        first = members[0]
        gpus = max(_gpus(first), 1)
        placed: dict[str, list[int]] = defaultdict(list)
        for pod in members:
            if pod.spec.node_name:  # Kubernetes does not say which GPUs: number them
                start = next_gpu[pod.spec.node_name]
                next_gpu[pod.spec.node_name] = start + gpus
                placed[pod.spec.node_name].extend(range(start, start + gpus))
        workers = int(_label(first, "gang-size", str(len(members))))
        jobs.append(
            {
                "id": job_id,
                "tenant": _label(first, "tenant", first.metadata.namespace),
                "submit_time": first.metadata.creation_timestamp.timestamp(),
                "state": "running" if placed else "pending",
                "gpus_per_worker": gpus,
                "workers": sum(len(g) for g in placed.values()) // gpus if placed else workers,
                "placement": [{"node_id": n, "gpu_indices": g} for n, g in placed.items()],
            }
        )
    return {"cluster_id": cluster_id, "now": now, "nodes": snapshot_nodes, "jobs": jobs}


def bindings_of(decision: dict[str, Any], pods: Iterable[client.V1Pod]) -> list[tuple[Any, str]]:
    """(pod, node) for every waiting pod of a job the decision places: one per worker slot."""
    waiting: dict[str, list[client.V1Pod]] = defaultdict(list)
    taken: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        if pod.spec.scheduler_name != SCHEDULER:
            continue
        if pod.spec.node_name:
            taken[job_of(pod)][pod.spec.node_name] += 1
        elif pod.status.phase == "Pending":
            waiting[job_of(pod)].append(pod)
    bindings = []
    for entry in decision["placement"]:
        pods_left = waiting.get(entry["job_id"], [])
        if not pods_left:
            continue
        gpus = max(_gpus(pods_left[0]), 1)
        for assignment in entry["assignments"]:
            slots = len(assignment["gpu_indices"]) // gpus
            slots -= taken[entry["job_id"]][assignment["node_id"]]  # already running there
            for _ in range(max(slots, 0)):
                if pods_left:
                    bindings.append((pods_left.pop(0), assignment["node_id"]))
    return bindings


def finished_events(pods: Iterable[client.V1Pod], cluster_id: str) -> list[dict[str, Any]]:
    """A `job_finished` event for each job whose pods have all ended (idempotent ids)."""
    by_job: dict[str, list[client.V1Pod]] = defaultdict(list)
    for pod in pods:
        if pod.spec.scheduler_name == SCHEDULER:
            by_job[job_of(pod)].append(pod)
    events = []
    for job_id, members in by_job.items():
        phases = {pod.status.phase for pod in members}
        if phases <= {"Succeeded", "Failed"}:
            ended = [
                c.state.terminated.finished_at.timestamp()
                for pod in members
                for c in pod.status.container_statuses or []
                if c.state and c.state.terminated and c.state.terminated.finished_at
            ]
            events.append(
                {
                    "event_id": f"{cluster_id}:{job_id}:finished",
                    "kind": "job_finished",
                    "cluster_id": cluster_id,
                    "job_id": job_id,
                    "finished_at": max(ended, default=time.time()),
                    "outcome": "completed" if phases == {"Succeeded"} else "failed",
                }
            )
    return events


def run(arbiter: str, profile: str, cluster_id: str, period_s: float) -> None:
    if _in_cluster():
        config.load_incluster_config()
    else:
        config.load_kube_config()
    core = client.CoreV1Api()
    with httpx.Client(base_url=arbiter, timeout=10.0) as http:
        while True:
            nodes = core.list_node().items
            pods = core.list_pod_for_all_namespaces().items
            snapshot = snapshot_of(nodes, pods, cluster_id, time.time())
            try:
                answer = http.post("/v1/decisions", json={"profile": profile, "snapshot": snapshot})
                answer.raise_for_status()
            except httpx.HTTPError as error:  # Arbiter slow or down: bind nothing, try again
                print(f"no decision this round: {error}")
                time.sleep(period_s)
                continue
            for pod, node in bindings_of(answer.json(), pods):
                binding = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=pod.metadata.name, uid=pod.metadata.uid),
                    target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
                )
                core.create_namespaced_binding(
                    pod.metadata.namespace, binding, _preload_content=False
                )
            events = finished_events(pods, cluster_id)
            if events:
                http.post("/v1/feedback", json={"events": events})
            time.sleep(period_s)


def _in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arbiter", default="http://127.0.0.1:8000")
    parser.add_argument("--profile", default="fifo-backfill")
    parser.add_argument("--cluster-id", default="kubernetes")
    parser.add_argument("--period", type=float, default=5.0, help="Seconds between rounds.")
    args = parser.parse_args()
    run(args.arbiter, args.profile, args.cluster_id, args.period)


if __name__ == "__main__":
    main()
