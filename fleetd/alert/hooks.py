"""The dispatcher's side of each delivery: chat threads, the Alertmanager sync log, and the
fleetd alert raised while a receiver rejects notifications."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from sqlalchemy import Connection

from fleetd.alert.book import AlertBook
from fleetd.alert.delivery import Sent
from fleetd.alert.entries import new_entry
from fleetd.alert.integrations import Integration
from fleetd.alert.notification import AlertRecord, Notification
from fleetd.alert.outbox_store import AlertLogEntry, OutboxStore
from fleetd.model import make_labels

SELF_ALERT = "FleetdNotificationsRejected"


def rejection_alert(
    node: str,
    integration: Integration,
    error: str | None,
    now: float,
    previous: AlertRecord | None,
) -> AlertRecord:
    """The alert saying a receiver rejects notifications (``error`` given) or accepts them
    again (``error`` None). Its labels, hence its fingerprint, name the receiver."""
    labels = make_labels(
        {
            "alertname": SELF_ALERT,
            "severity": "warning",
            "node": node,
            "receiver": integration.receiver,
            "integration": integration.name,
        }
    )
    fp = hashlib.sha256(repr(labels).encode()).hexdigest()[:16]
    starts = previous.starts_at if previous is not None and previous.firing else now
    summary = (
        f"{node}: receiver {integration.receiver} ({integration.name}) rejects notifications; "
        "fix its configuration"
    )
    return AlertRecord(
        fingerprint=fp,
        rule=SELF_ALERT,
        status="firing" if error is not None else "resolved",
        severity="warning",
        labels=labels,
        annotations=make_labels(
            {"summary": summary, "description": error or "the receiver accepts notifications"}
        ),
        starts_at=starts,
        ends_at=None if error is not None else now,
        received_at=now,
    )


class DispatchHooks:
    """Implements ``fleetd.alert.delivery.DeliveryHooks`` for one tick."""

    def __init__(
        self,
        store: OutboxStore,
        book: AlertBook,
        lock: threading.RLock,
        queued: Callable[[Iterable[str]], None],
        self_alert: Callable[[Integration, str | None, float], None],
    ) -> None:
        self._store = store
        self._book = book
        self._lock = lock
        self._queued = queued
        self._self_alert = self_alert

    def prepare(self, integration: Integration, notification: Notification) -> Notification:
        """A chat integration replies in the thread of the message its alerts are in, and a
        change event in the thread its first step started."""
        if not integration.notifier.threads or notification.thread is not None:
            return notification
        change = notification.change
        if notification.action == "change" and change is not None and change.thread:
            return notification.with_thread(
                self._store.get_thread_ref(integration.id, change.thread)
            )
        if notification.action != "notify":
            return notification
        fps = [a.fingerprint for a in notification.alerts]
        refs = self._store.get_refs(integration.id, fps)
        for alert in notification.alerts:
            found = refs.get(alert.fingerprint)
            if found is not None and found[0] == alert.starts_at:  # same firing episode
                return notification.with_thread(found[1])
        return notification

    def delivered(self, conn: Connection | None, sent: Sent) -> None:
        assert conn is not None  # the memory lane's hooks (OfflineHooks) defer this call
        integration, notification, now = sent.integration, sent.notification, sent.at
        if integration.mode == "sync":
            self._synced(conn, integration, notification, now)
            return
        ref = None if sent.receipt is None else sent.receipt.ref
        if ref is None:
            return
        change = notification.change
        if notification.action == "change" and change is not None and change.thread:
            if notification.thread is None:  # the thread's first message
                self._store.put_thread_ref(conn, integration.id, change.thread, ref, now)
            return
        if notification.action != "notify":
            return
        items = [(a.fingerprint, a.starts_at) for a in notification.alerts]
        self._store.put_refs(conn, integration.id, items, ref, now)
        if notification.thread is not None:  # a reply in the thread: bring the parent up to date
            update = replace(
                notification, action="update", reason="thread_updated", created_at=now, id=""
            )
            self._store.enqueue(conn, [new_entry(integration, update)], now)
            self._queued([integration.id])

    def _synced(
        self, conn: Connection, integration: Integration, notification: Notification, now: float
    ) -> None:
        """Alertmanager has this state now: resends count from here."""
        with self._lock:
            for alert in notification.alerts:
                sent = AlertLogEntry(alert.status, alert.starts_at, now)
                self._store.put_alert_log(conn, integration.id, alert.fingerprint, sent)
                if alert.fingerprint in self._book.alerts:
                    self._book.alert_log[(integration.id, alert.fingerprint)] = sent

    def rejected(self, integration: Integration, error: str, now: float) -> None:
        self._self_alert(integration, error, now)

    def recovered(self, integration: Integration, now: float) -> None:
        self._self_alert(integration, None, now)
