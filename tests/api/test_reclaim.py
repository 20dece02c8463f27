"""POST /v1/reclaim: loaned servers back to inference, with every error the route documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import create_engine, text

from app.settings import Settings
from policies.decision import Stage
from policies.model import Snapshot, convert
from policies.protocols import Context, NoParams
from policies.reclaim_models import ReclaimRequest, ReclaimResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reclaim.json"


def lent_snapshot() -> dict[str, Any]:
    """One training node and two loaned servers: i0 holds an elastic job's extra workers,
    i1 a rigid job; `serving` is an inference server not lent."""
    return {
        "cluster_id": "lent",
        "now": 500.0,
        "nodes": [
            {"id": "t0", "gpu_type": "V100", "gpus": 8},
            {"id": "i0", "gpu_type": "T4", "gpus": 4, "pool": "inference", "loaned": True},
            {"id": "i1", "gpu_type": "T4", "gpus": 4, "pool": "inference", "loaned": True},
            {"id": "serving", "gpu_type": "T4", "gpus": 4, "pool": "inference"},
        ],
        "jobs": [
            {
                "id": "elastic",
                "state": "running",
                "workers": 4,
                "min_workers": 4,
                "max_workers": 8,
                "placement": [
                    {"node_id": "t0", "gpu_indices": [0, 1, 2, 3]},
                    {"node_id": "i0", "gpu_indices": [0, 1]},
                ],
            },
            {
                "id": "rigid",
                "state": "running",
                "workers": 1,
                "placement": [{"node_id": "i1", "gpu_indices": [0]}],
            },
        ],
    }


def post(client: TestClient, body: Any) -> Any:
    return client.post("/v1/reclaim", json=body)


def problems(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] in {"invalid_request", "invalid_snapshot"}
    return [f"{p['path']}: {p['message']}" for p in body["problems"]]


def test_example_file_gives_a_valid_answer(client: TestClient) -> None:
    request = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    snapshot = convert(request["snapshot"], Snapshot)
    loaned = {n.id for n in snapshot.nodes if n.loaned}

    response = post(client, request)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer["servers"]) == 2
    assert set(answer["servers"]) <= loaned
    assert answer["policy"] == {"name": "aryl", "version": "1"}
    assert answer["profile"] == "aryl"
    assert answer["decision_id"]
    # The example's loaned servers with only elastic extras go first: nobody is preempted.
    assert answer["preempt"] == []
    assert answer["cost"] == 0
    assert answer["shrink"]
    jobs = snapshot.jobs_by_id
    for entry in answer["shrink"]:
        job = jobs[entry["job_id"]]
        assert job.accepts_workers(entry["workers"])
        assert {a["node_id"] for a in entry["assignments"]}.isdisjoint(answer["servers"])
    assert set(answer["reasons"]["servers"]) == set(answer["servers"])


def test_aryl_shrinks_where_the_default_reclaim_preempts(client: TestClient) -> None:
    aryl = post(client, {"profile": "aryl", "snapshot": lent_snapshot(), "count": 1}).json()

    assert aryl["servers"] == ["i0"]
    assert aryl["shrink"] == [
        {
            "job_id": "elastic",
            "workers": 4,
            "assignments": [{"node_id": "t0", "gpu_indices": [0, 1, 2, 3]}],
        }
    ]
    assert aryl["preempt"] == []
    assert aryl["cost"] == 0


def test_profile_without_aryl_answers_with_its_default_reclaim_policy(
    client: TestClient,
) -> None:
    response = post(client, {"profile": "fifo", "snapshot": lent_snapshot(), "count": 1})

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["policy"]["name"] == "fewest_jobs"
    # Both servers host one job; i1's holds fewer GPUs, and losing it preempts the job.
    assert answer["servers"] == ["i1"]
    assert answer["preempt"] == ["rigid"]
    assert answer["cost"] == 1
    assert answer["preempted_gpus"] == 1
    assert "preempted" in answer["reasons"]["jobs"]["rigid"]


def test_named_servers_are_returned_with_their_consequences(client: TestClient) -> None:
    body = {"profile": "aryl", "snapshot": lent_snapshot(), "node_ids": ["i1", "i0"]}

    answer = post(client, body).json()

    assert sorted(answer["servers"]) == ["i0", "i1"]
    assert answer["preempt"] == ["rigid"]
    assert [s["job_id"] for s in answer["shrink"]] == ["elastic"]
    assert answer["shortfall"] is None


def test_more_servers_than_loaned_returns_all_with_a_shortfall(client: TestClient) -> None:
    answer = post(client, {"profile": "aryl", "snapshot": lent_snapshot(), "count": 5}).json()

    assert sorted(answer["servers"]) == ["i0", "i1"]
    assert "only 2 are loaned" in answer["shortfall"]


def test_count_and_node_ids_together_are_422_naming_node_ids(client: TestClient) -> None:
    body = {"profile": "aryl", "snapshot": lent_snapshot(), "count": 1, "node_ids": ["i0"]}

    assert problems(post(client, body)) == ["node_ids: not allowed together with count"]


def test_neither_count_nor_node_ids_is_422_naming_count(client: TestClient) -> None:
    found = problems(post(client, {"profile": "aryl", "snapshot": lent_snapshot()}))

    assert found == ["count: count or node_ids is required"]


def test_unknown_or_unloaned_node_ids_are_422_with_their_index(client: TestClient) -> None:
    body = {
        "profile": "aryl",
        "snapshot": lent_snapshot(),
        "node_ids": ["i0", "ghost", "t0", "serving", "i0"],
    }

    found = problems(post(client, body))

    assert found == [
        "node_ids[1]: unknown node 'ghost'",
        "node_ids[2]: node 't0' is not loaned: it is a training node",
        "node_ids[3]: node 'serving' is not loaned: it is an inference server not lent",
        "node_ids[4]: node 'i0' is named twice",
    ]


def test_count_below_one_is_422(client: TestClient) -> None:
    found = problems(post(client, {"profile": "aryl", "snapshot": lent_snapshot(), "count": 0}))

    assert found[0].startswith("count:")


def test_invalid_snapshot_is_422_with_its_path(client: TestClient) -> None:
    snapshot = lent_snapshot()
    snapshot["jobs"][1]["placement"][0]["node_id"] = "ghost"

    found = problems(post(client, {"profile": "aryl", "snapshot": snapshot, "count": 1}))

    assert found == ["snapshot.jobs[1].placement[0].node_id: unknown node 'ghost'"]


def test_unknown_profile_is_404(client: TestClient) -> None:
    response = post(client, {"profile": "nope", "snapshot": lent_snapshot(), "count": 1})

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_oversized_body_is_413(client: TestClient) -> None:
    snapshot = lent_snapshot()
    snapshot["jobs"] += [{"id": f"pad-{i}", "model": "x" * 200} for i in range(400)]

    response = post(client, {"profile": "aryl", "snapshot": snapshot, "count": 1})

    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


class _ReturnsATrainingNode:
    name: ClassVar[str] = "broken"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.RECLAIM
    summary: ClassVar[str] = "Returns a node that is not loaned."
    source: ClassVar[str] = "test"
    Params: ClassVar[type[BaseModel]] = NoParams

    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        return ReclaimResult(servers=("t0",), cost=0.0)


def test_policy_that_breaks_the_contract_is_500(client: TestClient) -> None:
    services = client.app.state.services  # type: ignore[attr-defined]
    services.reclaim.policies["fifo"] = _ReturnsATrainingNode()

    response = post(client, {"profile": "fifo", "snapshot": lent_snapshot(), "count": 1})

    assert response.status_code == 500
    body = response.json()
    assert body["error"] == "policy_failed"
    assert "'t0', which is not a loaned server" in body["detail"]


def test_reclaims_are_logged_as_decisions_of_the_reclaim_stage(
    client: TestClient, settings: Settings
) -> None:
    answer = post(client, {"profile": "aryl", "snapshot": lent_snapshot(), "count": 1}).json()
    assert client.app.state.decision_log.flush(timeout_s=10.0)  # type: ignore[attr-defined]

    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT profile, cluster_id, stages FROM decisions WHERE decision_id = :id"),
            {"id": answer["decision_id"]},
        ).one()
    engine.dispose()
    stages = row[2] if isinstance(row[2], list) else json.loads(row[2])
    assert (row[0], row[1], stages) == ("aryl", "lent", ["reclaim"])


def test_metrics_count_reclaims(client: TestClient) -> None:
    post(client, {"profile": "aryl", "snapshot": lent_snapshot(), "count": 1})

    text_out = client.get("/metrics").text

    assert 'arbiter_decisions_total{endpoint="reclaim",profile="aryl"} 1.0' in text_out


def test_openapi_documents_the_reclaim_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    route = spec["paths"]["/v1/reclaim"]["post"]
    assert route["operationId"] == "create_reclaim"
    body = route["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ReclaimRequestBody"}
    assert body["example"]["profile"] == "aryl"
    assert {"200", "404", "413", "422", "500"} <= set(route["responses"])
    schemas = spec["components"]["schemas"]
    for name in ("ReclaimRequestBody", "ReclaimDecision", "ShrinkEntry", "ReclaimReasons"):
        assert name in schemas, name
    assert {"servers", "shrink", "preempt", "cost", "reasons"} <= set(
        schemas["ReclaimDecision"]["properties"]
    )


def test_reclaim_is_not_a_decision_stage(client: TestClient) -> None:
    body = {"profile": "fifo", "snapshot": lent_snapshot(), "stages": ["reclaim"]}

    found = problems(client.post("/v1/decisions", json=body))

    assert found[0].startswith("stages[0]:")
