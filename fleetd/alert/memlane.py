"""The outbox's memory lane: notifications that leave the node while the database cannot be
written (disk full, read-only or immutable files, another process holding the write lock).

``MemoryOutbox`` has the delivery surface of ``fleetd.alert.outbox_store.OutboxStore`` (``pending``
by priority then id, ``rate_limited_until``, ``mark_*``, ``transaction``), so the same
``Delivery`` runs it: the urgent lane before change events, one lane strictly in order, the
receiver's 429 pausing the integration. It is bounded (``limit`` entries); when full it
forgets delivered entries first (they need not be written back), then the oldest
informational ones, then the oldest — each drop is counted and logged.

When storage returns, the dispatcher writes every entry to the durable outbox with its
state and its notification id unchanged (``OutboxStore.restore``): delivered ones as
delivered (never sent again), pending ones as pending with their attempts and retry time,
failed ones as failed. A receiver therefore sees each notification once across the switch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import wraps
from typing import Any, TypeVar, cast

from sqlalchemy import Connection

from fleetd.alert.outbox_store import (
    INFORMATIONAL,
    PENDING,
    RATE_LIMITED,
    SYNC_GROUP,
    NewEntry,
    OutboxEntry,
    delivered_changes,
    failed_changes,
    pending_entry,
    retry_changes,
    unseen,
)

MEMORY_LIMIT = 2000
F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    @wraps(method)
    def run(self: MemoryOutbox, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(F, run)


class MemoryOutbox:
    """A bounded outbox in memory, safe to use from several threads."""

    def __init__(self, limit: int = MEMORY_LIMIT) -> None:
        self._lock = threading.RLock()
        self.limit = limit
        self._entries: dict[int, OutboxEntry] = {}
        self._next_id = 1
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def has_pending(self) -> bool:
        return any(e.status == PENDING for e in list(self._entries.values()))

    # ------------------------------------------------------------------------------ writing
    @_locked
    def add(self, entries: Sequence[NewEntry], now: float) -> list[OutboxEntry]:
        """Queue entries as pending; one whose (integration, dedup_id) is held is skipped."""
        held = {(e.integration, e.dedup_id) for e in self._entries.values() if e.dedup_id}
        return [self._put(new, now) for new in unseen(entries, held)]

    @_locked
    def put_sync(self, new: NewEntry, now: float) -> None:
        """A newer sync state replaces the pending one of its integration."""
        for entry in self._entries.values():
            if (
                entry.integration == new.integration
                and entry.status == PENDING
                and entry.group_key == SYNC_GROUP
            ):
                self._entries[entry.id] = replace(entry, payload=new.payload)
                return
        self._put(new, now)

    @_locked
    def _put(self, new: NewEntry, now: float) -> OutboxEntry:
        entry = pending_entry(new, now, self._next_id)
        self._next_id += 1
        self._entries[entry.id] = entry
        self._bound()
        return entry

    def _bound(self) -> None:
        while len(self._entries) > self.limit:
            values = list(self._entries.values())
            victim = (
                next((e for e in values if e.status != PENDING), None)
                or next((e for e in values if e.priority >= INFORMATIONAL), None)
                or values[0]
            )
            del self._entries[victim.id]
            if victim.status == PENDING:
                self.dropped += 1

    @_locked
    def take(self) -> list[OutboxEntry]:
        """Every entry, in queue order, and forget them (they are being written back)."""
        out = list(self._entries.values())
        self._entries.clear()
        return out

    @_locked
    def put_back(self, entries: Sequence[OutboxEntry]) -> None:
        """Undo ``take`` (writing them back failed)."""
        merged = {e.id: e for e in entries} | self._entries
        self._entries = dict(sorted(merged.items()))

    # ------------------------------------------------- the delivery surface (OutboxStore's)
    @contextmanager
    def transaction(self) -> Iterator[Connection | None]:
        yield None

    @_locked
    def pending(self, integration: str, limit: int) -> list[OutboxEntry]:
        queue = [
            e
            for e in self._entries.values()
            if e.status == PENDING and e.integration == integration
        ]
        queue.sort(key=lambda e: (e.priority, e.id))
        return queue[:limit]

    @_locked
    def rate_limited_until(self, integration: str) -> float | None:
        times = [
            e.due_at
            for e in self._entries.values()
            if e.status == PENDING
            and e.integration == integration
            and e.last_status_code == RATE_LIMITED
        ]
        return max(times) if times else None

    @_locked
    def mark_sending(self, entry_id: int, now: float) -> None:
        entry = self._entries.get(entry_id)
        if entry is not None:
            self._entries[entry_id] = replace(entry, sending_since=now, attempts=entry.attempts + 1)

    @_locked
    def mark_delivered(self, _conn: Connection | None, entry_id: int, now: float) -> None:
        self._change(entry_id, delivered_changes(now))

    @_locked
    def mark_retry(self, entry_id: int, due_at: float, error: str, code: int | None) -> None:
        self._change(entry_id, retry_changes(due_at, error, code))

    @_locked
    def mark_failed(self, entry_id: int, now: float, error: str, code: int | None) -> None:
        self._change(entry_id, failed_changes(now, error, code))

    def _change(self, entry_id: int, changes: dict[str, Any]) -> None:
        """Apply an outcome's changes to one entry (one already dropped is left alone)."""
        entry = self._entries.get(entry_id)
        if entry is not None:
            self._entries[entry_id] = replace(entry, **changes)

    # ---------------------------------------------------------------------------- reporting
    @_locked
    def entries(self) -> list[OutboxEntry]:
        return list(self._entries.values())

    @_locked
    def pending_stats(self) -> dict[str, tuple[int, float]]:
        out: dict[str, tuple[int, float]] = {}
        for e in self._entries.values():
            if e.status != PENDING:
                continue
            count, oldest = out.get(e.integration, (0, e.created_at))
            out[e.integration] = (count + 1, min(oldest, e.created_at))
        return out
