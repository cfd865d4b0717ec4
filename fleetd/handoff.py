"""The hand-over of the rules' transitions to the alert outbox and to remediation.

Both receivers write the database before they act. While it cannot be written (locked, disk
full) transitions wait here in memory, in order, and go out once it can: none is lost or
reordered, and the poll never waits for remediation (a run's ``systemctl stop`` may hold it
for minutes while the watchdog expects every poll). The alert state is saved only once the
transitions it reflects are durable: saved first, a crash would lose them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from sqlalchemy import Connection

from fleetd.logs import get_logger
from fleetd.model import Transition
from fleetd.rules.engine import RuleEngine
from fleetd.rules.state import StateChanges, merge_changes
from fleetd.rules.state_store import AlertStateStore, save_changes

log = get_logger("daemon.handoff")


class Outbox(Protocol):
    """The alert dispatcher as the hand-off sees it (``fleetd.alert.dispatch.Dispatcher``)."""

    def submit(self, transitions: Sequence[Transition], now: float) -> object: ...


class RemediationInbox(Protocol):
    """Remediation as the hand-off sees it (``fleetd.remedy.service.Remediation``)."""

    def handle(self, transitions: list[Transition], now: float) -> object: ...

    def try_handle(self, transitions: list[Transition], now: float) -> object | None: ...


class Handoff:
    """Three queues and a lock: for the outbox, arriving for remediation, and taken by
    remediation but not yet accepted."""

    def __init__(
        self,
        outbox: Outbox,
        remediation: RemediationInbox | None,
        storage_down: Callable[[], bool],
    ) -> None:
        self._outbox = outbox
        self._remediation = remediation
        self._storage_down = storage_down
        self._to_notify: list[Transition] = []
        self._arriving: deque[Transition] = deque()  # from the poll: appending never waits
        self._to_remediate: list[Transition] = []
        self._lock = threading.Lock()  # one hand-over to remediation at a time

    def submit(self, transitions: list[Transition], now: float) -> None:
        """From an evaluation: to the outbox at once, to remediation unless storage is down
        (then the remediation job hands them over, and may wait)."""
        self._to_notify.extend(transitions)
        self._arriving.extend(transitions)
        try:
            if self._to_notify:
                self._outbox.submit(self._to_notify, now)
                self._to_notify.clear()
        except Exception as exc:
            log.warning("alert_submit_deferred", pending=len(self._to_notify), error=repr(exc))
        if not self._storage_down():
            self.to_remediation(now, wait=False)

    def to_remediation(self, now: float, *, wait: bool) -> None:
        """Give waiting transitions to remediation, in order. Without ``wait`` (the poll) a
        run's step that holds remediation leaves them queued for the next poll or the
        remediation job, whichever comes first."""
        if wait:
            self._lock.acquire()
        elif not self._lock.acquire(blocking=False):
            return
        try:
            while self._arriving:
                self._to_remediate.append(self._arriving.popleft())
            if self._remediation is None:
                self._to_remediate.clear()
                return
            if not self._to_remediate:
                return
            try:
                if wait:
                    self._remediation.handle(self._to_remediate, now)
                elif self._remediation.try_handle(self._to_remediate, now) is None:
                    return
                self._to_remediate.clear()
            except Exception as exc:
                log.warning(
                    "remediation_handoff_deferred", pending=len(self._to_remediate), error=repr(exc)
                )
        finally:
            self._lock.release()

    def pending(self) -> bool:
        """Transitions not yet durable in the outbox or remediation's journal."""
        return bool(self._to_notify or self._arriving or self._to_remediate)


class AlertStateKeeper:
    """Saves the engine's alert state, or holds it (merged with the next evaluation's) while a
    hand-off or the database is pending, so the end of an outage costs one transaction.

    Most evaluations change nothing but the evaluation time. ``save(ride=True)`` leaves such
    a save to the poll's own transaction (``ride``, then ``rode``): one commit and one fsync
    per poll instead of two. Anything else is saved at once, in its own transaction.
    """

    def __init__(self, store: AlertStateStore, engine: RuleEngine) -> None:
        self._store = store
        self._engine = engine
        self._lock = threading.Lock()  # the poll's transaction rides outside the eval lock
        self._unsaved: list[StateChanges] = []
        self._held = False
        self._riding: StateChanges | None = None

    def save(self, *, hold: bool = False, ride: bool = False) -> None:
        with self._lock:
            pending = merge_changes([*self._unsaved, self._engine.take_changes()])
            self._unsaved = [pending]
            self._held = hold
            if hold or (ride and not pending.upserts and not pending.deletes):
                return
        try:
            self._store.save(pending)
        except Exception as exc:
            log.warning("alert_state_save_failed", error=repr(exc))
            return
        with self._lock:
            if self._unsaved and self._unsaved[0] is pending:
                self._unsaved = []

    def ride(self, conn: Connection) -> None:
        """Inside the poll's transaction: write the evaluation time ``save`` left to it."""
        with self._lock:
            pending = self._unsaved[0] if self._unsaved and not self._held else None
            if pending is None or pending.upserts or pending.deletes:
                return  # held, or saved at once: nothing rides
            if conn.engine is not self._store.db.engine:
                return  # the store moved to a database in memory: the state stays put
            self._riding = pending
        save_changes(conn, pending)

    def rode(self, committed: bool) -> None:
        """After the poll's transaction: what rode with it is saved (or kept for the next)."""
        with self._lock:
            riding, self._riding = self._riding, None
            if committed and riding is not None and self._unsaved and self._unsaved[0] is riding:
                self._unsaved = []
