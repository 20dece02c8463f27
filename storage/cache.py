"""A small cache for model and policy state, with pub/sub to tell replicas about changes.

:class:`Cache` is the one interface the app uses. :class:`InProcessCache` keeps
everything in this process (one replica on a laptop, or tests). :class:`RedisCache`
shares state between replicas and degrades instead of failing: whenever Redis cannot
be reached it serves from an in-process copy, so a Redis outage slows nothing and
raises nothing.

How :class:`RedisCache` behaves across an outage:

* While Redis is healthy, writes go to Redis and to the in-process copy, and reads
  come from Redis (refreshing the copy, TTL included).
* On the first connection error it logs one warning and serves reads and writes from
  the copy alone, remembering which keys it changed. A background thread pings Redis
  with exponential backoff; callers never wait on a dead server.
* Once Redis answers again, the keys changed during the outage are written back
  (last writer wins, as if the writes had arrived late), each with what is left of
  its TTL (a key whose TTL ran out meanwhile is deleted, not revived), subscriptions
  are restored, and it logs the reconnection.
* Messages published during the outage reach only this process's subscribers, and
  messages other replicas publish meanwhile are missed: a subscriber that must not miss
  a change (a new active model version) should re-read the state it cares about when
  :attr:`RedisCache.reconnections` changes or periodically.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import redis
from redis.backoff import NoBackoff
from redis.client import PubSub
from redis.exceptions import RedisError
from redis.retry import Retry

logger = logging.getLogger(__name__)

Callback = Callable[[bytes], None]
Unsubscribe = Callable[[], None]

_PURGE_EVERY_WRITES = 1024
_SUBSCRIBE_CONFIRM_TIMEOUT_S = 2.0
_PUBSUB_POLL_S = 0.1


@runtime_checkable
class Cache(Protocol):
    """Bytes by key with optional TTL, plus fire-and-forget pub/sub.

    No method raises because the backing store is unreachable.
    """

    @property
    def backend(self) -> str:
        """``"redis"`` or ``"memory"``: what the cache was configured with."""
        ...

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        """Store ``value``; with ``ttl_s`` it disappears after that many seconds."""
        ...

    def expire(self, key: str, ttl_s: float | None = None) -> bool:
        """Restart ``key``'s expiry from now without rewriting its value: it disappears
        after ``ttl_s`` seconds (``None``: never; ``<= 0``: now). Return whether the key
        was there (a missing key stays missing)."""
        ...

    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it was there (an expired key was not)."""
        ...

    def publish(self, channel: str, message: bytes) -> None:
        """Deliver ``message`` to the subscribers of ``channel`` (at most once each)."""
        ...

    def subscribe(self, channel: str, callback: Callback) -> Unsubscribe:
        """Call ``callback(message)`` for each message on ``channel`` (on a background
        thread for Redis, in the publisher's thread in process) until the returned
        function is called. A callback that raises is logged and kept."""
        ...

    def ping(self) -> bool:
        """Whether the backing store answers now."""
        ...

    def close(self) -> None: ...


class _Subscribers:
    """Callbacks by channel, thread-safe; delivers messages to them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_channel: dict[str, list[Callback]] = {}

    def add(self, channel: str, callback: Callback) -> bool:
        """Register; return whether ``channel`` had no subscriber before."""
        with self._lock:
            callbacks = self._by_channel.setdefault(channel, [])
            callbacks.append(callback)
            return len(callbacks) == 1

    def remove(self, channel: str, callback: Callback) -> None:
        with self._lock:
            callbacks = self._by_channel.get(channel)
            if callbacks is None or callback not in callbacks:
                return
            callbacks.remove(callback)
            if not callbacks:
                del self._by_channel[channel]

    def channels(self) -> set[str]:
        with self._lock:
            return set(self._by_channel)

    def deliver(self, channel: str, message: bytes) -> None:
        with self._lock:
            callbacks = list(self._by_channel.get(channel, ()))
        for callback in callbacks:
            try:
                callback(message)
            except Exception:
                logger.exception("cache subscriber of %r failed", channel)


class InProcessCache:
    """A thread-safe dict with per-key TTL and in-process pub/sub.

    Expired keys are dropped when read and swept every so many writes.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[bytes, float | None]] = {}
        self._writes = 0
        self._subscribers = _Subscribers()

    @property
    def backend(self) -> str:
        return "memory"

    def get(self, key: str) -> bytes | None:
        entry = self.entry(key)
        return None if entry is None else entry[0]

    def entry(self, key: str) -> tuple[bytes, float | None] | None:
        """The value and its remaining TTL in seconds (``None``: no expiry), if present."""
        now = self._clock()
        with self._lock:
            stored = self._entries.get(key)
            if stored is None:
                return None
            value, expires_at = stored
            if expires_at is None:
                return value, None
            if expires_at <= now:
                del self._entries[key]
                return None
            return value, expires_at - now

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        now = self._clock()
        with self._lock:
            if ttl_s is not None and ttl_s <= 0:
                self._entries.pop(key, None)
                return
            self._entries[key] = (bytes(value), None if ttl_s is None else now + ttl_s)
            self._writes += 1
            if self._writes % _PURGE_EVERY_WRITES == 0:
                expired = [
                    k for k, (_, at) in self._entries.items() if at is not None and at <= now
                ]
                for expired_key in expired:
                    del self._entries[expired_key]

    def expire(self, key: str, ttl_s: float | None = None) -> bool:
        now = self._clock()
        with self._lock:
            stored = self._entries.get(key)
            if stored is None:
                return False
            value, expires_at = stored
            if expires_at is not None and expires_at <= now:
                del self._entries[key]
                return False
            if ttl_s is not None and ttl_s <= 0:
                del self._entries[key]
            else:
                self._entries[key] = (value, None if ttl_s is None else now + ttl_s)
            return True

    def delete(self, key: str) -> bool:
        now = self._clock()
        with self._lock:
            stored = self._entries.pop(key, None)
        return stored is not None and (stored[1] is None or stored[1] > now)

    def publish(self, channel: str, message: bytes) -> None:
        self._subscribers.deliver(channel, message)

    def subscribe(self, channel: str, callback: Callback) -> Unsubscribe:
        self._subscribers.add(channel, callback)
        return lambda: self._subscribers.remove(channel, callback)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        with self._lock:
            self._entries.clear()


class RedisCache:
    """Redis-backed :class:`Cache` that falls back to memory; see the module docstring.

    Keys and channels are namespaced with ``prefix``. Nothing connects until the
    first call, so constructing one with Redis down is fine.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "arbiter:",
        socket_timeout_s: float = 0.5,
        retry_initial_s: float = 0.25,
        retry_max_s: float = 5.0,
    ) -> None:
        self._prefix = prefix
        # No retries inside redis-py: one failure switches to memory at once, and the
        # prober below does the retrying, off the callers' threads.
        self._client = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._memory = InProcessCache()
        self._subscribers = _Subscribers()

        self._lock = threading.Lock()
        self._healthy = True
        self._down_since = 0.0
        self._dirty: dict[str, bool] = {}  # key -> set (True) or deleted (False) while down
        self._reconnections = 0
        self._closed = threading.Event()
        self._state_changed = threading.Condition(self._lock)
        self._prober: threading.Thread | None = None
        self._pubsub_thread: threading.Thread | None = None
        self._confirmations: dict[str, threading.Event] = {}
        self._confirmed: set[str] = set()  # channels Redis has confirmed on our connection

    # -- Cache ----------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        return "redis"

    @property
    def degraded(self) -> bool:
        """Whether it is serving from memory because Redis is unreachable."""
        with self._lock:
            return not self._healthy

    @property
    def reconnections(self) -> int:
        """How many outages have ended (a subscriber's cue to re-read state)."""
        with self._lock:
            return self._reconnections

    def get(self, key: str) -> bytes | None:
        if self._is_healthy():
            try:
                pipeline = self._client.pipeline(transaction=False)
                pipeline.get(self._name(key))
                pipeline.pttl(self._name(key))
                value, ttl_ms = pipeline.execute()
            except (RedisError, OSError) as error:
                self._mark_down(error)
            else:
                if value is None or ttl_ms == -2:  # -2: expired between GET and PTTL
                    self._memory.delete(key)
                    return None
                # Keep the copy fresh so that an outage serves the latest value seen.
                self._memory.set(key, value, ttl_ms / 1000 if ttl_ms > 0 else None)
                return bytes(value)
        return self._memory.get(key)

    def set(self, key: str, value: bytes, ttl_s: float | None = None) -> None:
        self._memory.set(key, value, ttl_s)
        if not self._healthy_or_mark_dirty(key, True):
            return
        try:
            self._redis_set(key, value, ttl_s)
        except (RedisError, OSError) as error:
            self._mark_down(error, dirty_key=(key, True))

    def expire(self, key: str, ttl_s: float | None = None) -> bool:
        if ttl_s is not None and ttl_s <= 0:
            present = self.get(key) is not None
            self.delete(key)
            return present
        # The copy's expiry moves too, so an outage neither serves the value past its
        # new expiry nor drops it early. During one, a key the copy holds is replayed
        # (value and remaining TTL); one it lacks is left alone, not deleted.
        in_memory = self._memory.expire(key, ttl_s)
        with self._lock:
            healthy = self._healthy
            if not healthy and in_memory:
                self._dirty[key] = True
        if not healthy:
            return in_memory
        name = self._name(key)
        try:
            if ttl_s is None:
                pipeline = self._client.pipeline(transaction=False)
                pipeline.persist(name)
                pipeline.exists(name)
                present = bool(pipeline.execute()[1])
            else:
                present = bool(self._client.pexpire(name, max(1, round(ttl_s * 1000))))
        except (RedisError, OSError) as error:
            self._mark_down(error, dirty_key=(key, True) if in_memory else None)
            return in_memory
        if not present:
            self._memory.delete(key)  # gone from Redis (expired, or deleted elsewhere)
        return present

    def delete(self, key: str) -> bool:
        # During an outage the answer is whether the copy held the key: what this
        # process can know until Redis is back (the delete is replayed then).
        in_memory = self._memory.delete(key)
        if not self._healthy_or_mark_dirty(key, False):
            return in_memory
        try:
            return bool(self._client.delete(self._name(key)))
        except (RedisError, OSError) as error:
            self._mark_down(error, dirty_key=(key, False))
            return in_memory

    def publish(self, channel: str, message: bytes) -> None:
        if self._is_healthy():
            try:
                self._client.publish(self._name(channel), message)
                return
            except (RedisError, OSError) as error:
                self._mark_down(error)
        self._subscribers.deliver(channel, message)

    def subscribe(self, channel: str, callback: Callback) -> Unsubscribe:
        confirmation: threading.Event | None = None
        with self._lock:
            if self._subscribers.add(channel, callback) and channel not in self._confirmed:
                confirmation = self._confirmations.setdefault(channel, threading.Event())
            if self._pubsub_thread is None and not self._closed.is_set():
                self._pubsub_thread = threading.Thread(
                    target=self._run_pubsub, name="redis-cache-pubsub", daemon=True
                )
                self._pubsub_thread.start()
            self._state_changed.notify_all()
            healthy = self._healthy
        if confirmation is not None and healthy:
            # Return once Redis has the subscription, so a publish right after is seen.
            confirmation.wait(_SUBSCRIBE_CONFIRM_TIMEOUT_S)
        return lambda: self._unsubscribe(channel, callback)

    def ping(self) -> bool:
        if not self._is_healthy():
            return False
        try:
            return bool(self._client.ping())
        except (RedisError, OSError) as error:
            self._mark_down(error)
            return False

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._state_changed.notify_all()
            threads = [t for t in (self._prober, self._pubsub_thread) if t is not None]
        for thread in threads:
            thread.join(2.0)
        self._client.close()
        self._memory.close()

    # -- health ---------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        return self._prefix + key

    def _redis_set(self, key: str, value: bytes, ttl_s: float | None) -> None:
        if ttl_s is None:
            self._client.set(self._name(key), value)
        elif ttl_s <= 0:
            self._client.delete(self._name(key))
        else:
            self._client.set(self._name(key), value, px=max(1, round(ttl_s * 1000)))

    def _is_healthy(self) -> bool:
        with self._lock:
            return self._healthy

    def _healthy_or_mark_dirty(self, key: str, is_set: bool) -> bool:
        """Whether to write through to Redis; if not, remember ``key`` for the replay.

        One step under the lock, so no change slips between the prober's last replay
        and its switching back to Redis.
        """
        with self._lock:
            if not self._healthy:
                self._dirty[key] = is_set
            return self._healthy

    def _mark_down(self, error: BaseException, dirty_key: tuple[str, bool] | None = None) -> None:
        with self._lock:
            if dirty_key is not None:
                self._dirty[dirty_key[0]] = dirty_key[1]
            if not self._healthy or self._closed.is_set():
                return
            self._healthy = False
            self._down_since = time.monotonic()
            logger.warning(
                "Redis unreachable (%s: %s); serving the cache from memory until it is back",
                type(error).__name__,
                error,
            )
            self._prober = threading.Thread(
                target=self._run_prober, name="redis-cache-prober", daemon=True
            )
            self._prober.start()

    def _run_prober(self) -> None:
        delay_s = self._retry_initial_s
        while not self._closed.wait(delay_s):
            delay_s = min(delay_s * 2, self._retry_max_s)
            try:
                self._client.ping()
                self._replay_dirty()
            except (RedisError, OSError):
                continue
            with self._lock:
                outage_s = time.monotonic() - self._down_since
                self._reconnections += 1
                self._state_changed.notify_all()
            logger.warning("Redis reachable again after %.1f s; cache back on Redis", outage_s)
            return

    def _replay_dirty(self) -> None:
        """Write the keys changed during the outage to Redis, then switch back to it."""
        while True:
            with self._lock:
                if not self._dirty:
                    self._healthy = True
                    return
                batch, self._dirty = self._dirty, {}
            try:
                for key, is_set in batch.items():
                    entry = self._memory.entry(key) if is_set else None
                    if entry is None:
                        self._client.delete(self._name(key))
                    else:
                        self._redis_set(key, *entry)
            except (RedisError, OSError):
                with self._lock:
                    self._dirty = {**batch, **self._dirty}
                raise

    # -- pub/sub --------------------------------------------------------------------------

    def _unsubscribe(self, channel: str, callback: Callback) -> None:
        self._subscribers.remove(channel, callback)
        with self._lock:
            self._state_changed.notify_all()

    def _run_pubsub(self) -> None:
        """Own the one pub/sub connection: (re)subscribe, receive, dispatch."""
        pubsub: PubSub | None = None
        subscribed: set[str] = set()
        while not self._closed.is_set():
            wanted = self._subscribers.channels()
            with self._lock:
                idle = not self._healthy or not (wanted or subscribed)
                if idle and pubsub is None:
                    self._state_changed.wait(0.5)
            if idle:
                if pubsub is not None:
                    self._close_pubsub(pubsub)
                    pubsub, subscribed = None, set()
                continue
            try:
                # redis-py leaves some of its pub/sub calls untyped, and which ones depends
                # on the interpreter's patch release (its imports do): they are called as Any.
                if pubsub is None:
                    client: Any = self._client
                    pubsub = client.pubsub()
                calls: Any = pubsub
                if wanted - subscribed:
                    calls.subscribe(*(self._name(c) for c in wanted - subscribed))
                if subscribed - wanted:
                    calls.unsubscribe(*(self._name(c) for c in subscribed - wanted))
                subscribed = wanted
                message = pubsub.get_message(timeout=_PUBSUB_POLL_S)
            except (RedisError, OSError) as error:
                self._mark_down(error)
                if pubsub is not None:
                    self._close_pubsub(pubsub)
                pubsub, subscribed = None, set()
                continue
            if message is not None:
                self._handle_message(message)
        if pubsub is not None:
            self._close_pubsub(pubsub)

    def _close_pubsub(self, pubsub: PubSub) -> None:
        with self._lock:
            self._confirmed.clear()
        with contextlib.suppress(RedisError, OSError):
            pubsub.close()

    def _handle_message(self, message: dict[str, object]) -> None:
        raw_channel = message.get("channel")
        if not isinstance(raw_channel, bytes | str):
            return
        name = raw_channel.decode() if isinstance(raw_channel, bytes) else raw_channel
        channel = name.removeprefix(self._prefix)
        kind = message.get("type")
        if kind == "subscribe":
            with self._lock:
                self._confirmed.add(channel)
                confirmation = self._confirmations.pop(channel, None)
            if confirmation is not None:
                confirmation.set()
        elif kind == "unsubscribe":
            with self._lock:
                self._confirmed.discard(channel)
        elif kind == "message":
            data = message.get("data")
            if isinstance(data, bytes):
                self._subscribers.deliver(channel, data)


def create_cache(redis_url: str | None, *, prefix: str = "arbiter:") -> Cache:
    """A :class:`RedisCache` when ``redis_url`` is set, else an :class:`InProcessCache`."""
    if redis_url:
        return RedisCache(redis_url, prefix=prefix)
    return InProcessCache()
