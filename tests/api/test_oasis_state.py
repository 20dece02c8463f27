"""The oasis profile over HTTP: its policy state persists per cluster, in process and on Redis."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from fastapi.testclient import TestClient

from app.main import create_app
from app.services.decisions import DecisionService, state_cache_key
from app.settings import Settings
from storage.cache import Cache, Callback, Unsubscribe
from tests.api.state_helpers import SLOT_S, one_job_snapshot


def snapshot(cluster_id: str) -> dict[str, Any]:
    return one_job_snapshot(cluster_id, node_id="n0")


def decide(client: TestClient, cluster_id: str, profile: str = "oasis") -> dict[str, Any]:
    response = client.post(
        "/v1/decisions", json={"profile": profile, "snapshot": snapshot(cluster_id)}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def verdict(decision: dict[str, Any]) -> dict[str, Any]:
    (entry,) = decision["admission"]
    assert isinstance(entry, dict)
    return entry


def _per_slot(entry: dict[str, Any]) -> dict[int, int]:
    """Workers of the committed plan in each slot."""
    return {
        slot: segment["workers"]
        for segment in entry["details"]["plan"]["segments"]
        for slot in range(segment["first"], segment["until"])
    }


def _assert_state_persists_per_cluster(
    first_client: TestClient, second_client: TestClient, cluster: str
) -> None:
    first = verdict(decide(first_client, cluster))
    assert first["admitted"]
    assert "utility 10" in first["reason"]
    assert first["details"]["plan"]["segments"]

    # The caller did not mark the job admitted: the next round recognises the commitment.
    again = decide(second_client, cluster)
    assert verdict(again)["admitted"]
    assert "already committed" in verdict(again)["reason"]
    # The same schedule (the current slot now recorded apart, as what runs).
    assert _per_slot(verdict(again)) == _per_slot(first)
    (scaling,) = again["scaling"]
    assert scaling["workers"] == 2
    assert "OASiS schedule" in scaling["reason"]

    # Another cluster knows nothing of it.
    elsewhere = verdict(decide(second_client, f"{cluster}-other"))
    assert elsewhere["admitted"]
    assert "already committed" not in elsewhere["reason"]


def test_state_persists_across_decisions_of_one_cluster_in_process(client: TestClient) -> None:
    _assert_state_persists_per_cluster(client, client, "in-process")


class CountingCache:
    """A cache that counts calls, to see who touches it."""

    def __init__(self, inner: Cache) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    @property
    def backend(self) -> str:
        return self.inner.backend

    def get(self, key: str) -> bytes | None:
        self.calls.append(("get", key))
        return self.inner.get(key)

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self.calls.append(("set", key))
        self.inner.set(key, value, ttl_s)

    def expire(self, key: str, ttl_s: float | None = None) -> bool:
        self.calls.append(("expire", key))
        return self.inner.expire(key, ttl_s)

    def delete(self, key: str) -> bool:
        self.calls.append(("delete", key))
        return self.inner.delete(key)

    def publish(self, channel: str, message: bytes) -> None:
        self.inner.publish(channel, message)

    def subscribe(self, channel: str, callback: Callback) -> Unsubscribe:
        return self.inner.subscribe(channel, callback)

    def ping(self) -> bool:
        return self.inner.ping()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def counting(client: TestClient) -> Iterator[CountingCache]:
    service: DecisionService = client.app.state.services.decisions  # type: ignore[attr-defined]
    original = service.cache
    spy = CountingCache(original)
    service.cache = spy
    yield spy
    service.cache = original


def test_stateless_profiles_never_touch_the_cache(
    client: TestClient, counting: CountingCache
) -> None:
    for profile in ("fifo", "srtf", "optimus"):
        decide(client, "quiet", profile)
    assert counting.calls == []


def test_tiresias_keeps_its_promotions_under_its_own_key(
    client: TestClient, counting: CountingCache
) -> None:
    decide(client, "ranked", "tiresias")
    key = state_cache_key("ranked", "tiresias")
    assert counting.calls == [("get", key), ("set", key)]


def test_the_oasis_profile_reads_then_writes_its_key(
    client: TestClient, counting: CountingCache
) -> None:
    decide(client, "busy")
    key = state_cache_key("busy", "oasis")
    assert counting.calls == [("get", key), ("set", key)]
    stored = counting.inner.get(key)
    assert stored is not None
    state = orjson.loads(stored)
    assert list(state["jobs"]) == ["train"]
    assert state["slot_s"] == SLOT_S


def test_a_stage_subset_keeps_the_state_too(client: TestClient, counting: CountingCache) -> None:
    response = client.post(
        "/v1/decisions/admission", json={"profile": "oasis", "snapshot": snapshot("subset")}
    )
    assert response.status_code == 200
    assert ("set", state_cache_key("subset", "oasis")) in counting.calls


def test_unreadable_state_in_the_cache_is_ignored(
    client: TestClient, counting: CountingCache
) -> None:
    counting.inner.set(state_cache_key("garbled", "oasis"), b"{not json")
    assert verdict(decide(client, "garbled"))["admitted"]


# -- on Redis: two replicas share the state --------------------------------------------------


def _redis_settings(tmp_path: Path, name: str, redis_url: str) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / f'{name}.db'}",
        redis_url=redis_url,
        spill_dir=tmp_path / f"spill-{name}",
        log_flush_interval_s=0.05,
    )


@pytest.fixture
def redis_cluster(redis_url: str) -> Iterator[tuple[str, Callable[[], list[bytes]]]]:
    """A cluster id of this test's own; its keys are deleted afterwards."""
    cluster = f"oasis-test-{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(redis_url)

    def keys() -> list[bytes]:
        return sorted(client.scan_iter(match=f"arbiter:state:{cluster}*"))

    try:
        yield cluster, keys
    finally:
        found = keys()
        if found:
            client.delete(*found)
        client.close()


def test_state_is_shared_by_replicas_through_redis(
    tmp_path: Path, redis_url: str, redis_cluster: tuple[str, Callable[[], list[bytes]]]
) -> None:
    cluster, keys = redis_cluster
    with (
        TestClient(create_app(_redis_settings(tmp_path, "a", redis_url))) as replica_a,
        TestClient(create_app(_redis_settings(tmp_path, "b", redis_url))) as replica_b,
    ):
        assert replica_a.get("/readyz").json()["components"]["cache"]["detail"] == "redis"
        _assert_state_persists_per_cluster(replica_a, replica_b, cluster)

    assert keys() == sorted(
        [f"arbiter:state:{cluster}:oasis".encode(), f"arbiter:state:{cluster}-other:oasis".encode()]
    )
    stored = redis.Redis.from_url(redis_url).get(f"arbiter:state:{cluster}:oasis")
    assert isinstance(stored, bytes)
    assert list(orjson.loads(stored)["jobs"]) == ["train"]
