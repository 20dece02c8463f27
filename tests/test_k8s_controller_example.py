"""The scheduler loop of docs/integration.md (examples/k8s_controller.py), round by round.

Its pods and nodes are the official client's models, as `list_pod_for_all_namespaces`
returns them; its decisions come from the service itself.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes.client import (
    V1Container,
    V1ContainerState,
    V1ContainerStateTerminated,
    V1ContainerStatus,
    V1Node,
    V1NodeCondition,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from app.main import create_app
from app.settings import Settings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "k8s_controller.py"
CREATED = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_controller", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def controller() -> ModuleType:
    return load_example()


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def node(name: str, gpus: int) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"nvidia.com/gpu.product": "A100"}),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            allocatable={"nvidia.com/gpu": str(gpus)},
            conditions=[V1NodeCondition(type="Ready", status="True")],
        ),
    )


def pod(  # noqa: PLR0917 - a pod's few facts, in the order the tests read them
    name: str, job: str, gang: int, gpus: int, node_name: str | None = None, phase: str = "Pending"
) -> V1Pod:
    finished = V1ContainerStatus(
        name="main",
        image="trainer",
        image_id="",
        ready=False,
        restart_count=0,
        state=V1ContainerState(
            terminated=V1ContainerStateTerminated(exit_code=0, finished_at=CREATED)
        ),
    )
    return V1Pod(
        metadata=V1ObjectMeta(
            name=name,
            namespace="ml",
            uid=f"uid-{name}",
            labels={"arbiter.io/job": job, "arbiter.io/gang-size": str(gang)},
            creation_timestamp=CREATED,
        ),
        spec=V1PodSpec(
            scheduler_name="arbiter",
            node_name=node_name,
            containers=[
                V1Container(
                    name="main",
                    resources=V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
                )
            ],
        ),
        status=V1PodStatus(
            phase=phase, container_statuses=[finished] if phase == "Succeeded" else None
        ),
    )


def decide(arbiter: TestClient, snapshot: dict[str, Any]) -> dict[str, Any]:
    response = arbiter.post(
        "/v1/decisions", json={"profile": "fifo-backfill", "snapshot": snapshot}
    )
    assert response.status_code == 200, response.text
    decision: dict[str, Any] = response.json()
    return decision


def test_a_round_binds_each_placed_gang_whole_and_leaves_the_rest_waiting(
    controller: ModuleType, arbiter: TestClient
) -> None:
    nodes = [node("a", 8), node("b", 8)]
    pods = [
        pod("running-0", "running", 1, 4, node_name="a", phase="Running"),
        *(pod(f"gang-{i}", "gang", 3, 4) for i in range(3)),  # 12 GPUs: fits in 4 + 8
        *(pod(f"late-{i}", "late", 2, 4) for i in range(2)),  # 8 more: no room left
    ]
    snapshot = controller.snapshot_of(nodes, pods, "kubernetes", 1000.0)
    decision = decide(arbiter, snapshot)
    bindings = controller.bindings_of(decision, pods)
    bound = sorted((p.metadata.name, n) for p, n in bindings)
    assert [name for name, _ in bound] == ["gang-0", "gang-1", "gang-2"]
    per_node: dict[str, int] = {}
    for _, node_name in bound:
        per_node[node_name] = per_node.get(node_name, 0) + 4
    assert per_node.get("a", 0) <= 4  # 4 of node a's 8 GPUs are the running pod's
    assert sum(per_node.values()) == 12
    late = next(p for p in decision["pending"] if p["job_id"] == "late")
    assert late["reason"]


def test_finished_jobs_are_reported_as_feedback_once_all_their_pods_end(
    controller: ModuleType, arbiter: TestClient
) -> None:
    pods = [
        pod("done-0", "done", 2, 1, node_name="a", phase="Succeeded"),
        pod("done-1", "done", 2, 1, node_name="a", phase="Succeeded"),
        pod("half-0", "half", 2, 1, node_name="b", phase="Succeeded"),
        pod("half-1", "half", 2, 1, node_name="b", phase="Running"),
    ]
    events = controller.finished_events(pods, "kubernetes")
    assert [e["job_id"] for e in events] == ["done"]
    assert events[0]["finished_at"] == CREATED.timestamp()
    for _ in range(2):  # the same round twice: the event id makes it count once
        response = arbiter.post("/v1/feedback", json={"events": events})
        assert response.status_code == 202
