"""The cache: in-process semantics, Redis on the shared server, and Redis outages."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

from storage.cache import Cache, InProcessCache, RedisCache, create_cache
from tests.servers import ThrowawayRedis, free_port, wait_until


class Inbox:
    """Collects messages delivered to a subscriber callback (from any thread)."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self._arrived = threading.Condition()

    def __call__(self, message: bytes) -> None:
        with self._arrived:
            self.messages.append(message)
            self._arrived.notify_all()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[bytes]:
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.messages) >= count, timeout_s)
            return list(self.messages)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shared_redis_cache(redis_url: str, redis_prefix: str) -> Iterator[RedisCache]:
    cache = RedisCache(redis_url, prefix=redis_prefix)
    yield cache
    cache.close()


def test_in_process_cache_expires_keys_after_their_ttl() -> None:
    clock = FakeClock()
    cache = InProcessCache(clock=clock)
    cache.set("forever", b"1")
    cache.set("brief", b"2", ttl_s=5)

    clock.now += 4.9
    assert (cache.get("forever"), cache.get("brief")) == (b"1", b"2")
    clock.now += 0.2
    assert (cache.get("forever"), cache.get("brief")) == (b"1", None)
    cache.delete("forever")
    assert cache.get("forever") is None
    cache.set("gone", b"3", ttl_s=0)
    assert cache.get("gone") is None
    assert cache.ping()
    assert cache.backend == "memory"


def test_in_process_expire_restarts_a_keys_ttl_without_rewriting_it() -> None:
    clock = FakeClock()
    cache = InProcessCache(clock=clock)
    cache.set("state", b"s", ttl_s=5)

    clock.now += 4
    assert cache.expire("state", 5)
    clock.now += 4.9
    left = cache.entry("state")
    assert left is not None
    assert left[0] == b"s"
    assert left[1] == pytest.approx(0.1)
    clock.now += 0.2
    assert cache.get("state") is None
    assert not cache.expire("state", 5)  # an expired key is not revived
    assert not cache.expire("missing", 5)
    assert cache.get("missing") is None

    cache.set("kept", b"k", ttl_s=5)
    assert cache.expire("kept", None)
    clock.now += 1e9
    assert cache.entry("kept") == (b"k", None)
    assert cache.expire("kept", 0)
    assert cache.get("kept") is None


def test_in_process_delete_says_whether_the_key_was_there() -> None:
    clock = FakeClock()
    cache = InProcessCache(clock=clock)
    cache.set("kept", b"k")
    cache.set("brief", b"b", ttl_s=5)
    clock.now += 6

    assert cache.delete("kept")
    assert not cache.delete("kept")  # a second delete finds nothing
    assert not cache.delete("brief")  # expired, though not swept yet
    assert not cache.delete("missing")
    assert cache.get("kept") is None


def test_in_process_pubsub_delivers_until_unsubscribed() -> None:
    cache = InProcessCache()
    first, second = Inbox(), Inbox()
    unsubscribe_first = cache.subscribe("models", first)
    cache.subscribe("models", second)
    cache.subscribe("other", lambda _: pytest.fail("wrong channel"))

    cache.publish("models", b"v1")
    unsubscribe_first()
    unsubscribe_first()  # twice is harmless
    cache.publish("models", b"v2")

    assert first.messages == [b"v1"]
    assert second.messages == [b"v1", b"v2"]


def test_a_failing_subscriber_does_not_stop_the_others() -> None:
    def broken(_: bytes) -> None:
        raise RuntimeError("subscriber bug")

    cache = InProcessCache()
    inbox = Inbox()
    cache.subscribe("models", broken)
    cache.subscribe("models", inbox)

    cache.publish("models", b"v1")

    assert inbox.messages == [b"v1"]


def test_create_cache_picks_the_backend(redis_url: str) -> None:
    memory = create_cache(None)
    shared = create_cache(redis_url)
    try:
        assert isinstance(memory, Cache)
        assert isinstance(shared, Cache)
        assert (memory.backend, shared.backend) == ("memory", "redis")
    finally:
        shared.close()


def test_redis_cache_round_trip_on_shared_redis(
    shared_redis_cache: RedisCache, redis_url: str, redis_prefix: str
) -> None:
    cache = shared_redis_cache
    cache.set("policy-state:c1", b"\x00state")
    cache.set("brief", b"x", ttl_s=0.2)

    assert cache.get("policy-state:c1") == b"\x00state"
    assert cache.get("brief") == b"x"
    assert cache.get("missing") is None
    assert cache.ping()
    direct = redis.Redis.from_url(redis_url)
    try:
        assert direct.get(f"{redis_prefix}policy-state:c1") == b"\x00state"  # namespaced
        cache.delete("policy-state:c1")
        assert direct.exists(f"{redis_prefix}policy-state:c1") == 0
    finally:
        direct.close()
    wait_until(lambda: cache.get("brief") is None, 5, "the TTL to expire the key")


def test_redis_expire_restarts_a_keys_ttl_on_redis(
    shared_redis_cache: RedisCache, redis_url: str, redis_prefix: str
) -> None:
    cache = shared_redis_cache
    cache.set("state", b"s", ttl_s=100)
    direct = redis.Redis.from_url(redis_url)
    try:
        assert cache.expire("state", 1000)
        assert 990 < direct.ttl(f"{redis_prefix}state") <= 1000
        assert cache.expire("state", None)
        assert direct.ttl(f"{redis_prefix}state") == -1  # no expiry
        assert cache.get("state") == b"s"
        assert not cache.expire("missing", 1000)
        assert direct.exists(f"{redis_prefix}missing") == 0
        direct.delete(f"{redis_prefix}state")  # by another replica: the copy goes too
        assert not cache.expire("state", 1000)
        assert cache.get("state") is None
    finally:
        direct.close()


def test_redis_delete_says_whether_redis_had_the_key(
    shared_redis_cache: RedisCache, redis_url: str, redis_prefix: str
) -> None:
    cache = shared_redis_cache
    cache.set("state", b"s")
    direct = redis.Redis.from_url(redis_url)
    try:
        direct.set(f"{redis_prefix}elsewhere", b"e")  # written by another replica

        assert cache.delete("state")
        assert not cache.delete("state")
        assert cache.delete("elsewhere")  # Redis answers, not the copy
        assert not cache.delete("missing")
        assert direct.exists(f"{redis_prefix}state", f"{redis_prefix}elsewhere") == 0
    finally:
        direct.close()


def test_pubsub_delivers_between_two_redis_caches(redis_url: str, redis_prefix: str) -> None:
    publisher = RedisCache(redis_url, prefix=redis_prefix)
    subscriber = RedisCache(redis_url, prefix=redis_prefix)
    inbox = Inbox()
    try:
        unsubscribe = subscriber.subscribe("active-model", inbox)
        publisher.publish("active-model", b"dl2:v7")
        assert inbox.wait_for(1) == [b"dl2:v7"]

        unsubscribe()
        # After unsubscribing, nothing more arrives (checked after a marker that does).
        marker = Inbox()
        subscriber.subscribe("marker", marker)
        publisher.publish("active-model", b"dl2:v8")
        publisher.publish("marker", b"done")
        assert marker.wait_for(1) == [b"done"]
        assert inbox.messages == [b"dl2:v7"]
    finally:
        publisher.close()
        subscriber.close()


def test_redis_outage_falls_back_to_memory_and_reconnects(throwaway_redis: ThrowawayRedis) -> None:
    cache = RedisCache(throwaway_redis.url, prefix="t:", retry_initial_s=0.05, retry_max_s=0.2)
    other = RedisCache(throwaway_redis.url, prefix="t:", retry_initial_s=0.05, retry_max_s=0.2)
    inbox = Inbox()
    try:
        cache.set("model", b"v1")
        cache.set("state", b"s1")
        cache.subscribe("changes", inbox)
        assert cache.get("model") == b"v1"

        throwaway_redis.kill()

        assert cache.get("model") == b"v1"  # from memory, without raising
        assert cache.degraded
        cache.set("model", b"v2")
        cache.delete("state")
        cache.set("during-outage", b"d")
        assert (cache.get("model"), cache.get("state"), cache.get("during-outage")) == (
            b"v2",
            None,
            b"d",
        )
        assert cache.ping() is False
        cache.publish("changes", b"local")  # reaches this process's subscribers
        assert inbox.wait_for(1) == [b"local"]

        throwaway_redis.start()  # on the same port, empty: no persistence
        wait_until(lambda: not cache.degraded, 10, "the cache to reconnect")

        assert cache.ping()
        assert cache.reconnections == 1
        direct = redis.Redis.from_url(throwaway_redis.url)
        try:
            # What was written during the outage reached Redis; the deletion held.
            assert direct.get("t:model") == b"v2"
            assert direct.get("t:during-outage") == b"d"
            assert direct.exists("t:state") == 0
            cache.set("after", b"a")
            assert direct.get("t:after") == b"a"
        finally:
            direct.close()
        # Subscriptions are restored: a message from another replica arrives again.

        def remote_message_arrived() -> bool:
            other.publish("changes", b"remote")
            return len(inbox.messages) > 1

        wait_until(remote_message_arrived, 10, "the subscription to be restored")
        assert inbox.messages[1] == b"remote"
    finally:
        cache.close()
        other.close()


def test_writes_buffered_during_an_outage_keep_their_ttl_when_replayed(
    throwaway_redis: ThrowawayRedis,
) -> None:
    cache = RedisCache(throwaway_redis.url, prefix="t:", retry_initial_s=0.05, retry_max_s=0.2)
    try:
        cache.set("refreshed", b"r", ttl_s=5)
        throwaway_redis.kill()
        cache.set("brief", b"b", ttl_s=1000)
        cache.set("forever", b"f")
        cache.set("gone", b"g", ttl_s=0.05)
        assert cache.expire("refreshed", 2000)  # in the copy: replayed with its new TTL
        assert not cache.expire("never-seen", 2000)  # not in the copy: nothing to replay
        assert cache.degraded
        time.sleep(0.1)  # "gone" expires before Redis is back

        throwaway_redis.start()  # on the same port, empty: no persistence
        wait_until(lambda: not cache.degraded, 10, "the cache to reconnect")

        direct = redis.Redis.from_url(throwaway_redis.url)
        try:
            assert direct.get("t:brief") == b"b"
            assert 990 < direct.ttl("t:brief") <= 1000  # what was left of its TTL
            assert direct.ttl("t:forever") == -1
            assert 1990 < direct.ttl("t:refreshed") <= 2000
            assert direct.exists("t:gone", "t:never-seen") == 0
        finally:
            direct.close()
    finally:
        cache.close()


def test_redis_cache_works_from_memory_when_redis_was_never_there() -> None:
    cache = RedisCache(f"redis://127.0.0.1:{free_port()}/0", retry_initial_s=0.05)
    inbox = Inbox()
    try:
        started = time.monotonic()
        cache.set("model", b"v1", ttl_s=60)
        assert cache.get("model") == b"v1"
        cache.set("dropped", b"d")
        assert cache.delete("dropped")  # what the copy held: all it knows while down
        assert not cache.delete("dropped")
        cache.subscribe("changes", inbox)
        cache.publish("changes", b"hello")
        assert inbox.wait_for(1) == [b"hello"]
        assert cache.ping() is False
        assert cache.degraded
        assert time.monotonic() - started < 1.0  # nobody waited on the dead server
    finally:
        cache.close()
