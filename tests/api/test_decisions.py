"""POST /v1/decisions and the per-stage endpoints."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.conftest import small_snapshot


def post(client: TestClient, body: Any, path: str = "/v1/decisions") -> Any:
    return client.post(path, json=body)


def test_decision_places_jobs_and_explains_every_job(client: TestClient) -> None:
    response = post(client, {"profile": "fifo", "snapshot": small_snapshot()})

    assert response.status_code == 200
    decision = response.json()
    assert decision["profile"] == "fifo"
    assert decision["ordering"] == ["running", "big", "small"]
    placed = {p["job_id"]: p["assignments"] for p in decision["placement"]}
    assert placed["running"] == [{"node_id": "n0", "gpu_indices": [0, 1]}]
    assert placed["big"] == [{"node_id": "n1", "gpu_indices": [0, 1, 2, 3]}]
    assert placed["small"] == [{"node_id": "n0", "gpu_indices": [2]}]
    assert {e["job_id"] for e in decision["explanations"]} == {"running", "big", "small"}
    assert decision["policies"]["ordering"] == {"name": "fifo", "version": "1"}
    assert decision["fallback"] is None


@pytest.mark.parametrize("profile", ["fifo", "sjf", "srtf", "tiresias", "drf", "optimus"])
def test_every_required_profile_answers_with_a_valid_decision(
    client: TestClient, profile: str
) -> None:
    response = post(client, {"profile": profile, "snapshot": small_snapshot()})

    assert response.status_code == 200, response.text
    decision = response.json()
    used = [
        (a["node_id"], g)
        for p in decision["placement"]
        for a in p["assignments"]
        for g in a["gpu_indices"]
    ]
    assert len(used) == len(set(used))
    assert sorted(decision["ordering"]) == ["big", "running", "small"]


def test_stage_endpoint_runs_only_that_stage_and_its_prerequisites(client: TestClient) -> None:
    response = post(
        client, {"profile": "sjf", "snapshot": small_snapshot()}, "/v1/decisions/ordering"
    )

    assert response.status_code == 200
    decision = response.json()
    assert decision["stages"] == ["admission", "ordering"]
    assert decision["ordering"][1:] == ["small", "big"]
    assert decision["placement"] == []
    assert decision["scaling"] == []


def test_decision_with_stage_subset_in_body(client: TestClient) -> None:
    body = {"profile": "fifo", "snapshot": small_snapshot(), "stages": ["scaling"]}

    decision = post(client, body).json()

    assert decision["stages"] == ["admission", "ordering", "scaling"]
    assert [s["workers"] for s in decision["scaling"]] == [2, 4, 1]


def test_unknown_profile_is_404_naming_known_profiles(client: TestClient) -> None:
    response = post(client, {"profile": "nope", "snapshot": small_snapshot()})

    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "not_found"
    assert "nope" in body["detail"]
    assert "fifo" in body["detail"]


def test_unknown_stage_path_is_404(client: TestClient) -> None:
    response = post(
        client, {"profile": "fifo", "snapshot": small_snapshot()}, "/v1/decisions/everything"
    )

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def _problems(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == {"error", "detail", "problems"}
    return [f"{p['path']}: {p['message']}" for p in body["problems"]]


def test_duplicate_job_ids_are_422_with_path(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][2]["id"] = "big"

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[2].id: duplicate job id") for p in problems)


def test_placement_on_unknown_node_is_422_with_path(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][0]["placement"][0]["node_id"] = "ghost"

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert problems == ["snapshot.jobs[0].placement[0].node_id: unknown node 'ghost'"]


def test_gpu_used_twice_is_422_naming_both_jobs(client: TestClient) -> None:
    snapshot = small_snapshot()
    second = copy.deepcopy(snapshot["jobs"][0])
    second["id"] = "thief"
    snapshot["jobs"].append(second)

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(
        p.startswith("snapshot.jobs[3].placement[0].gpu_indices[0]") and "'running'" in p
        for p in problems
    )


def test_gpu_index_out_of_range_is_422(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][0]["placement"][0]["gpu_indices"] = [0, 9]

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[0].placement[0].gpu_indices[1]") for p in problems)


def test_negative_counts_are_422_with_path(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["nodes"][1]["gpus"] = -1
    snapshot["jobs"][1]["workers"] = -2

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.nodes[1].gpus") for p in problems)
    assert any(p.startswith("snapshot.jobs[1].workers") for p in problems)


def test_wrong_types_are_422_with_path(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][1]["workers"] = "many"
    snapshot["now"] = [1]

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[1].workers") for p in problems)
    assert any(p.startswith("snapshot.now") for p in problems)


def test_min_above_requested_is_422(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][1]["min_workers"] = 8

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[1].min_workers") for p in problems)


def test_malformed_json_is_422(client: TestClient) -> None:
    response = client.post(
        "/v1/decisions",
        content=b'{"profile": "fifo", "snapshot": {',
        headers={"content-type": "application/json"},
    )

    problems = _problems(response)
    assert any("malformed JSON" in p for p in problems)


def test_missing_and_unknown_keys_are_422(client: TestClient) -> None:
    problems = _problems(post(client, {"snapshot": small_snapshot(), "colour": "red"}))

    assert any(p.startswith("profile:") for p in problems)
    assert any(p.startswith("colour:") for p in problems)


def test_oversized_body_is_413(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"] += [{"id": f"pad-{i}", "workers": 1, "model": "x" * 200} for i in range(400)]

    response = post(client, {"profile": "fifo", "snapshot": snapshot})

    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


def test_oversized_chunked_body_is_413(client: TestClient) -> None:
    def chunks() -> Any:
        yield b'{"profile": "fifo", "snapshot": {"jobs": ['
        for _ in range(2000):
            yield b'{"id": "x", "workers": 1},' * 4
        yield b"]}}"

    response = client.post(
        "/v1/decisions", content=chunks(), headers={"content-type": "application/json"}
    )

    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


def test_a_chunked_body_is_counted_whatever_length_it_declares(client: TestClient) -> None:
    # Transfer-Encoding overrides Content-Length: a small declared length does not let a
    # large chunked body through uncounted.
    snapshot = small_snapshot()
    snapshot["jobs"] += [{"id": f"pad-{i}", "workers": 1, "model": "x" * 200} for i in range(400)]
    body = orjson.dumps({"profile": "fifo", "snapshot": snapshot})

    response = client.post(
        "/v1/decisions",
        content=body,
        headers={
            "content-type": "application/json",
            "content-length": "10",
            "transfer-encoding": "chunked",
        },
    )

    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"


def test_a_wrong_value_in_truncated_json_is_422_naming_both(client: TestClient) -> None:
    body = b'{"profile": "fifo", "snapshot": {"nodes": [{"id": "n0", "gpus": -1'

    response = client.post(
        "/v1/decisions", content=body, headers={"content-type": "application/json"}
    )

    assert response.status_code == 422
    problems = {p["path"]: p["message"] for p in response.json()["problems"]}
    assert "snapshot.nodes[0].gpus" in problems
    assert "malformed JSON" in problems["body"]


def test_a_worker_count_no_cluster_has_is_422_with_path(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][1]["max_workers"] = 10**20

    problems = _problems(post(client, {"profile": "oasis", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[1].max_workers") for p in problems)


def test_a_job_accepting_more_worker_counts_than_the_limit_is_422_naming_it(
    client: TestClient,
) -> None:
    # A million accepted counts in a few bytes held a `dl2` decision for seconds per job.
    snapshot = small_snapshot()
    snapshot["jobs"][1].update(workers=1000, min_workers=1, max_workers=1_000_000)

    for profile in ("dl2", "oasis"):
        problems = _problems(post(client, {"profile": profile, "snapshot": snapshot}))

        assert problems == [
            "snapshot.jobs[1].max_workers: accepts 1,000,000 worker counts (1 to 1000000 by "
            "1); at most 4,096: raise worker_step or narrow the range"
        ]


def test_a_wide_range_with_a_step_that_keeps_the_counts_few_is_accepted(
    client: TestClient,
) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][1].update(workers=8, min_workers=8, max_workers=800_000, worker_step=200)

    response = post(client, {"profile": "fifo", "snapshot": snapshot})

    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/decisions", "text/plain"),
        ("/v1/decisions", "application/x-www-form-urlencoded"),
        ("/v1/feedback", "application/xml"),
        ("/v1/reclaim", "text/plain; charset=utf-8"),
    ],
)
def test_a_body_declared_as_not_json_is_415(
    client: TestClient, path: str, content_type: str
) -> None:
    body = orjson.dumps({"profile": "fifo", "snapshot": small_snapshot()})

    response = client.post(path, content=body, headers={"content-type": content_type})

    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"


def test_json_with_a_charset_or_a_json_suffix_is_read(client: TestClient) -> None:
    body = orjson.dumps({"profile": "fifo", "snapshot": small_snapshot()})
    for content_type in ("application/json; charset=utf-8", "application/vnd.arbiter+json"):
        response = client.post(
            "/v1/decisions", content=body, headers={"content-type": content_type}
        )
        assert response.status_code == 200, content_type


def test_a_nul_character_anywhere_is_422_naming_each_place(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["jobs"][1]["id"] = "big\x00"
    snapshot["jobs"][2]["model"] = "res\x00net"

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.jobs[1].id:") for p in problems)
    assert any(p.startswith("snapshot.jobs[2].model:") for p in problems)


def test_ids_longer_than_the_log_stores_are_422(client: TestClient) -> None:
    snapshot = small_snapshot()
    snapshot["cluster_id"] = "c" * 256
    snapshot["jobs"][0]["id"] = "j" * 256

    problems = _problems(post(client, {"profile": "fifo", "snapshot": snapshot}))

    assert any(p.startswith("snapshot.cluster_id") for p in problems)
    assert any(p.startswith("snapshot.jobs[0].id") for p in problems)


def test_a_snapshot_over_the_configured_sizes_is_422_naming_the_limit(
    settings: Settings,
) -> None:
    small = settings.model_copy(update={"max_jobs": 2, "max_nodes": 1})
    with TestClient(create_app(small)) as limited:
        problems = _problems(post(limited, {"profile": "fifo", "snapshot": small_snapshot()}))

    assert "snapshot.jobs: 3 items; at most 2 (ARBITER_MAX_JOBS)" in problems
    assert "snapshot.nodes: 2 items; at most 1 (ARBITER_MAX_NODES)" in problems


def test_a_decision_past_its_cpu_budget_is_finished_by_heuristics_and_says_so(
    settings: Settings,
) -> None:
    # A budget of a nanosecond is spent before the first policy runs.
    tight = settings.model_copy(update={"decision_cpu_budget_ms": 1e-6})
    with TestClient(create_app(tight)) as budgeted:
        response = post(budgeted, {"profile": "oasis", "snapshot": small_snapshot()})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["fallback"]["policy"].startswith("accept_all")
    assert "CPU budget" in body["fallback"]["reason"]
    assert body["policies"]["admission"]["name"] == "accept_all"
    assert {entry["job_id"] for entry in body["placement"]} >= {"running"}


def test_the_default_cpu_budget_leaves_an_ordinary_decision_alone(client: TestClient) -> None:
    response = post(client, {"profile": "oasis", "snapshot": small_snapshot()})

    assert response.status_code == 200, response.text
    assert response.json()["fallback"] is None
