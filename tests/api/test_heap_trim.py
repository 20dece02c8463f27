"""The C heap is trimmed after large decisions, from a background thread, rate-limited."""

from __future__ import annotations

import threading
import time

from app.memory import HeapTrimmer, limit_arenas, trim_heap


def test_trim_heap_and_limit_arenas_call_into_the_c_library() -> None:
    big = [bytearray(1 << 20) for _ in range(64)]  # 64 MiB the allocator will hold freed
    del big
    assert isinstance(trim_heap(), bool)
    assert limit_arenas(0) is False  # 0 means "keep glibc's default": nothing is set


def test_the_trimmer_trims_only_after_a_note_and_at_most_once_per_interval() -> None:
    trimmed = threading.Event()
    calls: list[float] = []

    def trim() -> bool:
        calls.append(time.monotonic())
        trimmed.set()
        return True

    trimmer = HeapTrimmer(interval_s=0.05, trim=trim)
    trimmer.start()
    try:
        time.sleep(0.2)
        assert calls == []  # nothing large was served: no trim
        for _ in range(100):
            trimmer.note()
        assert trimmed.wait(5.0)
        time.sleep(0.2)
        assert len(calls) == 1  # a hundred notes within an interval: one trim
    finally:
        trimmer.stop()


def test_a_zero_interval_never_starts_a_thread() -> None:
    trimmer = HeapTrimmer(interval_s=0.0, trim=lambda: True)
    trimmer.start()
    trimmer.note()
    trimmer.stop()
    assert trimmer.trims == 0
