"""A snapshot with field-level errors also has its cross-field problems listed, in one 422.

The decoder refuses the body at its first bad field; the answer still lists every field
problem (from the published schema) and every cross-field problem of the parts that do
decode, each at the JSON path the caller sent.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient

from tests.api.conftest import small_snapshot
from tests.api.test_reclaim import lent_snapshot


def _paths(response: Any) -> dict[str, str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_request"
    return {p["path"]: p["message"] for p in body["problems"]}


def _one_field_and_two_cross_field_errors() -> dict[str, Any]:
    snapshot = small_snapshot()
    snapshot["jobs"][1]["workers"] = "many"  # field-level
    snapshot["jobs"][2]["id"] = "running"  # duplicate of jobs[0]
    snapshot["jobs"][0]["placement"][0]["node_id"] = "ghost"  # unknown node
    return snapshot


def test_a_field_error_and_two_cross_field_errors_come_in_one_answer(
    client: TestClient,
) -> None:
    body = {"profile": "fifo", "snapshot": _one_field_and_two_cross_field_errors()}

    problems = _paths(client.post("/v1/decisions", json=body))

    assert set(problems) == {
        "snapshot.jobs[1].workers",
        "snapshot.jobs[2].id",
        "snapshot.jobs[0].placement[0].node_id",
    }
    assert problems["snapshot.jobs[2].id"] == "duplicate job id 'running'"
    assert problems["snapshot.jobs[0].placement[0].node_id"] == "unknown node 'ghost'"


def test_a_stage_endpoint_lists_every_problem_too(client: TestClient) -> None:
    body = {"profile": "fifo", "snapshot": _one_field_and_two_cross_field_errors()}

    problems = _paths(client.post("/v1/decisions/placement", json=body))

    assert len(problems) == 3


def test_the_detail_counts_every_problem(client: TestClient) -> None:
    body = {"profile": "fifo", "snapshot": _one_field_and_two_cross_field_errors()}

    detail = client.post("/v1/decisions", json=body).json()["detail"]

    assert detail.startswith("3 problem(s) in the request")


def test_cross_field_paths_count_the_broken_parts_that_were_left_out(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["nodes"][0]["gpus"] = -1  # broken: left out of the cross-field checks
    snapshot["nodes"].append(copy.deepcopy(snapshot["nodes"][1]))  # nodes[2] repeats n1
    snapshot["jobs"] = snapshot["jobs"][1:]  # none placed on the broken node

    problems = _paths(client.post("/v1/decisions", json={"profile": "fifo", "snapshot": snapshot}))

    assert set(problems) == {"snapshot.nodes[0].gpus", "snapshot.nodes[2].id"}
    assert problems["snapshot.nodes[2].id"] == "duplicate node id 'n1'"


def test_a_job_on_a_broken_node_is_not_called_a_job_on_an_unknown_node(
    client: TestClient,
) -> None:
    snapshot = small_snapshot()
    snapshot["nodes"][0]["gpu_type"] = 7  # the job `running` sits on n0

    problems = _paths(client.post("/v1/decisions", json={"profile": "fifo", "snapshot": snapshot}))

    assert list(problems) == ["snapshot.nodes[0].gpu_type"]


def test_gpus_held_twice_are_found_beside_a_broken_tenant(client: TestClient) -> None:
    snapshot = small_snapshot()
    thief = copy.deepcopy(snapshot["jobs"][0])
    thief["id"] = "thief"
    snapshot["jobs"].append(thief)
    snapshot["tenants"] = [{"id": "team-a", "weight": 0}]

    problems = _paths(client.post("/v1/decisions", json={"profile": "fifo", "snapshot": snapshot}))

    assert "snapshot.tenants[0].weight" in problems
    held_twice = problems["snapshot.jobs[3].placement[0].gpu_indices[0]"]
    assert "already used by job 'running'" in held_twice


def test_a_broken_envelope_still_lists_the_snapshots_own_problems(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][2]["id"] = "big"

    problems = _paths(
        client.post("/v1/decisions", json={"profile": "fifo", "seed": -1, "snapshot": snapshot})
    )

    assert set(problems) == {"seed", "snapshot.jobs[2].id"}


def test_reclaim_lists_field_and_cross_field_problems_in_one_answer(client: TestClient) -> None:
    snapshot = lent_snapshot()
    snapshot["nodes"][0]["gpus"] = "eight"  # field-level
    snapshot["nodes"][2]["id"] = "i0"  # duplicate node id
    snapshot["jobs"][1]["placement"][0]["node_id"] = "nowhere"  # unknown node

    problems = _paths(
        client.post("/v1/reclaim", json={"profile": "aryl", "snapshot": snapshot, "count": 1})
    )

    assert set(problems) == {
        "snapshot.nodes[0].gpus",
        "snapshot.nodes[2].id",
        "snapshot.jobs[1].placement[0].node_id",
    }


def test_ids_that_are_not_text_are_422s_naming_each(client: TestClient) -> None:
    # Found by fuzzing the served spec: a node id sent as an object was a server error.
    snapshot = small_snapshot()
    snapshot["nodes"][0]["id"] = {}  # the job `running` sits on n0
    snapshot["nodes"][1]["id"] = ["n1"]
    snapshot["jobs"][1]["id"] = {"id": "j"}
    snapshot["jobs"][0]["placement"][0]["node_id"] = []

    for path in ("/v1/decisions", "/v1/decisions/placement"):
        problems = _paths(client.post(path, json={"profile": "fifo", "snapshot": snapshot}))

        assert set(problems) == {
            "snapshot.nodes[0].id",
            "snapshot.nodes[1].id",
            "snapshot.jobs[1].id",
            "snapshot.jobs[0].placement[0].node_id",
        }


def test_a_reclaim_with_a_node_id_that_is_not_text_is_a_422(client: TestClient) -> None:
    snapshot = lent_snapshot()
    snapshot["nodes"][0]["id"] = {"name": "i0"}

    problems = _paths(
        client.post("/v1/reclaim", json={"profile": "aryl", "snapshot": snapshot, "count": 1})
    )

    assert "snapshot.nodes[0].id" in problems
