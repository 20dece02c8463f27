"""A cluster's policy state expires `ARBITER_STATE_TTL_S` after the cluster was last heard from.

In process with an injected clock: what a stateful decision and feedback write goes
once the TTL passes with nothing from the cluster, and stays while it keeps deciding
or sending feedback (the GP, which only feedback writes, included). On real Redis:
the keys a decision and a feedback request write carry the TTL, and 0 means none.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.main import create_app
from app.metrics import Metrics
from app.services.decisions import DecisionService, learned_events_cache_key, state_cache_key
from app.settings import Settings
from policies.profiles import load_profiles
from policies.registry import build_registry
from storage.cache import InProcessCache
from tests.api.state_helpers import KeptLog, one_job_snapshot, seen, throughput_event

TTL_S = 100.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(profile: str, cluster_id: str) -> bytes:
    return orjson.dumps({"profile": profile, "snapshot": one_job_snapshot(cluster_id)})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> Iterator[InProcessCache]:
    made = InProcessCache(clock=clock)
    yield made
    made.close()


def service(
    cache: InProcessCache, state_ttl_s: float | None = TTL_S, log: KeptLog | None = None
) -> DecisionService:
    registry = build_registry()
    profiles = load_profiles(registry)
    chosen = {name: profiles[name] for name in ("oasis", "dual-agent")}
    return DecisionService(
        registry, chosen, log or KeptLog(), Metrics(), cache, state_ttl_s=state_ttl_s
    )


def oasis_reason(decisions: DecisionService, cluster_id: str) -> str:
    answer = orjson.loads(decisions.decide(request("oasis", cluster_id)))
    (entry,) = answer["admission"]
    assert entry["admitted"]
    reason: str = entry["reason"]
    return reason


def test_a_stateful_decisions_state_expires_after_the_ttl_unless_written_again(
    cache: InProcessCache, clock: FakeClock
) -> None:
    log = KeptLog()
    decisions = service(cache, log=log)
    key = state_cache_key("c", "oasis")
    assert "already committed" not in oasis_reason(decisions, "c")

    clock.now += 0.6 * TTL_S
    assert "already committed" in oasis_reason(decisions, "c")  # read, and written again
    clock.now += 0.6 * TTL_S  # past the first write's TTL, within the second's
    assert cache.get(key) is not None
    clock.now += 0.5 * TTL_S  # past the second's: the cluster was silent too long

    assert cache.get(key) is None
    # A silent cluster starts from empty state, like a new one: the snapshot decides.
    assert "already committed" not in oasis_reason(decisions, "c")
    # What expires is the state, never the record of a decision.
    assert [r.cluster_id for r in log.decisions] == ["c", "c", "c"]


def test_feedback_state_and_learned_ids_expire_after_the_ttl_unless_written_again(
    cache: InProcessCache, clock: FakeClock
) -> None:
    decisions = service(cache)
    gp, ids = state_cache_key("c", "rwgp"), learned_events_cache_key("c")
    decisions.learn("c", {"e1": seen()})

    clock.now += 0.6 * TTL_S
    decisions.learn("c", {"e2": seen()})
    clock.now += 0.6 * TTL_S
    kept = cache.get(gp)
    assert kept is not None
    assert orjson.loads(kept)["nodes"]["n1"][0] == 2.0
    assert cache.get(ids) is not None
    clock.now += 0.5 * TTL_S

    assert (cache.get(gp), cache.get(ids)) == (None, None)
    decisions.learn("c", {"e1": seen()})  # its id was forgotten with the state: learned anew
    relearned = cache.get(gp)
    assert relearned is not None
    assert orjson.loads(relearned)["nodes"]["n1"][0] == 1.0


def test_deciding_keeps_the_gp_that_only_feedback_writes(
    cache: InProcessCache, clock: FakeClock
) -> None:
    decisions = service(cache)
    gp = state_cache_key("c", "rwgp")
    decisions.learn("c", {"e1": seen()})
    learned = cache.get(gp)

    for _ in range(4):  # 2.4 TTLs of decisions and no feedback
        clock.now += 0.6 * TTL_S
        decisions.decide(request("dual-agent", "c"))
    assert cache.get(gp) == learned
    entry = cache.entry(gp)
    assert entry is not None
    assert entry[1] == pytest.approx(TTL_S)  # restarted by the last decision

    clock.now += 1.01 * TTL_S
    assert cache.get(gp) is None


def test_without_a_ttl_state_is_kept_however_long_the_cluster_is_silent(
    cache: InProcessCache, clock: FakeClock
) -> None:
    decisions = service(cache, state_ttl_s=None)
    oasis_reason(decisions, "c")
    decisions.learn("c", {"e1": seen()})
    clock.now += 10 * 365 * 86_400.0

    for key in ("state:c:oasis", "state:c:rwgp", "learned-events:c"):
        assert cache.entry(key) is not None
        assert cache.entry(key) == (cache.get(key), None)


# -- on Redis ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting_and_ttl",
    [("1000", 1000), ("0", -1)],  # as redis-py's `ttl` answers: -1 is a key without expiry
    ids=["ttl", "never"],
)
def test_on_redis_what_a_decision_and_feedback_write_carries_the_ttl(
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    setting_and_ttl: tuple[str, int],
) -> None:
    setting, expected = setting_and_ttl
    monkeypatch.setenv("ARBITER_STATE_TTL_S", setting)
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    cluster = f"ttl-{uuid.uuid4().hex[:8]}"
    names = [
        f"{redis_prefix}{state_cache_key(cluster, 'oasis')}",
        f"{redis_prefix}{state_cache_key(cluster, 'rwgp')}",
        f"{redis_prefix}{learned_events_cache_key(cluster)}",
    ]
    direct = redis.Redis.from_url(redis_url)
    try:
        with TestClient(create_app(settings)) as client:
            decided = client.post("/v1/decisions", json=orjson.loads(request("oasis", cluster)))
            assert decided.status_code == 200, decided.text
            fed = client.post(
                "/v1/feedback", json={"events": [throughput_event(f"{cluster}-1", cluster)]}
            )
            assert fed.status_code == 202, fed.text

            ttls = [direct.ttl(name) for name in names]
            assert all(expected - 5 < ttl <= expected for ttl in ttls), ttls

            # A decision that only reads the GP restarts its expiry on Redis too.
            direct.expire(names[1], 50)
            decided = client.post(
                "/v1/decisions", json=orjson.loads(request("dual-agent", cluster))
            )
            assert decided.status_code == 200, decided.text
            assert expected - 5 < direct.ttl(names[1]) <= expected
    finally:
        direct.close()


# -- the setting ------------------------------------------------------------------------------


def test_the_state_ttl_comes_from_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ARBITER_STATE_TTL_S", raising=False)
    assert Settings().state_ttl_s == 2_592_000.0  # 30 days
    monkeypatch.setenv("ARBITER_STATE_TTL_S", "3600")
    assert Settings().state_ttl_s == 3600.0
    monkeypatch.setenv("ARBITER_STATE_TTL_S", "0")
    assert Settings().state_ttl_s == 0.0


@pytest.mark.parametrize("value", ["-1", "a week", "nan", "inf", ""])
def test_a_state_ttl_that_is_not_seconds_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ARBITER_STATE_TTL_S", value)
    with pytest.raises(ValidationError, match="ARBITER_STATE_TTL_S must be a number of seconds"):
        Settings()
