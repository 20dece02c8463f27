"""Throughput feedback teaches the dual agent's GP once per event id (DESIGN §4: idempotent).

On the in-process cache and on real Redis: the service is stateless, so the ids a
cluster's learners folded in are kept in the cache beside the GP state
(`learned-events:{cluster_id}`), bounded to the most recent ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.metrics import Metrics
from app.services.decisions import DecisionService, learned_events_cache_key, state_cache_key
from policies.profiles import load_profiles
from policies.registry import build_registry
from storage.cache import Cache, InProcessCache, RedisCache
from storage.records import DecisionRecord, FeedbackRecord
from tests.api.state_helpers import CACHES, app_on_cache, decision_service, seen
from tests.api.state_helpers import throughput_event as throughput


@pytest.fixture(params=CACHES)
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    yield from app_on_cache(request, tmp_path)


def post(client: TestClient, *events: dict[str, Any]) -> None:
    response = client.post("/v1/feedback", json={"events": list(events)})
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": len(events)}


def gp_state(client: TestClient, cluster_id: str) -> bytes | None:
    """The cluster's `rwgp` state as the cache holds it (Redis itself, when there is one)."""
    return decision_service(client).cache.get(state_cache_key(cluster_id, "rwgp"))


def weight_of_n1(client: TestClient, cluster_id: str) -> float:
    raw = gp_state(client, cluster_id)
    assert raw is not None
    weight: float = orjson.loads(raw)["nodes"]["n1"][0]
    return weight


def test_a_retried_request_leaves_the_gp_as_the_original_alone(client: TestClient) -> None:
    post(client, throughput("once-1", "once"), throughput("once-2", "once", 80.0))
    post(client, throughput("retry-1", "retried"), throughput("retry-2", "retried", 80.0))
    post(client, throughput("retry-1", "retried"), throughput("retry-2", "retried", 80.0))

    assert gp_state(client, "once") is not None
    assert gp_state(client, "retried") == gp_state(client, "once")
    assert weight_of_n1(client, "retried") == 2.0


def test_an_event_twice_in_one_request_is_learned_once(client: TestClient) -> None:
    post(client, throughput("once-1", "once"))
    post(client, throughput("twice-1", "twice"), throughput("twice-1", "twice"))

    assert gp_state(client, "once") is not None
    assert gp_state(client, "twice") == gp_state(client, "once")


def test_a_retry_after_later_events_adds_nothing(client: TestClient) -> None:
    post(client, throughput("once-1", "once"))
    post(client, throughput("once-2", "once", 90.0))
    post(client, throughput("late-1", "late"))
    post(client, throughput("late-2", "late", 90.0))
    post(client, throughput("late-1", "late"), throughput("late-3", "late", 120.0))
    post(client, throughput("once-3", "once", 120.0))

    assert gp_state(client, "late") == gp_state(client, "once")


def test_a_new_event_id_with_the_same_content_is_a_second_observation(
    client: TestClient,
) -> None:
    post(client, throughput("first", "repeated"))
    once = gp_state(client, "repeated")
    post(client, throughput("second", "repeated"))

    assert gp_state(client, "repeated") != once
    assert weight_of_n1(client, "repeated") == 2.0


class _NoLog:
    def submit_decision(self, record: DecisionRecord) -> None:
        raise AssertionError("learning logs nothing")

    def submit_feedback(self, record: FeedbackRecord) -> None:
        raise AssertionError("learning logs nothing")


def _dual_agent_service(cache: Cache, learned_events_kept: int) -> DecisionService:
    registry = build_registry()
    profiles = {"dual-agent": load_profiles(registry)["dual-agent"]}
    return DecisionService(
        registry, profiles, _NoLog(), Metrics(), cache, learned_events_kept=learned_events_kept
    )


@pytest.fixture(params=CACHES)
def cache(request: pytest.FixtureRequest) -> Iterator[Cache]:
    made: Cache
    if request.param == "redis":
        made = RedisCache(
            request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix")
        )
    else:
        made = InProcessCache()
    yield made
    made.close()


def weight_in(cache: Cache, cluster_id: str) -> float:
    raw = cache.get(state_cache_key(cluster_id, "rwgp"))
    assert raw is not None
    weight: float = orjson.loads(raw)["nodes"]["n1"][0]
    return weight


def test_the_bound_drops_the_oldest_ids_first(cache: Cache) -> None:
    service = _dual_agent_service(cache, learned_events_kept=3)
    for event_id in ("e1", "e2", "e3", "e4"):
        service.learn("c", {event_id: seen()})
    remembered = cache.get(learned_events_cache_key("c"))

    service.learn("c", {"e2": seen(), "e3": seen(), "e4": seen()})
    after_recent_retries = weight_in(cache, "c")
    service.learn("c", {"e1": seen()})  # the oldest, no longer remembered: learned again
    after_oldest_retried = weight_in(cache, "c")
    service.learn("c", {"e2": seen()})  # the oldest now that e1 is remembered again
    service.learn("c", {"e4": seen()})

    assert remembered is not None
    assert len(remembered) == 3 * 8  # one 8-byte digest per remembered id
    assert after_recent_retries == 4.0
    assert after_oldest_retried == 5.0
    assert weight_in(cache, "c") == 6.0


def test_unreadable_learned_ids_are_ignored(cache: Cache, caplog: pytest.LogCaptureFixture) -> None:
    service = _dual_agent_service(cache, learned_events_kept=10)
    cache.set(learned_events_cache_key("c"), b"not a multiple of eight")

    service.learn("c", {"e1": seen()})
    service.learn("c", {"e1": seen()})

    assert weight_in(cache, "c") == 1.0
    assert "unreadable learned event ids" in caplog.text


def test_with_redis_down_ids_are_remembered_in_process() -> None:
    # Nothing listens on port 1: the cache serves from memory (storage/cache.py).
    down = RedisCache("redis://127.0.0.1:1", socket_timeout_s=0.2, retry_initial_s=60.0)
    try:
        service = _dual_agent_service(down, learned_events_kept=10)
        service.learn("c", {"e1": seen()})
        service.learn("c", {"e1": seen(), "e2": seen()})

        assert down.degraded
        assert weight_in(down, "c") == 2.0
    finally:
        down.close()
