"""Alert delivery state: the alerts being notified, the notification logs, the outbox.

Everything the dispatcher must not forget across a crash lives here, in the same database as
the rest of fleetd's state:

* ``alert_notify_alerts`` — the latest state of every alert the dispatcher still has work for;
  ``Dispatcher.submit`` writes it before returning, so a crash right after loses nothing.
* ``alert_notify_log`` — per integration and alert group, what was last notified (firing and
  resolved fingerprints, when): Alertmanager's notification log, which is what stops a
  restart or a re-submitted transition from notifying twice.
* ``alert_notify_alert_log`` — the same per alert, for integrations that notify alert by alert
  (PagerDuty: one dedup key per alert) or keep a remote store in step (Alertmanager).
* ``alert_outbox`` — every notification, written before it is sent; delivery marks it
  delivered or failed. Pending entries of one integration go out by ``priority`` (0: pages,
  resolves and acknowledgements; 1: change events, chat edits, info-only alerts), then in id
  order within a priority, so a page never waits behind a burst of change events.
* ``alert_message_refs`` — where each alert's chat message lives (Slack channel and ts), so
  the resolve can reply in its thread and edit it.
* ``alert_thread_refs`` — where the first message of each change-event thread (a remediation
  run) lives, so its later steps reply in that thread, across restarts too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    delete,
    func,
    insert,
    select,
    tuple_,
    update,
)

from fleetd.alert.notification import AlertRecord, MessageRef
from fleetd.model import make_labels
from fleetd.store.db import Database
from fleetd.store.rows import batches, read_rows
from fleetd.store.schema import METADATA
from fleetd.store.upsert import upsert, upsert_rows

_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements INTEGER keys only

alerts_table = Table(
    "alert_notify_alerts",
    METADATA,
    Column("fingerprint", String(32), primary_key=True),
    Column("rule", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("labels", Text, nullable=False),
    Column("annotations", Text, nullable=False),
    Column("value", Float, nullable=True),
    Column("starts_at", Float, nullable=False),
    Column("ends_at", Float, nullable=True),
    Column("received_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

group_log_table = Table(
    "alert_notify_log",
    METADATA,
    Column("integration", String(255), primary_key=True),
    Column("group_hash", String(64), primary_key=True),
    Column("group_key", Text, nullable=False),
    Column("firing", Text, nullable=False),
    Column("resolved", Text, nullable=False),
    Column("sent_at", Float, nullable=False),
)

alert_log_table = Table(
    "alert_notify_alert_log",
    METADATA,
    Column("integration", String(255), primary_key=True),
    Column("fingerprint", String(32), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("starts_at", Float, nullable=False),
    Column("sent_at", Float, nullable=False),
)

outbox_table = Table(
    "alert_outbox",
    METADATA,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("integration", String(255), nullable=False),
    Column("receiver", String(255), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("action", String(16), nullable=False),
    Column("group_key", Text, nullable=False),
    Column("dedup_id", String(255), nullable=True),
    Column("payload", Text, nullable=False),
    Column("status", String(16), nullable=False),  # pending | delivered | failed
    Column("priority", SmallInteger, nullable=False, default=0),  # lower goes first
    Column("created_at", Float, nullable=False),
    Column("due_at", Float, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("sending_since", Float, nullable=True),  # set while an attempt is under way
    Column("last_error", Text, nullable=True),
    Column("last_status_code", Integer, nullable=True),
    Column("finished_at", Float, nullable=True),
    UniqueConstraint("integration", "dedup_id", name="uq_alert_outbox_dedup"),
    Index("ix_alert_outbox_queue", "status", "integration", "priority", "id"),
)

refs_table = Table(
    "alert_message_refs",
    METADATA,
    Column("integration", String(255), primary_key=True),
    Column("fingerprint", String(32), primary_key=True),
    Column("starts_at", Float, nullable=False),
    Column("channel", String(255), nullable=False),
    Column("ts", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
)

thread_refs_table = Table(
    "alert_thread_refs",
    METADATA,
    Column("integration", String(255), primary_key=True),
    Column("thread_hash", String(64), primary_key=True),
    Column("thread", Text, nullable=False),
    Column("channel", String(255), nullable=False),
    Column("ts", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
)

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
URGENT, INFORMATIONAL = 0, 1  # outbox priorities: lower goes first
RATE_LIMITED = 429
SYNC_GROUP = "sync"


def group_hash(group_key: str) -> str:
    """A fixed-length key for a group key of any length."""
    return hashlib.sha256(group_key.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class GroupLogEntry:
    """What one integration was last told about one alert group (Alertmanager's nflog entry)."""

    firing: frozenset[str]
    resolved: frozenset[str]
    sent_at: float


@dataclass(frozen=True, slots=True)
class AlertLogEntry:
    """What one integration was last told about one alert."""

    status: str  # firing | resolved
    starts_at: float
    sent_at: float


@dataclass(frozen=True, slots=True)
class NewEntry:
    """An outbox entry to write."""

    integration: str
    receiver: str
    kind: str
    action: str
    group_key: str
    payload: str
    dedup_id: str | None = None
    priority: int = URGENT


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    id: int
    integration: str
    receiver: str
    kind: str
    action: str
    group_key: str
    dedup_id: str | None
    payload: str
    status: str
    priority: int
    created_at: float
    due_at: float
    attempts: int
    sending_since: float | None
    last_error: str | None
    last_status_code: int | None
    finished_at: float | None


class OutboxStore:
    """Reads and writes the delivery tables; writers take the caller's transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------------------ alerts
    def upsert_alerts(self, conn: Connection, records: Sequence[AlertRecord], now: float) -> None:
        upsert_rows(conn, alerts_table, ["fingerprint"], [_alert_row(r, now) for r in records])

    def load_alerts(self) -> list[AlertRecord]:
        return [
            AlertRecord(
                fingerprint=r["fingerprint"],
                rule=r["rule"],
                status="firing" if r["status"] == "firing" else "resolved",
                severity=r["severity"],
                labels=make_labels(json.loads(r["labels"])),
                annotations=make_labels(json.loads(r["annotations"])),
                value=r["value"],
                starts_at=r["starts_at"],
                ends_at=r["ends_at"],
                received_at=r["received_at"],
            )
            for r in read_rows(self.db, select(alerts_table))
        ]

    def delete_alerts(self, conn: Connection, fingerprints: Iterable[str]) -> None:
        """Forget alerts that have nothing left to notify, with their per-alert logs."""
        for chunk in batches(fingerprints, 500):
            conn.execute(delete(alerts_table).where(alerts_table.c.fingerprint.in_(chunk)))
            conn.execute(delete(alert_log_table).where(alert_log_table.c.fingerprint.in_(chunk)))

    # ------------------------------------------------------------------------- notify logs
    def load_group_log(self) -> dict[tuple[str, str], GroupLogEntry]:
        return {
            (r["integration"], r["group_hash"]): GroupLogEntry(
                frozenset(json.loads(r["firing"])),
                frozenset(json.loads(r["resolved"])),
                r["sent_at"],
            )
            for r in read_rows(self.db, select(group_log_table))
        }

    def put_group_log(
        self,
        conn: Connection,
        integration: str,
        group_key: str,
        entry: GroupLogEntry,
    ) -> None:
        t = group_log_table
        key = group_hash(group_key)
        values = {
            "group_key": group_key,
            "firing": json.dumps(sorted(entry.firing)),
            "resolved": json.dumps(sorted(entry.resolved)),
            "sent_at": entry.sent_at,
        }
        upsert(conn, t, {"integration": integration, "group_hash": key}, values)

    def delete_group_log(self, conn: Connection, integration: str, group_key: str) -> None:
        t = group_log_table
        conn.execute(
            delete(t).where(
                and_(t.c.integration == integration, t.c.group_hash == group_hash(group_key))
            )
        )

    def forget_integration(self, conn: Connection, integration: str) -> None:
        """Drop every notification-log entry of one integration."""
        conn.execute(delete(group_log_table).where(group_log_table.c.integration == integration))
        conn.execute(delete(alert_log_table).where(alert_log_table.c.integration == integration))

    def load_alert_log(self) -> dict[tuple[str, str], AlertLogEntry]:
        return {
            (r["integration"], r["fingerprint"]): AlertLogEntry(
                r["status"], r["starts_at"], r["sent_at"]
            )
            for r in read_rows(self.db, select(alert_log_table))
        }

    def put_alert_log(
        self, conn: Connection, integration: str, fingerprint: str, entry: AlertLogEntry
    ) -> None:
        t = alert_log_table
        values = {"status": entry.status, "starts_at": entry.starts_at, "sent_at": entry.sent_at}
        upsert(conn, t, {"integration": integration, "fingerprint": fingerprint}, values)

    def delete_alert_log(self, conn: Connection, integration: str, fingerprint: str) -> None:
        t = alert_log_table
        conn.execute(
            delete(t).where(and_(t.c.integration == integration, t.c.fingerprint == fingerprint))
        )

    # ------------------------------------------------------------------------------ outbox
    def enqueue(self, conn: Connection, entries: Sequence[NewEntry], now: float) -> int:
        """Write entries as pending; one whose (integration, dedup_id) exists is skipped."""
        return _insert_new(conn, entries, lambda e: _entry_row(e, now))

    def restore(self, conn: Connection, entries: Sequence[OutboxEntry]) -> int:
        """Write entries kept in memory while storage was down, each with its state
        (delivered, pending with its attempts and retry time, failed) and its payload, hence
        its notification id, unchanged; ids are the database's. One whose (integration,
        dedup_id) is already stored is skipped. Returns how many were written."""
        return _insert_new(conn, entries, _restored_row)

    @contextmanager
    def transaction(self) -> Iterator[Connection | None]:
        """The transaction a delivery's outcome is recorded in."""
        with self.db.begin() as conn:
            yield conn

    def put_sync(self, conn: Connection, entry: NewEntry, now: float) -> None:
        """Replace the payload of the integration's pending sync entry, or queue a new one.

        A sync payload is the whole current state, so a newer one supersedes an older one
        that has not gone out yet; its retry schedule is kept.
        """
        t = outbox_table
        done = conn.execute(
            update(t)
            .where(
                and_(
                    t.c.integration == entry.integration,
                    t.c.status == PENDING,
                    t.c.group_key == SYNC_GROUP,
                )
            )
            .values(payload=entry.payload)
        )
        if done.rowcount == 0:
            conn.execute(insert(t).values(**_entry_row(entry, now)))

    def pending(self, integration: str, limit: int) -> list[OutboxEntry]:
        """The next pending entries of one integration, in the order they must go out:
        by priority, then in the order they were queued."""
        t = outbox_table
        query = (
            select(t)
            .where(and_(t.c.status == PENDING, t.c.integration == integration))
            .order_by(t.c.priority, t.c.id)
            .limit(limit)
        )
        return [OutboxEntry(**row) for row in read_rows(self.db, query)]

    def rate_limited_until(self, integration: str) -> float | None:
        """When the integration's last 429 lets it send again (the latest retry time of its
        pending entries that were answered 429), or None. Kept in the entries themselves, so
        a restart honours a receiver's Retry-After too."""
        t = outbox_table
        query = select(func.max(t.c.due_at)).where(
            and_(
                t.c.status == PENDING,
                t.c.integration == integration,
                t.c.last_status_code == RATE_LIMITED,
            )
        )
        with self.db.engine.connect() as conn:
            found = conn.execute(query).scalar()
        return None if found is None else float(found)

    def entries(self, integration: str | None = None) -> list[OutboxEntry]:
        """Every stored entry (tests, the API's delivery view)."""
        t = outbox_table
        query = select(t).order_by(t.c.id)
        if integration is not None:
            query = query.where(t.c.integration == integration)
        return [OutboxEntry(**row) for row in read_rows(self.db, query)]

    def mark_sending(self, entry_id: int, now: float) -> None:
        """Recorded before the HTTP call: a crash mid-send is visible after restart."""
        with self.db.begin() as conn:
            _set(conn, entry_id, sending_since=now, attempts=outbox_table.c.attempts + 1)

    def mark_delivered(self, conn: Connection | None, entry_id: int, now: float) -> None:
        assert conn is not None
        _set(conn, entry_id, **delivered_changes(now))

    def mark_retry(self, entry_id: int, due_at: float, error: str, code: int | None) -> None:
        with self.db.begin() as conn:
            _set(conn, entry_id, **retry_changes(due_at, error, code))

    def mark_failed(self, entry_id: int, now: float, error: str, code: int | None) -> None:
        with self.db.begin() as conn:
            _set(conn, entry_id, **failed_changes(now, error, code))

    def fail_unknown(self, known: set[str], now: float) -> dict[str, int]:
        """Mark pending entries of integrations not in ``known`` failed; count them by id."""
        t = outbox_table
        stats = self.pending_stats()
        unknown = {i: n for i, (n, _) in stats.items() if i not in known}
        if unknown:
            with self.db.begin() as conn:
                conn.execute(
                    update(t)
                    .where(and_(t.c.status == PENDING, t.c.integration.in_(list(unknown))))
                    .values(
                        status=FAILED,
                        finished_at=now,
                        last_error="integration removed from the configuration",
                    )
                )
        return unknown

    def pending_stats(self) -> dict[str, tuple[int, float]]:
        """Per integration: pending entries and the creation time of the oldest."""
        t = outbox_table
        query = (
            select(t.c.integration, func.count(), func.min(t.c.created_at))
            .where(t.c.status == PENDING)
            .group_by(t.c.integration)
        )
        with self.db.engine.connect() as conn:
            return {row[0]: (int(row[1]), float(row[2])) for row in conn.execute(query)}

    def purge(self, now: float, retention: float) -> int:
        """Delete delivered and failed entries older than ``retention``, and stale refs."""
        t = outbox_table
        cutoff = now - retention
        with self.db.begin() as conn:
            gone = conn.execute(
                delete(t).where(and_(t.c.status != PENDING, t.c.finished_at < cutoff))
            ).rowcount
            conn.execute(delete(refs_table).where(refs_table.c.created_at < now - 7 * retention))
            threads = thread_refs_table
            conn.execute(delete(threads).where(threads.c.created_at < now - 7 * retention))
        return int(gone or 0)

    # -------------------------------------------------------------------------------- refs
    def get_refs(
        self, integration: str, fingerprints: Sequence[str]
    ) -> dict[str, tuple[float, MessageRef]]:
        t = refs_table
        out: dict[str, tuple[float, MessageRef]] = {}
        with self.db.engine.connect() as conn:
            for chunk in batches(fingerprints, 500):
                query = select(t).where(
                    and_(t.c.integration == integration, t.c.fingerprint.in_(chunk))
                )
                for r in conn.execute(query).mappings():
                    out[r["fingerprint"]] = (r["starts_at"], MessageRef(r["channel"], r["ts"]))
        return out

    def put_refs(
        self,
        conn: Connection,
        integration: str,
        items: Iterable[tuple[str, float]],
        ref: MessageRef,
        now: float,
    ) -> None:
        """Remember that these alerts (fingerprint, episode start) live in message ``ref``."""
        t = refs_table
        for fingerprint, starts_at in items:
            values = {
                "starts_at": starts_at,
                "channel": ref.channel,
                "ts": ref.ts,
                "created_at": now,
            }
            upsert(conn, t, {"integration": integration, "fingerprint": fingerprint}, values)

    def get_thread_ref(self, integration: str, thread: str) -> MessageRef | None:
        """The first message of change-event thread ``thread`` on this integration, if any."""
        t = thread_refs_table
        query = select(t.c.channel, t.c.ts).where(
            and_(t.c.integration == integration, t.c.thread_hash == group_hash(thread))
        )
        with self.db.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else MessageRef(row[0], row[1])

    def put_thread_ref(
        self, conn: Connection, integration: str, thread: str, ref: MessageRef, now: float
    ) -> None:
        """Remember that thread ``thread`` starts at message ``ref`` (the first one wins)."""
        t = thread_refs_table
        key = group_hash(thread)
        found = conn.execute(
            select(t.c.ts).where(and_(t.c.integration == integration, t.c.thread_hash == key))
        ).first()
        if found is None:
            conn.execute(
                insert(t).values(
                    integration=integration,
                    thread_hash=key,
                    thread=thread,
                    channel=ref.channel,
                    ts=ref.ts,
                    created_at=now,
                )
            )


def _alert_row(record: AlertRecord, now: float) -> dict[str, object]:
    return {
        "fingerprint": record.fingerprint,
        "rule": record.rule,
        "status": record.status,
        "severity": record.severity,
        "labels": json.dumps(dict(record.labels), sort_keys=True),
        "annotations": json.dumps(dict(record.annotations), sort_keys=True),
        "value": record.value,
        "starts_at": record.starts_at,
        "ends_at": record.ends_at,
        "received_at": record.received_at,
        "updated_at": now,
    }


def pending_entry(entry: NewEntry, now: float, entry_id: int = 0) -> OutboxEntry:
    """``entry`` queued at ``now``, before its first attempt (``entry_id``: the memory lane's;
    in the database the row's id is the database's): every field of ``entry``, then the
    queue's own."""
    return OutboxEntry(
        id=entry_id,
        **asdict(entry),
        status=PENDING,
        created_at=now,
        due_at=now,
        attempts=0,
        sending_since=None,
        last_error=None,
        last_status_code=None,
        finished_at=None,
    )


def _entry_row(entry: NewEntry, now: float) -> dict[str, object]:
    return _restored_row(pending_entry(entry, now))


def _restored_row(entry: OutboxEntry) -> dict[str, object]:
    row = asdict(entry)
    del row["id"]
    row["sending_since"] = None
    return row


_Entry = TypeVar("_Entry", NewEntry, OutboxEntry)


def _insert_new(
    conn: Connection, entries: Sequence[_Entry], to_row: Callable[[_Entry], dict[str, object]]
) -> int:
    """Insert ``to_row`` of each entry whose (integration, dedup_id) is not stored yet (nor
    earlier in ``entries``); returns how many were written."""
    t = outbox_table
    keyed = [(e.integration, e.dedup_id) for e in entries if e.dedup_id is not None]
    seen: set[tuple[str, str]] = set()
    for chunk in batches(keyed, 200):
        found = conn.execute(
            select(t.c.integration, t.c.dedup_id).where(
                tuple_(t.c.integration, t.c.dedup_id).in_(chunk)
            )
        )
        seen.update((row[0], row[1]) for row in found)
    rows = [to_row(e) for e in unseen(entries, seen)]
    if rows:
        conn.execute(insert(t), rows)
    return len(rows)


def unseen(entries: Iterable[_Entry], seen: set[tuple[str, str]]) -> Iterator[_Entry]:
    """The entries whose (integration, dedup_id) is not in ``seen`` nor earlier in
    ``entries``; ``seen`` grows by those yielded. An entry without a dedup_id always is."""
    for e in entries:
        if e.dedup_id is not None:
            if (e.integration, e.dedup_id) in seen:
                continue
            seen.add((e.integration, e.dedup_id))
        yield e


# What an attempt's outcome changes in its entry: the same in the database and in the memory
# lane (fleetd.alert.memlane).
def delivered_changes(now: float) -> dict[str, Any]:
    return {"status": DELIVERED, "finished_at": now, "sending_since": None}


def retry_changes(due_at: float, error: str, code: int | None) -> dict[str, Any]:
    return {"due_at": due_at, "last_error": error, "last_status_code": code, "sending_since": None}


def failed_changes(now: float, error: str, code: int | None) -> dict[str, Any]:
    return {
        "status": FAILED,
        "finished_at": now,
        "last_error": error,
        "last_status_code": code,
        "sending_since": None,
    }


def _set(conn: Connection, entry_id: int, **values: object) -> None:
    """Update one outbox entry's columns."""
    conn.execute(update(outbox_table).where(outbox_table.c.id == entry_id).values(**values))
