"""Keep the service's C heap from growing with the number of large decisions served.

A decision on a large snapshot allocates and frees tens of megabytes: the request body,
the decoded snapshot, the engine's working objects, the encoded decision and the log's
copy of them. Python returns what it frees to the C allocator, and glibc's `malloc`
keeps freed memory in its arenas rather than handing it back to the system: with a few
decision threads each getting an arena of its own, the resident size climbed by about
30 % over the first 2,000 large decisions and stayed there (docs/benchmarks.md,
"Memory"), with no Python object left behind.

Two glibc knobs bound that, and a third keeps large decisions from paying for it,
all applied in the serving process only:

* `mallopt(M_ARENA_MAX, n)` at start-up, before any decision thread exists, caps the
  arenas (glibc's default is eight per core); threads share them, and the interpreter's
  lock serialises most allocation anyway.
* `malloc_trim(0)` from a background thread, at most once per interval and only after
  a large decision, gives the free pages of every arena back (`madvise`), so the
  resident size returns to what the live objects need. ctypes releases the
  interpreter's lock for the call, so decisions keep running meanwhile.
* `mallopt(M_MMAP_THRESHOLD, n)` and `mallopt(M_TRIM_THRESHOLD, 2n)` at start-up keep
  blocks of up to `n` bytes in the heap between those trims. With glibc's adaptive
  defaults, large blocks freed together (a large request's body and snapshot, an
  `oasis` decision's arrays) go back to the system and the next decision maps them
  afresh, a page fault per page: an `oasis` decision on the large example over HTTP took
  820 to 970 faults and 2.1 to 2.6 ms of system time, against 340 to 410 and 1.5 to
  1.7 ms with the blocks kept (`python -m evidence.bench_health`; docs/benchmarks.md,
  "Large blocks kept in the heap").

Elsewhere (another C library, another system) all three are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

# glibc's mallopt parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None  # not glibc
    return libc


_LIBC = _glibc()


def keep_blocks_in_heap(largest_bytes: int) -> bool:
    """Serve blocks of up to `largest_bytes` from the heap, and trim its top only past
    twice that (call at start-up); whether it took. 0 keeps glibc's adaptive thresholds.

    Both are fixed together: fixing either alone ends glibc's adaptation of the other,
    and then large blocks are mapped afresh (or the heap's top trimmed) every time.
    """
    if _LIBC is None or largest_bytes < 1:
        return False
    # Where glibc refuses the threshold (older versions cap it), both stay adaptive.
    if not _LIBC.mallopt(M_MMAP_THRESHOLD, largest_bytes):
        return False
    return bool(_LIBC.mallopt(M_TRIM_THRESHOLD, 2 * largest_bytes))


def limit_arenas(arenas: int) -> bool:
    """Cap glibc's malloc arenas (call before starting threads); whether it took."""
    if _LIBC is None or arenas < 1:
        return False
    return bool(_LIBC.mallopt(M_ARENA_MAX, arenas))


def trim_heap() -> bool:
    """Give free C-heap pages back to the system; whether any were released."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


class HeapTrimmer:
    """Trims the C heap from its own thread, at most once per `interval_s`, only when
    :meth:`note` was called since the last trim (a large decision was served)."""

    def __init__(self, interval_s: float, trim: Callable[[], bool] = trim_heap) -> None:
        self.interval_s = interval_s
        self._trim = trim
        self._pending = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.trims = 0

    def note(self) -> None:
        """Something large was freed (or is about to be): trim at the next tick."""
        self._pending = True

    def start(self) -> None:
        if self.interval_s <= 0 or _LIBC is None:
            return
        self._thread = threading.Thread(target=self._run, name="heap-trimmer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self._pending:
                continue
            self._pending = False
            try:
                self._trim()
            except Exception:  # never let a failed trim end the thread
                logger.exception("malloc_trim failed")
            self.trims += 1
