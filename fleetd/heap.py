"""Hand the C heap's free pages back to the kernel now and then (glibc's ``malloc_trim``).

Once its windows are full, fleetd frees as much as it allocates: Python's live blocks
(``sys.getallocatedblocks``), the garbage collector's objects and SQLite's own heap stay
level from the first hour on. Its RSS still crept up for a day (+7 MB over 100k ticks,
docs/performance.md): glibc keeps what is freed inside its arenas, and the memory window's
value arrays and SQLite's page buffers, freed and allocated again at other sizes, leave
free pages scattered through them that only ``malloc_trim`` returns (since glibc 2.8 it
releases every whole free page of every arena, not only the top of the main one).

Elsewhere (musl, macOS) there is no ``malloc_trim``, and the trimmer does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from fleetd.logs import get_logger

log = get_logger("heap")

HEAP_TRIM_INTERVAL_S = 300.0  # a trim walks every arena: a few ms, once in five minutes

Trim = Callable[[int], int]


def libc_malloc_trim() -> Trim | None:
    """glibc's ``malloc_trim(pad)``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrimmer:
    """Trims the C heap at most once every ``interval`` seconds of ``now``."""

    def __init__(self, interval: float = HEAP_TRIM_INTERVAL_S, trim: Trim | None = None) -> None:
        self.interval = interval
        self._trim = trim
        self._next: float | None = None
        self.trims = 0

    @classmethod
    def for_this_libc(cls, interval: float = HEAP_TRIM_INTERVAL_S) -> HeapTrimmer:
        trim = libc_malloc_trim()
        if trim is None:
            log.info("heap_trim_unavailable", detail="the C library has no malloc_trim")
        return cls(interval, trim)

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe(self, now: float) -> bool:
        """Trim if ``interval`` has passed since the last trim (the first call only starts
        the count: the heap is young); True when it trimmed."""
        if self._trim is None:
            return False
        if self._next is None or now < self._next - self.interval:  # first call, or time went back
            self._next = now + self.interval
            return False
        if now < self._next:
            return False
        self._next = now + self.interval
        self._trim(0)
        self.trims += 1
        return True
