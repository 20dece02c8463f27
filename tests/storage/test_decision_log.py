"""The write-behind decision log: batching, outages, spill files and their replay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.services.health import HealthService
from storage.cache import InProcessCache
from storage.db import create_engine_for, make_sessionmaker, upgrade_database
from storage.log import DecisionLog, record_bytes
from storage.models import Decision, FeedbackEvent
from storage.records import DecisionRecord, LogRecord
from tests.servers import ThrowawayPostgres, free_port, wait_until
from tests.storage.factories import make_decision, make_feedback

REPO_ROOT = Path(__file__).resolve().parents[2]


def fast_log(
    sessions: Callable[[], Session],
    spill_dir: Path,
    max_buffer: int = 10_000,
    batch_size: int = 500,
) -> DecisionLog:
    """A log with short intervals, to keep tests quick (behaviour does not depend on them)."""
    return DecisionLog(
        sessions,
        spill_dir,
        max_buffer=max_buffer,
        batch_size=batch_size,
        flush_interval_s=0.02,
        retry_initial_s=0.02,
        retry_max_s=0.3,
    )


def spill_files(spill_dir: Path) -> list[Path]:
    return sorted(spill_dir.glob("spill-*.jsonl"))


def spilled_lines(spill_dir: Path) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in spill_files(spill_dir))


def stored_decision_ids(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.scalars(select(Decision.decision_id)))


def _large_decision() -> DecisionRecord:
    """A decision whose snapshot came as 100 KB of the caller's JSON."""
    nodes = ",".join(f'{{"id":"n{i}","gpus":8,"gpu_type":"V100-SXM2-32GB"}}' for i in range(2000))
    snapshot = f'{{"cluster_id":"big","nodes":[{nodes}],"jobs":[]}}'.encode()
    return make_decision(snapshot=snapshot)


def test_large_records_beyond_the_byte_budget_wait_on_disk_not_in_memory(
    unreachable_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    log = DecisionLog(
        unreachable_sessions,
        spill_dir,
        max_buffer=10_000,
        batch_size=500,
        flush_interval_s=0.02,
        retry_initial_s=0.02,
        retry_max_s=0.3,
        max_buffer_bytes=1 << 20,
    )
    log.start()
    record_size = record_bytes(_large_decision())
    assert record_size > 100_000
    for _ in range(50):  # about 5 MB, five times the budget
        log.submit_decision(_large_decision())
    in_memory = (1 << 20) // record_size
    wait_until(lambda: log.stats()["spilled"] == 50 - in_memory, 10, "the overflow on disk")
    stats = log.stats()
    assert stats["buffered"] == in_memory  # the count limit (10,000) is far away
    assert stats["buffered_bytes"] == in_memory * record_size
    assert stats["spilled"] == 50 - in_memory
    log.stop(timeout_s=2)
    assert spilled_lines(spill_dir) == 50  # nothing accepted is lost


def test_large_records_are_written_in_batches_of_bounded_size(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    log = DecisionLog(
        make_sessionmaker(sqlite_engine),
        tmp_path / "spill",
        flush_interval_s=0.02,
        batch_bytes=300_000,
    )
    batches: list[int] = []
    commit = log._commit

    def counting_commit(records: list[LogRecord]) -> None:
        batches.append(len(records))
        commit(records)

    log._commit = counting_commit  # type: ignore[method-assign]
    accepted = [_large_decision() for _ in range(12)]
    for record in accepted:
        log.submit_decision(record)
    log.start()
    assert log.flush(timeout_s=30)
    log.stop()
    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(r.decision_id for r in accepted)
    assert max(batches) * record_bytes(accepted[0]) <= 300_000 + record_bytes(accepted[0])
    assert max(batches) < 12
    assert log.stats()["buffered_bytes"] == 0


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite database of this test's own (the log commits)."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_database(url)
    engine = create_engine_for(url)
    yield engine
    engine.dispose()


@pytest.fixture
def unreachable_sessions() -> Iterator[sessionmaker[Session]]:
    """Sessions for a PostgreSQL server that is not there (connections are refused)."""
    engine = create_engine_for(f"postgresql://postgres@127.0.0.1:{free_port()}/arbiter")
    yield make_sessionmaker(engine)
    engine.dispose()


def test_decisions_and_feedback_are_written_in_batches(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    log = fast_log(make_sessionmaker(sqlite_engine), tmp_path / "spill", batch_size=50)
    log.start()
    decisions = [make_decision() for _ in range(230)]
    events = [make_feedback(decision_id=d.decision_id) for d in decisions[:20]]
    for decision in decisions:
        log.submit_decision(decision)
    for event in events:
        log.submit_feedback(event)

    assert log.flush(timeout_s=10)

    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(d.decision_id for d in decisions)
    with sqlite_engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(FeedbackEvent)) == 20
    stats = log.stats()
    assert stats["written"] == stats["submitted"] == 250
    assert (stats["buffered"], stats["spilled"], stats["failures"]) == (0, 0, 0)
    assert stats["db_available"] is True
    log.stop()
    assert spill_files(tmp_path / "spill") == []


def test_submitting_never_raises_or_waits_while_the_database_is_down(
    unreachable_sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    log = fast_log(unreachable_sessions, spill_dir, max_buffer=100, batch_size=20)
    log.start()

    started = time.monotonic()
    for _ in range(1000):
        log.submit_decision(make_decision())
    submit_s = time.monotonic() - started

    assert submit_s < 2.0  # no I/O on the caller's thread (about 10 ms here)
    wait_until(lambda: log.stats()["spilled"] == 900, 10, "the overflow to reach disk")
    stats = log.stats()
    assert stats["db_available"] is False
    assert stats["failures"] >= 1
    assert stats["outages"] == 1
    assert stats["buffered"] == 100
    assert stats["spill_pending"] == 900
    assert log.flush(timeout_s=0.2) is False

    log.stop(timeout_s=2)

    assert spilled_lines(spill_dir) == 1000  # what was in memory was spilled on stop


def test_decision_log_survives_a_database_outage(
    throwaway_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    engine = create_engine_for(throwaway_postgres.url)
    spill_dir = tmp_path / "spill"
    log = fast_log(make_sessionmaker(engine), spill_dir, max_buffer=50, batch_size=20)
    log.start()
    accepted: list[str] = []

    def submit(count: int) -> None:
        for _ in range(count):
            decision = make_decision()
            log.submit_decision(decision)
            accepted.append(decision.decision_id)

    submit(30)
    assert log.flush(timeout_s=10)

    throwaway_postgres.stop(mode="immediate")
    submit(40)
    wait_until(lambda: not log.stats()["db_available"], 10, "the log to notice the outage")
    submit(200)  # well past max_buffer: the spill file takes the overflow
    log.submit_feedback(make_feedback("e-during-outage", decision_id=accepted[-1]))
    wait_until(lambda: log.stats()["spilled"] >= 190, 10, "the overflow to reach disk")
    assert spill_files(spill_dir)
    assert log.stats()["buffered"] <= 50

    throwaway_postgres.start()
    submit(30)
    assert log.flush(timeout_s=30)

    with engine.connect() as connection:
        counts = dict(
            connection.execute(
                select(Decision.decision_id, func.count()).group_by(Decision.decision_id)
            ).all()
        )
        feedback = connection.scalars(select(FeedbackEvent.event_id)).all()
    assert len(accepted) == 300
    assert set(counts) == set(accepted)
    assert set(counts.values()) == {1}
    assert feedback == ["e-during-outage"]
    assert spill_files(spill_dir) == []
    stats = log.stats()
    assert stats["outages"] == 1
    assert stats["db_available"] is True
    assert (stats["buffered"], stats["spill_pending"], stats["rejected"]) == (0, 0, 0)
    assert stats["written"] == 301
    log.stop()
    engine.dispose()


def test_spill_files_of_a_stopped_process_are_replayed_on_start(
    unreachable_sessions: sessionmaker[Session], sqlite_engine: Engine, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    earlier = fast_log(unreachable_sessions, spill_dir, max_buffer=10, batch_size=5)
    earlier.start()
    decisions = [make_decision() for _ in range(25)]
    for decision in decisions:
        earlier.submit_decision(decision)
    earlier.submit_feedback(make_feedback("e-spilled"))
    earlier.stop(timeout_s=1)
    assert spilled_lines(spill_dir) == 26

    later = fast_log(make_sessionmaker(sqlite_engine), spill_dir, batch_size=7)
    later.start()
    assert later.flush(timeout_s=10)

    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(d.decision_id for d in decisions)
    with Session(sqlite_engine) as session:
        assert session.get(FeedbackEvent, "e-spilled") is not None
    assert spill_files(spill_dir) == []
    assert later.stats()["replayed"] == 26
    later.stop()


CRASHING_PROCESS = """
import os, sys, time
from pathlib import Path
from storage.db import create_engine_for, make_sessionmaker
from storage.log import DecisionLog, record_bytes
from tests.storage.factories import make_decision

spill_dir, url = Path(sys.argv[1]), sys.argv[2]
log = DecisionLog(make_sessionmaker(create_engine_for(url)), spill_dir, max_buffer=5,
                  batch_size=5, flush_interval_s=0.02)
log.start()
for number in range(20):
    log.submit_decision(make_decision(f"crash-{number:02d}"))
deadline = time.monotonic() + 20
while log.stats()["spilled"] < 15 and time.monotonic() < deadline:
    time.sleep(0.01)
os._exit(0)  # no stop(): memory is lost, the spill file must not be
"""


def test_spill_files_of_a_crashed_process_are_replayed_on_start(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    unreachable = f"postgresql://postgres@127.0.0.1:{free_port()}/arbiter"
    subprocess.run(
        [sys.executable, "-c", CRASHING_PROCESS, str(spill_dir), unreachable],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        check=True,
        timeout=60,
    )
    (crashed_file,) = spill_files(spill_dir)
    with open(crashed_file, "ab") as torn:  # as if it died in the middle of a write
        torn.write(b'{"type":"decision","decision_id":"crash-torn","clus')

    log = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    log.start()
    assert log.flush(timeout_s=10)

    # The first five were still in memory when it died; the fifteen on disk survive.
    assert sorted(stored_decision_ids(sqlite_engine)) == [f"crash-{n:02d}" for n in range(5, 20)]
    assert spill_files(spill_dir) == []
    (rejected_file,) = spill_dir.glob("rejected-*.jsonl")
    rejected = orjson.loads(rejected_file.read_bytes())
    assert rejected["raw_line"].startswith('{"type":"decision","decision_id":"crash-torn"')
    assert log.stats()["rejected"] == 1
    log.stop()


def test_spill_files_of_a_live_process_are_left_alone(
    unreachable_sessions: sessionmaker[Session], sqlite_engine: Engine, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    live = fast_log(unreachable_sessions, spill_dir, max_buffer=2, batch_size=2)
    live.start()
    for _ in range(10):
        live.submit_decision(make_decision())
    wait_until(lambda: live.stats()["spilled"] == 8, 10, "the live log to spill")

    other = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    other.start()
    assert other.flush(timeout_s=5)
    assert stored_decision_ids(sqlite_engine) == []
    assert spill_files(spill_dir)

    live.stop(timeout_s=1)
    other.stop()
    successor = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    successor.start()
    assert successor.flush(timeout_s=10)
    assert len(stored_decision_ids(sqlite_engine)) == 10
    successor.stop()


def test_a_record_the_database_refuses_is_set_aside(
    empty_postgres_url: str, tmp_path: Path
) -> None:
    upgrade_database(empty_postgres_url)  # a database of its own: the log commits
    engine = create_engine_for(empty_postgres_url)
    spill_dir = tmp_path / "spill"
    log = fast_log(make_sessionmaker(engine), spill_dir, batch_size=100)
    log.start()
    good = [make_decision() for _ in range(10)]
    bad = make_decision(snapshot=b'{"nodes": [')  # not JSON: PostgreSQL refuses it
    for decision in [*good[:5], bad, *good[5:]]:
        log.submit_decision(decision)

    assert log.flush(timeout_s=10)

    with Session(engine) as session:
        stored = session.scalars(
            select(Decision.decision_id).where(
                Decision.decision_id.in_([d.decision_id for d in [*good, bad]])
            )
        ).all()
    assert sorted(stored) == sorted(d.decision_id for d in good)
    (rejected_file,) = spill_dir.glob("rejected-*.jsonl")
    rejected = orjson.loads(rejected_file.read_bytes())
    assert rejected["record"]["decision_id"] == bad.decision_id
    assert rejected["record"]["snapshot"] == '{"nodes": ['
    assert rejected["error"].startswith("DataError")
    stats = log.stats()
    assert (stats["written"], stats["rejected"], stats["failures"]) == (10, 1, 0)
    log.stop()
    engine.dispose()


def test_records_submitted_after_stop_are_kept_on_disk(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    log = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    log.start()
    log.stop()
    late = [make_decision() for _ in range(3)]
    for decision in late:
        log.submit_decision(decision)
    assert spilled_lines(spill_dir) == 3

    successor = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    successor.start()
    assert successor.flush(timeout_s=5)
    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(d.decision_id for d in late)
    assert spill_files(spill_dir) == []
    successor.stop()


def test_a_record_that_cannot_be_encoded_is_set_aside_in_memory_and_on_disk(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "spill"
    log = fast_log(make_sessionmaker(sqlite_engine), spill_dir, max_buffer=2)
    good = [make_decision() for _ in range(3)]
    # Before start() nothing is written: two fit in memory, the rest wait to be spilled.
    log.submit_decision(good[0])
    log.submit_decision(make_decision("d-bad-in-memory", action_probs={"p": {1, 2}}))
    log.submit_decision(good[1])
    log.submit_decision(make_decision("d-bad-on-disk", action_probs={"p": {3}}))
    log.submit_decision(good[2])

    log.start()
    assert log.flush(timeout_s=10)

    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(d.decision_id for d in good)
    (rejected_file,) = spill_dir.glob("rejected-*.jsonl")
    rejected = [orjson.loads(line) for line in rejected_file.read_bytes().splitlines()]
    assert len(rejected) == 2
    assert rejected[0]["record"]["decision_id"] == "d-bad-in-memory"
    assert "d-bad-on-disk" in rejected[1]["raw_line"]
    assert log.stats()["rejected"] == 2
    log.stop()


def test_a_record_with_an_integer_no_encoder_takes_is_set_aside_and_writing_goes_on(
    sqlite_engine: Engine, tmp_path: Path
) -> None:
    # orjson refuses integers beyond 64 bits, even with a `default`: such a record once
    # made the writer fail on every retry, and nothing after it reached the table.
    spill_dir = tmp_path / "spill"
    log = fast_log(make_sessionmaker(sqlite_engine), spill_dir)
    log.start()
    poison = make_feedback(
        "poison-1", kind="throughput", payload={"job_id": "j1", "workers": 10**20}
    )
    log.submit_feedback(poison)
    later = [make_decision() for _ in range(3)]
    for record in later:
        log.submit_decision(record)

    assert log.flush(timeout_s=10)

    assert sorted(stored_decision_ids(sqlite_engine)) == sorted(d.decision_id for d in later)
    (rejected_file,) = spill_dir.glob("rejected-*.jsonl")
    (rejected,) = [orjson.loads(line) for line in rejected_file.read_bytes().splitlines()]
    assert rejected["record"]["event_id"] == "poison-1"
    assert b'"workers": 100000000000000000000' in rejected_file.read_bytes()  # kept exact
    assert log.stats()["rejected"] == 1
    log.stop()


def test_a_log_that_cannot_write_says_how_long_it_has_stalled_and_readiness_degrades(
    unreachable_sessions: sessionmaker[Session], sqlite_engine: Engine, tmp_path: Path
) -> None:
    log = fast_log(unreachable_sessions, tmp_path / "spill")
    log.start()
    assert log.stats()["stalled_s"] == 0.0  # nothing waits: not stalled, however long idle
    log.submit_decision(make_decision())
    wait_until(lambda: log.stats()["stalled_s"] > 0.3, 5, "the stall to show")
    # The database the health check probes answers, but this log cannot write to its own:
    # readiness must not say "ready" while nothing reaches the table.
    health = HealthService(sqlite_engine, InProcessCache(), log.stats, 1, log_stall_limit_s=0.2)

    readiness = health.readiness()

    assert readiness.status == "degraded"
    assert "written nothing" in readiness.components["database"].detail
    log.stop(timeout_s=1)
