"""Reads kept between writes: for a database this process is the only writer of.

A journal or a per-node lease is the one writer of its tables in the node's database, so
what it read stays true until one of its own writes ends. ``writes_on(db)`` is the counter
of those writes, shared by every reader over the same ``Database`` (the remediation's
journal and the reliability report's are two objects over one database: a run saved by
one must be seen by the other), and ``Writes.kept`` the cache built on it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

from fleetd.store.db import Database

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class Writes:
    """How many writes have ended on one database (moved on after each, committed or not)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # two writes ending at once must both count
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def ended(self) -> None:
        """A write transaction ended: every kept read is read afresh."""
        with self._lock:
            self._count += 1

    def kept(self, cache: dict[_K, tuple[int, _V]], key: _K, read: Callable[[], _V]) -> _V:
        """``read()``, or what it gave last for ``key`` if no write ended since; a value read
        while a write ended is not kept (it may predate that write)."""
        count = self._count
        found = cache.get(key)
        if found is not None and found[0] == count:
            return found[1]
        value = read()
        if self._count == count:
            cache[key] = (count, value)
        return value


_ON: weakref.WeakKeyDictionary[Database, Writes] = weakref.WeakKeyDictionary()
_ON_LOCK = threading.Lock()


def writes_on(db: Database) -> Writes:
    """The write counter of ``db``, one per Database object."""
    with _ON_LOCK:
        found = _ON.get(db)
        if found is None:
            found = _ON[db] = Writes()
        return found
