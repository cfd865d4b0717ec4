"""Share one computation among concurrent callers without serving anything stale.

When every scraper of a fleet asks for /metrics or /api/v1/status at the same moment, each
answer costs the same reads of the store and the same rendering. ``Coalesced`` runs the
computation for a caller only when no run that *began after that caller arrived* has
finished; callers that arrive while a run is under way wait for it, then either share the
next run (one of them performs it) or, if that one already finished, take its result. So a
burst costs about two runs, and every caller still gets a result computed after it asked:
sequential callers (a test that acts, then reads) always see a fresh run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Coalesced(Generic[T]):
    """``fn()`` for each caller, shared by callers that overlap (see the module)."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._begun = 0  # runs begun (changed only under the lock)
        self._done = 0  # the number of the last run that finished
        self._result: tuple[T | None, BaseException | None] = (None, None)
        self.runs = 0

    def __call__(self) -> T:
        arrived = self._begun  # any run numbered above this began after we arrived
        with self._lock:
            if self._done <= arrived:
                self._begun += 1
                number = self._begun
                try:
                    self._result = (self._fn(), None)
                except Exception as exc:  # shared too: waiting callers see the same failure
                    self._result = (None, exc)
                self._done = number
                self.runs += 1
            value, error = self._result
        if error is not None:
            raise error
        return value  # type: ignore[return-value]
