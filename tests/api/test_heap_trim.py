"""The C heap is trimmed after large decisions, from a background thread, rate-limited."""

from __future__ import annotations

import resource
import threading
import time

from app.memory import HeapTrimmer, keep_blocks_in_heap, limit_arenas, trim_heap


def test_trim_heap_and_limit_arenas_call_into_the_c_library() -> None:
    big = [bytearray(1 << 20) for _ in range(64)]  # 64 MiB the allocator will hold freed
    del big
    assert isinstance(trim_heap(), bool)
    assert limit_arenas(0) is False  # 0 means "keep glibc's default": nothing is set


def test_blocks_kept_in_the_heap_are_reused_without_mapping_memory_afresh() -> None:
    assert keep_blocks_in_heap(0) is False  # 0 keeps glibc's adaptive thresholds
    assert keep_blocks_in_heap(32 << 20) is True

    def fill_and_free() -> int:
        """Page faults taken by writing six 4 MiB blocks at once (6,144 pages), as a
        large decision's arrays are, and freeing them."""
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [bytearray(4 << 20) for _ in range(6)]
        for block in blocks:
            block[::4096] = b"x" * 1024
        del blocks
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    fill_and_free()
    # The blocks freed stay in the heap and the next ones reuse their pages. Under
    # glibc's adaptive thresholds the 24 MiB freed at once pass the trim threshold (twice
    # the largest block freed) and go back to the system: each round then takes a
    # fault per page again (6,112 of 6,144 pages, measured).
    assert min(fill_and_free() for _ in range(3)) < 500


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
