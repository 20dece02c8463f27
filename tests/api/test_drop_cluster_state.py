"""`DELETE /admin/clusters/{cluster_id}/state` drops one cluster's policy state on purpose.

On the in-process cache and on real Redis: after a stateful decision and throughput
feedback, the drop removes exactly that cluster's keys (all of them, or only those named
by `key`), the next decision starts from empty state, and a second drop removes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from app.metrics import Metrics
from app.services.decisions import DecisionService, learned_events_cache_key, state_cache_key
from policies.profiles import load_profiles
from policies.registry import build_registry
from storage.cache import InProcessCache
from tests.api.state_helpers import (
    CACHES,
    KeptLog,
    app_on_cache,
    decision_service,
    one_job_snapshot,
    throughput_event,
)

TOKEN = "a-test-token-of-enough-length"
ALL_KEYS = ["oasis", "rwgp", "tiresias"]  # the state keys of the shipped profiles, sorted


@pytest.fixture(params=CACHES)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    yield from app_on_cache(request, tmp_path, admin_token=TOKEN)


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def oasis_reason(client: TestClient, cluster_id: str) -> str:
    """The admission reason OASiS gives the one job of a small cluster's snapshot."""
    snapshot = one_job_snapshot(cluster_id)
    response = client.post("/v1/decisions", json={"profile": "oasis", "snapshot": snapshot})
    assert response.status_code == 200, response.text
    (entry,) = response.json()["admission"]
    assert entry["admitted"]
    reason: str = entry["reason"]
    return reason


def feed(client: TestClient, cluster_id: str, event_id: str) -> None:
    response = client.post(
        "/v1/feedback", json={"events": [throughput_event(event_id, cluster_id)]}
    )
    assert response.status_code == 202, response.text


def with_state(client: TestClient, *clusters: str) -> None:
    """Give each cluster OASiS's committed schedule, a GP and a learned event id."""
    for cluster_id in clusters:
        assert "already committed" not in oasis_reason(client, cluster_id)
        feed(client, cluster_id, f"{cluster_id}-1")


def cache_keys(cluster_id: str) -> list[str]:
    return [
        state_cache_key(cluster_id, "oasis"),
        state_cache_key(cluster_id, "rwgp"),
        learned_events_cache_key(cluster_id),
    ]


def held(client: TestClient, cluster_id: str) -> list[str]:
    """Which of the cluster's keys the cache holds (Redis itself, when there is one)."""
    cache = decision_service(client).cache
    return [key for key in cache_keys(cluster_id) if cache.get(key) is not None]


def drop(client: TestClient, cluster_id: str, **params: Any) -> dict[str, Any]:
    response = client.delete(f"/admin/clusters/{cluster_id}/state", params=params, headers=_auth())
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_dropping_a_clusters_state_removes_its_keys_and_no_other_clusters(
    client: TestClient,
) -> None:
    with_state(client, "c", "other")
    assert held(client, "c") == cache_keys("c")
    other_before = [decision_service(client).cache.get(key) for key in cache_keys("other")]

    answer = drop(client, "c")

    assert answer == {
        "cluster_id": "c",
        "dropped": ["oasis", "rwgp", "learned-events"],
        "absent": ["tiresias"],  # no promotion was ever written
    }
    assert held(client, "c") == []
    assert [decision_service(client).cache.get(key) for key in cache_keys("other")] == other_before


@pytest.fixture(params=["redis"])
def redis_client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    yield from app_on_cache(request, tmp_path, admin_token=TOKEN)


def test_on_redis_the_drop_leaves_exactly_the_other_clusters_keys(
    redis_client: TestClient, redis_url: str, redis_prefix: str
) -> None:
    direct = redis.Redis.from_url(redis_url)
    try:
        with_state(redis_client, "c", "other")
        drop(redis_client, "c")
        # Only this test's prefix: keys other services share Redis with are not ours.
        names = {name.decode() for name in direct.scan_iter(match=f"{redis_prefix}*")}
    finally:
        direct.close()

    assert {name.removeprefix(redis_prefix) for name in names} == set(cache_keys("other"))


def test_the_next_decision_after_a_drop_starts_from_empty_state(client: TestClient) -> None:
    assert "already committed" not in oasis_reason(client, "c")
    assert "already committed" in oasis_reason(client, "c")

    drop(client, "c")

    assert "already committed" not in oasis_reason(client, "c")


def test_dropping_only_the_gp_keeps_the_rest_and_the_learned_event_ids(
    client: TestClient,
) -> None:
    with_state(client, "c")

    answer = drop(client, "c", key="rwgp")

    assert answer == {"cluster_id": "c", "dropped": ["rwgp"], "absent": []}
    oasis, gp, ids = cache_keys("c")
    assert held(client, "c") == [oasis, ids]
    assert "already committed" in oasis_reason(client, "c")
    # A late retry of an event from before the drop (the old hardware) is not learned
    # into the fresh GP; a new event is.
    feed(client, "c", "c-1")
    assert decision_service(client).cache.get(gp) is None
    feed(client, "c", "c-2")
    assert decision_service(client).cache.get(gp) is not None


def test_keys_can_be_repeated_and_each_is_reported_once(client: TestClient) -> None:
    with_state(client, "c")

    answer = drop(client, "c", key=["tiresias", "oasis", "tiresias"])

    assert answer == {"cluster_id": "c", "dropped": ["oasis"], "absent": ["tiresias"]}
    assert held(client, "c") == [state_cache_key("c", "rwgp"), learned_events_cache_key("c")]


def test_a_second_drop_is_200_and_drops_nothing(client: TestClient) -> None:
    with_state(client, "c")
    drop(client, "c")

    again = drop(client, "c")

    assert again == {
        "cluster_id": "c",
        "dropped": [],
        "absent": [*ALL_KEYS, "learned-events"],
    }


def test_an_unknown_key_is_422_naming_it_and_the_known_ones_and_drops_nothing(
    client: TestClient,
) -> None:
    with_state(client, "c")

    response = client.delete(
        "/admin/clusters/c/state", params={"key": ["rwgp", "gp"]}, headers=_auth()
    )

    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_request"
    (problem,) = body["problems"]
    assert problem["path"] == "query.key[1]"
    assert "'gp'" in problem["message"]
    assert "known: oasis, rwgp, tiresias" in problem["message"]
    assert held(client, "c") == cache_keys("c")


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [({}, 401, "unauthorized"), (_auth("not-the-right-token-at-all"), 403, "forbidden")],
    ids=["missing", "wrong"],
)
def test_a_drop_without_the_admin_token_is_refused_and_drops_nothing(
    client: TestClient, headers: dict[str, str], status: int, error: str
) -> None:
    with_state(client, "c")

    response = client.delete("/admin/clusters/c/state", headers=headers)

    assert response.status_code == status
    assert response.json()["error"] == error
    assert held(client, "c") == cache_keys("c")


def test_a_cluster_id_with_a_slash_is_reached_when_sent_encoded(client: TestClient) -> None:
    with_state(client, "team/a")

    answer = drop(client, "team%2Fa")

    assert answer["cluster_id"] == "team/a"
    assert answer["dropped"] == ["oasis", "rwgp", "learned-events"]
    assert held(client, "team/a") == []


def test_a_cluster_id_with_a_line_break_is_reached_too(client: TestClient) -> None:
    # The snapshot schema accepts any text as a cluster id, control characters included.
    with_state(client, "team\na")

    answer = drop(client, "team%0Aa")

    assert answer["cluster_id"] == "team\na"
    assert answer["dropped"] == ["oasis", "rwgp", "learned-events"]
    assert held(client, "team\na") == []


@pytest.mark.parametrize("cluster_id", ["", "c" * 256], ids=["empty", "overlong"])
def test_an_empty_or_overlong_cluster_id_is_422_naming_it(
    client: TestClient, cluster_id: str
) -> None:
    response = client.delete(f"/admin/clusters/{cluster_id}/state", headers=_auth())

    assert response.status_code == 422
    assert [p["path"] for p in response.json()["problems"]] == ["path.cluster_id"]


def test_the_spec_documents_the_drop_and_its_errors(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    operation = spec["paths"]["/admin/clusters/{cluster_id}/state"]["delete"]
    assert operation["operationId"] == "drop_cluster_state"
    assert {"200", "401", "403", "422"} <= set(operation["responses"])
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ClusterStateDroppedOut"
    }
    assert [(p["name"], p["in"]) for p in operation["parameters"]] == [
        ("cluster_id", "path"),
        ("key", "query"),
    ]


# -- the lock ---------------------------------------------------------------------------------


def test_a_drop_waits_for_the_round_that_holds_the_clusters_lock() -> None:
    registry = build_registry()
    service = DecisionService(
        registry,
        {"oasis": load_profiles(registry)["oasis"]},
        KeptLog(),
        Metrics(),
        InProcessCache(),
    )
    oasis_key = state_cache_key("c", "oasis")
    service.cache.set(oasis_key, b"{}")
    finished = threading.Event()

    def drop_in_background() -> None:
        service.drop_state("c")
        finished.set()

    lock = service._cluster_lock("c")  # what a stateful round or `learn` of "c" holds
    with lock:
        worker = threading.Thread(target=drop_in_background)
        worker.start()
        assert not finished.wait(0.2)
        assert service.cache.get(oasis_key) == b"{}"  # untouched while the round runs
    worker.join(5)

    assert finished.is_set()
    assert service.cache.get(oasis_key) is None
