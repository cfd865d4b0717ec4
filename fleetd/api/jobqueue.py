"""The HTTP server's queue of complete requests, waking the most recently idle handler first.

``queue.Queue`` wakes the handler that has waited longest, so a steady trickle of requests
(a scrape every few seconds) went round all sixteen handler threads in turn, and each one
kept its own glibc arena and its stack warm: ~9.5 MB more RSS than one handler, still
creeping up a day later (docs/performance.md, footprint round 6). Here an idle handler
waits on its own event, and a new request goes to the one that went idle last: the trickle
stays on one warm thread, while a burst still spreads over the whole pool.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class _Idle(Generic[T]):
    __slots__ = ("item", "ready")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.item: T | None = None


class WarmQueue(Generic[T]):
    """A bounded FIFO of items; ``get`` blocks, and the last handler to go idle is served
    first. ``put_nowait`` raises ``queue.Full`` and ``get_nowait`` ``queue.Empty``, as
    ``queue.Queue`` does; the bound counts only items no handler has taken."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._items: deque[T] = deque()
        self._idle: list[_Idle[T]] = []  # a stack: the last to go idle is woken first
        self._lock = threading.Lock()

    def put_nowait(self, item: T) -> None:
        with self._lock:
            if self._idle:
                idle = self._idle.pop()
                idle.item = item
                idle.ready.set()
                return
            if len(self._items) >= self._maxsize:
                raise queue.Full
            self._items.append(item)

    def get(self) -> T:
        with self._lock:
            if self._items:
                return self._items.popleft()
            idle: _Idle[T] = _Idle()
            self._idle.append(idle)
        idle.ready.wait()
        return cast(T, idle.item)  # set before ready

    def get_nowait(self) -> T:
        with self._lock:
            if not self._items:
                raise queue.Empty
            return self._items.popleft()
