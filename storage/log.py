"""The write-behind decision log: decisions and feedback reach the database off the request path.

Callers hand records to :meth:`DecisionLog.submit_decision` / :meth:`~DecisionLog.
submit_feedback`, which only append to memory under a lock (O(1), no I/O, never raise
because of the database). A writer thread writes them in batches, one transaction per
batch, with idempotent inserts (an existing ``decision_id`` / ``event_id`` is skipped),
so writing anything twice is harmless.

Where accepted records live, oldest first::

    orphan spill files  →  memory "head"  →  own spill segments  →  memory "tail"
    (dead processes)       (≤ max_buffer)    (on disk, in order)    (being spilled)

While the database is away (or slower than the callers) the head fills up to
``max_buffer`` records or ``max_buffer_bytes`` (whichever comes first: one large
decision holds its snapshot and answer, about a megabyte for a 4,000-GPU cluster, so a
count alone would let the head grow to gigabytes); later records go to the tail,
which a spiller thread appends to the current segment file of ``spill_dir`` as JSON
lines, fsync'd (so memory holds at most the head's limits plus what the spiller has not
yet taken). Once a segment exists, new
records keep going to the tail until the segments are replayed, so records are written
in the order they were accepted. The writer retries with exponential backoff and jitter
(and at once when :meth:`~DecisionLog.flush` asks), writes the head, then replays the
segments, deleting each once written. A process writes several segment files rather
than one, so that it can replay a sealed segment while appending to a new one.

Spill files are named ``spill-<process start ns>-<pid>-<token>-<segment>.jsonl`` so
that sorting by name sorts by age, and each is held under an exclusive ``flock`` by
the process writing or replaying it. On :meth:`~DecisionLog.start` (and after every
outage) a log adopts the files no live process holds (left by a crashed or stopped
process) and replays them first. Several processes may therefore share ``spill_dir``.

:meth:`~DecisionLog.stop` flushes what it can in the time given, then writes what is
still in memory to a spill file for the next process. Records accepted after stop
are appended to a spill file directly.

A record the database refuses on its own (JSON bytes that are not JSON, a value orjson
cannot encode, a string too long — not a connection problem) would block its batch
forever; it is isolated and appended to ``rejected-<process>.jsonl`` in ``spill_dir``
with the error, counted in ``rejected``, and not retried. Nothing accepted is dropped —
except what is in memory when the process is killed without :meth:`~DecisionLog.stop`,
which a write-behind log cannot keep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import orjson
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    SQLAlchemyError,
    StatementError,
)
from sqlalchemy.orm import Session

from storage.records import (
    DecisionRecord,
    FeedbackRecord,
    LogRecord,
    decode_spill_line,
    dump_json,
    encode_spill_line,
)
from storage.repositories import DecisionRepository, FeedbackRepository

logger = logging.getLogger(__name__)

SPILL_PREFIX = "spill-"
SPILL_SUFFIX = ".jsonl"
REJECTED_PREFIX = "rejected-"

_Entry = tuple[int, LogRecord]
"""A submitted record and its acceptance number (1, 2, …)."""

RECORD_OVERHEAD_BYTES = 2048
"""What a waiting record holds besides its JSON documents given as bytes (estimated)."""


def record_bytes(record: LogRecord) -> int:
    """About how much memory ``record`` holds while it waits: the JSON documents it was
    given as bytes (a decision's snapshot and answer), plus a fixed allowance. A document
    given as objects counts only in the allowance (the scheduler adapters pass those)."""
    size = RECORD_OVERHEAD_BYTES
    if isinstance(record, DecisionRecord):
        for document in (record.snapshot, record.decision):
            if isinstance(document, bytes | bytearray | memoryview):
                size += len(document)
    return size


class DecisionLogStats(TypedDict):
    """Counters (monotonic totals) and gauges (current values) for metrics."""

    submitted: int  # total records accepted
    written: int  # total records committed to the database (duplicates included)
    spilled: int  # total records appended to spill files
    replayed: int  # total records committed from spill files (own and adopted)
    rejected: int  # total records set aside in rejected-*.jsonl
    failures: int  # total failed write attempts
    outages: int  # total times the database became unavailable
    buffered: int  # gauge: records in memory now
    buffered_bytes: int  # gauge: about how many bytes those records hold
    spill_pending: int  # gauge: own spilled records not yet replayed
    spill_files: int  # gauge: spill files (own and adopted) waiting to be replayed
    db_available: bool  # gauge: whether the last write attempt succeeded
    stalled_s: float  # gauge: seconds without a record written or set aside while some wait


@dataclass(eq=False)
class _Segment:
    """One spill file held open (and ``flock``-ed) by this process."""

    path: Path
    fd: int
    orphan: bool  # adopted from another process (its lines carry no acceptance numbers)
    sealed: bool = False  # no more appends; only then is it read
    size: int = 0  # bytes appended by this process
    records: int = 0  # records appended by this process
    last_seq: int = 0  # highest acceptance number in it
    offset: int = 0  # bytes already replayed
    replayed: int = 0  # records already replayed
    io_lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Item:
    """A record on its way to the database, and how to mark it done."""

    record: LogRecord | None  # None: a spill line that could not be decoded
    seq: int = 0  # acceptance number, 0 when read from a file
    end_offset: int = 0  # for spill lines: file offset just past this line
    raw: bytes = b""  # for undecodable spill lines


def _is_record_fault(error: BaseException) -> bool:
    """Whether ``error`` is about the data written, not the database being reachable.

    Such a write fails the same way every time, so retrying it would block the log.
    Anything else from SQLAlchemy (lost connection, missing table, lock timeout) is
    treated as transient and retried.
    """
    if isinstance(error, DataError | IntegrityError):
        return True
    if isinstance(error, StatementError) and not isinstance(error, DBAPIError):
        return True  # raised while encoding parameters, before reaching the database
    return not isinstance(error, SQLAlchemyError)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _document_as_text(document: object) -> object:
    if isinstance(document, bytes | bytearray | memoryview):
        return bytes(document).decode("utf-8", errors="replace")
    return document


class DecisionLog:
    """Write-behind log of decisions and feedback; see the module docstring."""

    def __init__(
        self,
        sessionmaker: Callable[[], Session],
        spill_dir: Path,
        max_buffer: int = 10_000,
        batch_size: int = 500,
        flush_interval_s: float = 0.5,
        *,
        max_buffer_bytes: int = 256 << 20,
        batch_bytes: int = 32 << 20,
        retry_initial_s: float = 0.25,
        retry_max_s: float = 5.0,
    ) -> None:
        if max_buffer < 1 or batch_size < 1 or max_buffer_bytes < 1 or batch_bytes < 1:
            raise ValueError("max_buffer, batch_size and their byte sizes must be positive")
        self._max_buffer_bytes = max_buffer_bytes
        self._batch_bytes = batch_bytes
        self._sessionmaker = sessionmaker
        self._spill_dir = Path(spill_dir)
        self._max_buffer = max_buffer
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._process_tag = f"{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

        self._lock = threading.Lock()
        self._writer_wakeup = threading.Condition(self._lock)
        self._spiller_wakeup = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)

        # Guarded by _lock.
        self._head: deque[_Entry] = deque()
        self._tail: deque[_Entry] = deque()
        self._inflight: list[_Entry] = []
        self._spilling = 0  # entries taken from the tail, not yet in a segment
        self._memory_bytes = 0  # record_bytes() of the head and the batch in flight
        self._segments: deque[_Segment] = deque()
        self._orphans: deque[_Segment] = deque()
        self._next_segment_number = 1  # 0 is kept for what stop() finds in memory
        self._submitted_seq = 0
        self._completed_seq = 0
        self._written = 0
        self._spilled = 0
        self._replayed = 0
        self._rejected = 0
        self._progress_at = time.monotonic()  # last record written or set aside
        self._failures = 0
        self._outages = 0
        self._db_available = True
        self._outage_started = 0.0
        self._retry_at = 0.0
        self._retry_delay_s = retry_initial_s
        self._retry_now = False
        self._started = False
        self._stop_threads = False
        self._stopped = False

        self._rejected_lock = threading.Lock()
        self._late_lock = threading.Lock()
        self._late_number: int | None = None
        self._writer: threading.Thread | None = None
        self._spiller: threading.Thread | None = None

    # -- public API ---------------------------------------------------------------------

    def start(self) -> None:
        """Adopt spill files left by earlier processes and start the threads."""
        with self._lock:
            if self._started:
                raise RuntimeError("DecisionLog.start() called twice")
            self._started = True
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        self._adopt_orphans()
        self._writer = threading.Thread(
            target=self._run_writer, name="decision-log-writer", daemon=True
        )
        self._spiller = threading.Thread(
            target=self._run_spiller, name="decision-log-spiller", daemon=True
        )
        self._writer.start()
        self._spiller.start()

    def submit_decision(self, record: DecisionRecord) -> None:
        """Accept a decision for writing. O(1); never blocks on I/O, never raises."""
        self._submit(record)

    def submit_feedback(self, record: FeedbackRecord) -> None:
        """Accept a feedback event for writing. O(1); never blocks on I/O, never raises."""
        self._submit(record)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything accepted so far (and every adopted spill file) is in the
        database; return whether that happened within ``timeout_s``.

        Asks the writer to write now, and to retry at once if it is backing off.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._submitted_seq
            if not self._started or self._stopped:
                return self._completed_seq >= target and not self._orphans
            self._retry_now = True
            self._writer_wakeup.notify()
            while self._completed_seq < target or self._orphans:
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    return False
                self._progress.wait(remaining_s)
            return True

    def stop(self, timeout_s: float = 10.0) -> None:
        """Write what can be written within ``timeout_s``, spill the rest, stop the threads.

        Does not wait out a database outage: once a write attempt made after the call
        fails, what is left goes to disk.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if self._stopped:
                return
            failures_before = self._failures
            self._retry_now = True
            self._writer_wakeup.notify()
            target = self._submitted_seq
            while self._started and (self._completed_seq < target or self._orphans):
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0 or self._failures > failures_before:
                    break
                self._progress.wait(remaining_s)
            self._stop_threads = True
            self._writer_wakeup.notify_all()
            self._spiller_wakeup.notify_all()
        for thread in (self._writer, self._spiller):
            if thread is not None:
                thread.join(max(0.5, deadline - time.monotonic()))
        with self._lock:
            self._stopped = True
            # The writer may still hold a batch if it is stuck in a database call; it is
            # spilled too (and skipped as a duplicate if that call commits after all).
            in_memory = [*self._inflight, *self._head]
            self._inflight = []
            self._head.clear()
            self._memory_bytes = 0
            leftover_tail = list(self._tail)
            self._tail.clear()
            segments = [*self._orphans, *self._segments]
            self._orphans.clear()
            self._segments.clear()
        try:
            if in_memory:
                self._write_spill_file(0, [record for _, record in in_memory])
            if leftover_tail:
                self._write_spill_file(self._take_segment_number(), [r for _, r in leftover_tail])
        except OSError:
            logger.critical(
                "decision log: could not spill %d record(s) on stop; they are lost",
                len(in_memory) + len(leftover_tail),
                exc_info=True,
            )
        for segment in segments:
            os.close(segment.fd)  # releases the flock; the file waits for the next process
        if in_memory or leftover_tail:
            logger.warning(
                "decision log stopped with %d record(s) not in the database; spilled to %s",
                len(in_memory) + len(leftover_tail),
                self._spill_dir,
            )

    def stats(self) -> DecisionLogStats:
        with self._lock:
            return {
                "submitted": self._submitted_seq,
                "written": self._written,
                "spilled": self._spilled,
                "replayed": self._replayed,
                "rejected": self._rejected,
                "failures": self._failures,
                "outages": self._outages,
                "buffered": len(self._head)
                + len(self._tail)
                + len(self._inflight)
                + self._spilling,
                "buffered_bytes": self._memory_bytes,
                "spill_pending": sum(s.records - s.replayed for s in self._segments),
                "spill_files": len(self._segments) + len(self._orphans),
                "db_available": self._db_available,
                "stalled_s": self._stalled_s(),
            }

    def _stalled_s(self) -> float:
        """How long records have waited with none written or set aside (0: none waits).

        Called with `_lock` held."""
        waiting = len(self._head) + len(self._tail) + len(self._inflight) + self._spilling
        waiting += sum(s.records - s.replayed for s in self._segments) + len(self._orphans)
        if waiting == 0:
            self._progress_at = time.monotonic()
            return 0.0
        return max(0.0, time.monotonic() - self._progress_at)

    # -- accepting ----------------------------------------------------------------------

    def _submit(self, record: LogRecord) -> None:
        size = record_bytes(record)
        with self._lock:
            self._submitted_seq += 1
            entry = (self._submitted_seq, record)
            if self._stopped:
                late = True
            else:
                late = False
                if (
                    not self._tail
                    and not self._segments
                    and not self._spilling
                    and len(self._head) + len(self._inflight) < self._max_buffer
                    and (
                        self._memory_bytes == 0
                        or self._memory_bytes + size <= self._max_buffer_bytes
                    )
                ):
                    self._head.append(entry)
                    self._memory_bytes += size
                    if (
                        len(self._head) >= self._batch_size
                        or self._memory_bytes >= self._batch_bytes
                    ):
                        self._writer_wakeup.notify()
                else:
                    self._tail.append(entry)
                    self._spiller_wakeup.notify()
        if late:
            self._spill_late(record)

    # -- spilling -----------------------------------------------------------------------

    def _spill_late(self, record: LogRecord) -> None:
        """After stop() there is no thread to hand a record to: append it to disk now.

        The file is locked only while appending, so that a successor (in this process
        or another) can adopt it; if one holds it, the record goes to a new file.
        """
        with self._late_lock:
            self._spill_dir.mkdir(parents=True, exist_ok=True)
            while True:
                if self._late_number is None:
                    self._late_number = self._take_segment_number()
                path = self._segment_path(self._late_number)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
                except OSError:
                    logger.exception("decision log: could not spill a record accepted after stop")
                    return
                try:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        self._late_number = None  # being replayed by a successor
                        continue
                    size = os.fstat(fd).st_size
                    if os.fstat(fd).st_nlink == 0:
                        self._late_number = None  # replayed and deleted meanwhile
                        continue
                    count = self._append(_Segment(path, fd, orphan=False, size=size), [(0, record)])
                    break
                except OSError:
                    logger.exception("decision log: could not spill a record accepted after stop")
                    return
                finally:
                    os.close(fd)
        with self._lock:
            self._spilled += count

    def _take_segment_number(self) -> int:
        with self._lock:
            number = self._next_segment_number
            self._next_segment_number += 1
            return number

    def _segment_path(self, number: int) -> Path:
        return self._spill_dir / f"{SPILL_PREFIX}{self._process_tag}-{number:08d}{SPILL_SUFFIX}"

    def _open_segment(self, number: int) -> _Segment:
        self._spill_dir.mkdir(parents=True, exist_ok=True)
        path = self._segment_path(number)
        # Read-write: replay reads through this descriptor, not the path, so a file
        # removed behind our back is still replayed.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _fsync_directory(self._spill_dir)
        return _Segment(path=path, fd=fd, orphan=False)

    def _write_spill_file(self, number: int, records: Iterable[LogRecord]) -> None:
        """Write a whole spill file at once (used by stop() and after it)."""
        segment = self._open_segment(number)
        try:
            count = self._append(segment, [(0, record) for record in records])
        finally:
            os.close(segment.fd)
        with self._lock:
            self._spilled += count

    def _append(self, segment: _Segment, entries: list[_Entry]) -> int:
        """Append ``entries`` as JSON lines and fsync; on failure leave the file as it was."""
        payload = b"".join(_spill_line(record) for _, record in entries)
        try:
            written = 0
            while written < len(payload):
                written += os.write(segment.fd, payload[written:])
            os.fsync(segment.fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(segment.fd, segment.size)
            raise
        segment.size += len(payload)
        return len(entries)

    def _run_spiller(self) -> None:
        while True:
            with self._lock:
                while not self._tail and not self._stop_threads:
                    self._spiller_wakeup.wait()
                if not self._tail:
                    return
                entries = list(self._tail)
                self._tail.clear()
                self._spilling += len(entries)
                segment = self._segments[-1] if self._segments else None
                if segment is not None and segment.sealed:
                    segment = None
                if segment is not None:
                    # Taken under _lock so the writer cannot seal and read it mid-append.
                    segment.io_lock.acquire()
            try:
                if segment is None:
                    segment = self._open_segment(self._take_segment_number())
                    segment.io_lock.acquire()
                    with self._lock:
                        self._segments.append(segment)
                try:
                    self._append(segment, entries)
                    # Still holding io_lock: the writer must not see these lines on disk
                    # before it can see them counted.
                    with self._lock:
                        self._spilling -= len(entries)
                        self._spilled += len(entries)
                        segment.records += len(entries)
                        segment.last_seq = entries[-1][0]
                        self._writer_wakeup.notify()
                finally:
                    segment.io_lock.release()
            except OSError as error:
                # Disk full or unwritable: keep the records in memory and try again.
                logger.error("decision log: cannot spill to %s: %s", self._spill_dir, error)
                with self._lock:
                    self._spilling -= len(entries)
                    self._tail.extendleft(reversed(entries))
                    if self._stop_threads:
                        return  # stop() tries once more with what is left
                    self._spiller_wakeup.wait(1.0)

    def _adopt_orphans(self) -> None:
        """Lock and queue spill files no live process holds, oldest first."""
        with self._lock:
            known = {s.path for s in (*self._orphans, *self._segments)}
        own_prefix = f"{SPILL_PREFIX}{self._process_tag}-"
        adopted: list[_Segment] = []
        for path in sorted(self._spill_dir.glob(f"{SPILL_PREFIX}*{SPILL_SUFFIX}")):
            if path in known or path.name.startswith(own_prefix):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # replayed by another process meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)  # a live process is writing or replaying it
                continue
            if os.fstat(fd).st_nlink == 0:
                os.close(fd)  # deleted by the process we waited for
                continue
            adopted.append(_Segment(path=path, fd=fd, orphan=True, sealed=True))
        if adopted:
            logger.info(
                "decision log: replaying %d spill file(s) from earlier processes", len(adopted)
            )
            with self._lock:
                self._orphans.extend(adopted)
                self._writer_wakeup.notify()

    # -- writing ------------------------------------------------------------------------

    def _run_writer(self) -> None:
        next_write_at = time.monotonic() + self._flush_interval_s
        while True:
            with self._lock:
                while True:
                    if self._stop_threads:
                        return
                    now = time.monotonic()
                    pending = bool(self._head or self._segments or self._orphans)
                    if not self._db_available:
                        if pending and (self._retry_now or now >= self._retry_at):
                            break
                        timeout_s: float | None = (self._retry_at - now) if pending else None
                    else:
                        if pending and (
                            self._retry_now
                            or now >= next_write_at
                            or len(self._head) >= self._batch_size
                            or self._memory_bytes >= self._batch_bytes
                            or self._segments
                            or self._orphans
                        ):
                            break
                        if not pending:
                            # Idle: a write is due an interval after something arrives.
                            # (Keeping an old deadline made this wait(0) in a busy loop,
                            # taking the GIL from every decision.)
                            next_write_at = now + self._flush_interval_s
                        timeout_s = max(0.0, next_write_at - now)
                    self._writer_wakeup.wait(timeout_s)
                self._retry_now = False
            try:
                self._drain()
            except Exception as error:  # a bug or an I/O error must not end the thread
                logger.exception("decision log: writer failed; retrying")
                with self._lock:
                    if self._inflight and not self._stopped:
                        self._head.extendleft(reversed(self._inflight))
                    self._inflight = []
                self._note_failure(error)
            next_write_at = time.monotonic() + self._flush_interval_s

    def _drain(self) -> None:
        """Write batches until nothing is left or a write fails for lack of a database."""
        while True:
            with self._lock:
                if self._stop_threads:
                    return
                source = self._take_batch()
            if source is None:
                return
            if not self._write_source(source):
                return

    def _take_batch(self) -> _Segment | list[_Entry] | None:
        """Under ``_lock``: the next thing to write, in order (an orphan file, a batch of
        the head, or an own segment, which gets sealed), or ``None``."""
        if self._orphans:
            return self._orphans[0]
        if self._head:
            # Up to batch_size records and about batch_bytes (at least one record): the
            # writer's copies of a batch's parameters stay bounded too.
            batch: list[_Entry] = []
            size = 0
            while self._head and len(batch) < self._batch_size:
                next_size = record_bytes(self._head[0][1])
                if batch and size + next_size > self._batch_bytes:
                    break
                batch.append(self._head.popleft())
                size += next_size
            self._inflight = batch
            return self._inflight
        if self._segments:
            segment = self._segments[0]
            segment.sealed = True
            return segment
        return None

    def _write_source(self, source: _Segment | list[_Entry]) -> bool:
        if isinstance(source, list):
            items = [_Item(record=record, seq=seq) for seq, record in source]
            done, committed = self._write_items(items)
            with self._lock:
                if self._stopped:
                    return False
                self._inflight = []
                self._memory_bytes -= sum(record_bytes(record) for _, record in source[:done])
                if done < len(items):
                    self._head.extendleft(reversed(source[done:]))
                if done:
                    self._completed_seq = max(self._completed_seq, source[done - 1][0])
                self._written += committed
                self._progress.notify_all()
            return done == len(items)

        with source.io_lock:  # waits for an append that began before sealing
            pass
        items, at_end = self._read_segment(source)
        done, committed = self._write_items(items) if items else (0, 0)
        with self._lock:
            if self._stopped:
                return False
            if done:
                source.offset = items[done - 1].end_offset
                source.replayed += done
            self._replayed += committed
            self._written += committed
            finished = done == len(items) and at_end
            if finished:
                self._finish_segment(source)
            self._progress.notify_all()
        return done == len(items)

    def _read_segment(self, segment: _Segment) -> tuple[list[_Item], bool]:
        """Up to ``batch_size`` lines from ``segment``'s replay offset; and whether they
        reach the end of the file."""
        items: list[_Item] = []
        offset = segment.offset
        # A duplicate descriptor: its own buffering, the same (still locked) file.
        with os.fdopen(os.dup(segment.fd), "rb") as spill_file:
            spill_file.seek(offset)
            while len(items) < self._batch_size:
                line = spill_file.readline()
                if not line:
                    return items, True
                offset += len(line)
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("truncated line (the writing process died mid-write)")
                    items.append(_Item(record=decode_spill_line(line), end_offset=offset))
                except ValueError:
                    items.append(_Item(record=None, end_offset=offset, raw=line))
            at_end = spill_file.read(1) == b""
        return items, at_end

    def _finish_segment(self, segment: _Segment) -> None:
        """Under ``_lock``: a fully replayed segment is deleted and forgotten."""
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
        os.close(segment.fd)
        if segment.orphan:
            self._orphans.remove(segment)
        else:
            self._segments.remove(segment)
            self._completed_seq = max(self._completed_seq, segment.last_seq)

    def _write_items(self, items: list[_Item]) -> tuple[int, int]:
        """Write ``items`` in one transaction; return how many from the front are done
        (committed, or set aside as rejected) and how many of those were committed.

        Fewer than ``len(items)`` done means the database is unavailable (the outage is
        recorded and a retry scheduled).
        """
        writable = [item.record for item in items if item.record is not None]
        try:
            self._commit(writable)
        except Exception as error:
            if not _is_record_fault(error):
                self._note_failure(error)
                return 0, 0
            logger.warning(
                "decision log: a batch of %d was refused (%s); writing its records one by one",
                len(writable),
                type(error).__name__,
            )
            return self._write_one_by_one(items)
        for item in items:
            if item.record is None:
                self._reject(None, item.raw, ValueError("undecodable spill line"))
        self._note_success()
        return len(items), len(writable)

    def _write_one_by_one(self, items: list[_Item]) -> tuple[int, int]:
        committed = 0
        for position, item in enumerate(items):
            if item.record is None:
                self._reject(None, item.raw, ValueError("undecodable spill line"))
                continue
            try:
                self._commit([item.record])
            except Exception as error:
                if not _is_record_fault(error):
                    self._note_failure(error)
                    return position, committed
                self._reject(item.record, b"", error)
            else:
                committed += 1
        self._note_success()
        return len(items), committed

    def _commit(self, records: list[LogRecord]) -> None:
        decisions = [r for r in records if isinstance(r, DecisionRecord)]
        feedback = [r for r in records if isinstance(r, FeedbackRecord)]
        with self._sessionmaker() as session, session.begin():
            if decisions:
                DecisionRepository(session).add_many(decisions)
            if feedback:
                FeedbackRepository(session).add_many_ignoring_duplicates(feedback)

    def _note_success(self) -> None:
        with self._lock:
            self._progress_at = time.monotonic()
            if not self._db_available:
                logger.warning(
                    "decision log: database available again after %.1f s; replaying",
                    time.monotonic() - self._outage_started,
                )
            recovered = not self._db_available
            self._db_available = True
            self._retry_delay_s = self._retry_initial_s
        if recovered:
            # Processes that died during the outage may have left spill files.
            self._adopt_orphans()

    def _note_failure(self, error: BaseException) -> None:
        with self._lock:
            self._failures += 1
            if self._db_available:
                self._outages += 1
                self._outage_started = time.monotonic()
                logger.warning(
                    "decision log: database unavailable (%s: %s); buffering up to %d "
                    "records in memory, then spilling to %s",
                    type(error).__name__,
                    str(error).splitlines()[0] if str(error) else "",
                    self._max_buffer,
                    self._spill_dir,
                )
            self._db_available = False
            jitter = random.uniform(0.5, 1.0)  # replicas do not retry in lockstep
            self._retry_at = time.monotonic() + self._retry_delay_s * jitter
            self._retry_delay_s = min(self._retry_delay_s * 2, self._retry_max_s)
            self._progress.notify_all()

    def _reject(self, record: LogRecord | None, raw: bytes, error: BaseException) -> None:
        """Append a record the database refuses to ``rejected-<process>.jsonl``."""
        if record is None:
            entry: dict[str, object] = {"raw_line": raw.decode("utf-8", errors="replace")}
        else:
            row = {
                spec.name: _document_as_text(getattr(record, spec.name))
                for spec in dataclasses.fields(record)
            }
            row["type"] = "decision" if isinstance(record, DecisionRecord) else "feedback"
            entry = {"record": row}
        entry["error"] = f"{type(error).__name__}: {error}"[:4000]
        line = dump_json_lenient(entry)
        path = self._spill_dir / f"{REJECTED_PREFIX}{self._process_tag}{SPILL_SUFFIX}"
        logger.error("decision log: record rejected by the database, kept in %s: %s", path, error)
        try:
            with self._rejected_lock, open(path, "ab") as rejected_file:
                rejected_file.write(line)
                rejected_file.flush()
                os.fsync(rejected_file.fileno())
        except OSError:
            # Last resort: the log file keeps it.
            logger.critical("decision log: cannot write %s; rejected record: %r", path, line)
        with self._lock:
            self._rejected += 1
            self._progress_at = time.monotonic()


def _spill_line(record: LogRecord) -> bytes:
    """The spill line for ``record``; one orjson cannot encode becomes a line that replay
    sets aside as rejected (with a readable rendering), instead of blocking the spiller."""
    try:
        return encode_spill_line(record)
    except TypeError as error:
        return dump_json_lenient(
            {"type": "unencodable", "error": str(error), "record": repr(record)}
        )


def dump_json_lenient(value: object) -> bytes:
    """One JSON line, whatever `value` holds; what orjson cannot encode is written by the
    standard library's encoder (integers beyond 64 bits) or as its ``repr``.

    It never raises: it is how a record that cannot be stored is set aside, and a record
    that could not be set aside would block the log.
    """
    try:
        return dump_json(value) + b"\n"
    except TypeError:
        pass
    try:
        return orjson.dumps(value, default=repr, option=orjson.OPT_NON_STR_KEYS) + b"\n"
    except TypeError:
        pass  # orjson refuses some values even with a default (integers over 64 bits)
    try:
        return json.dumps(value, default=repr, allow_nan=False).encode() + b"\n"
    except (TypeError, ValueError):
        return json.dumps({"unencodable": repr(value)}).encode() + b"\n"
