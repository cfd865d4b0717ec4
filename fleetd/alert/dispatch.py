"""The dispatcher: from rule transitions to delivered notifications, durably.

    submit(transitions, now) ──► alert_notify_alerts (committed before returning)
                                   │ inbox
    tick(now) ── flush ──► route → group → silence/inhibit → plan ──► alert_outbox + logs
              └─ deliver ──► per integration, in order, rate-limited, retried ──► notifiers

``submit`` is called by the daemon's poll loop and only writes the database and an in-memory
inbox, so it never waits for a notifier, and waits at most ``SUBMIT_WAIT`` for the database.

While the database cannot be written (disk full, read-only or immutable files, another
process holding the write lock, a corrupt file) the dispatcher runs *offline*: the same
routing, grouping, dedup and planning, but every outbox entry goes to the memory lane
(``fleetd.alert.memlane.MemoryOutbox``), delivered by the same ``Delivery`` (lanes, order,
429), and every write it would have made (alerts, notification logs, what a delivery
implies) waits in order in memory. Every ``RECONCILE_EVERY`` seconds a tick tries to write it
all back in one transaction: memory entries with their state and notification ids (delivered
ones as delivered: never sent twice), then the deferred writes; the durable outbox then
carries on. A crash while offline loses the memory lane; the daemon keeps alert state unsaved
meanwhile, so after the restart the rules re-announce what was not recorded (at least once,
never lost). ``tick`` runs on the daemon's delivery job (every
second or so, never overlapping itself): the flush happens under the dispatcher's lock, the
HTTP calls outside it, each with its timeout. A restart rebuilds everything from the
database: alerts, groups and their timers (from the notification logs), pending deliveries.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TextIO

import requests
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from fleetd.alert import plan as planning
from fleetd.alert.book import AlertBook
from fleetd.alert.config import AlertingConfig
from fleetd.alert.delivery import Delivery, DeliveryReport, Sent
from fleetd.alert.entries import new_entry
from fleetd.alert.gpuinfo import GpuDetails
from fleetd.alert.hooks import SELF_ALERT, DispatchHooks, rejection_alert
from fleetd.alert.inhibit import Inhibitions, InhibitRule
from fleetd.alert.integrations import (
    Integration,
    all_integrations,
    build_integrations,
    takes_change,
)
from fleetd.alert.matchers import parse_matcher
from fleetd.alert.memlane import MemoryOutbox
from fleetd.alert.notification import (
    Action,
    AlertRecord,
    ChangeEvent,
    HeldAlert,
    Notification,
    iso8601,
    record_from_alert,
)
from fleetd.alert.outbox_store import AlertLogEntry, NewEntry, OutboxStore
from fleetd.alert.routing import build_routes
from fleetd.alert.silence_store import Acknowledgement, Silence, SilenceState, SilenceStore
from fleetd.alert.stats import IntegrationStats, readings
from fleetd.errors import StoreError
from fleetd.logs import get_logger
from fleetd.model import AlertState, Reading, Transition, label_value, make_labels
from fleetd.query import Matcher
from fleetd.store.db import Database

__all__ = ["SELF_ALERT", "Dispatcher", "TickReport"]

HOUSEKEEPING_EVERY = 60.0
SUBMIT_WAIT = 0.25  # the poll's longest wait for the database's write lock
FLUSH_WAIT = 0.5  # a flush's (the poll's submit may wait behind it)
RECONCILE_EVERY = 2.0  # while offline: how often to try writing the memory lane back
RECONCILE_WAIT = 0.25
STORAGE_ERRORS = (SQLAlchemyError, StoreError, OSError, sqlite3.Error)

Write = Callable[[Connection], None]


def _reason(exc: BaseException) -> str:
    from fleetd.store.resilient import classify  # the store's words for the failure

    return classify(exc).reason


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did (tests and the bench read it; the daemon may log it)."""

    skipped: bool = False
    groups_flushed: int = 0
    queued: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0


def _notifiable(t: Transition) -> bool:
    """Firing, and the end of firing, are notified; pending and its end are not."""
    if t.current == AlertState.FIRING:
        return True
    return t.previous == AlertState.FIRING


class Dispatcher:
    """Routing, grouping, silences, inhibition, the outbox and delivery for one node."""

    def __init__(
        self,
        config: AlertingConfig,
        db: Database,
        *,
        node: str,
        now: float,
        rng: random.Random | None = None,
        session: requests.Session | None = None,
        stream: TextIO | None = None,
        external_labels: Mapping[str, str] | None = None,
        gpu_details: GpuDetails | None = None,
    ) -> None:
        """``external_labels`` (the node's ``node.labels``) are added to every alert and change
        event, never overriding a label it has; ``gpu_details`` gives the serial number, BDF,
        product and firmware of a ``gpu`` label value for PagerDuty's custom_details."""
        self._db = db
        self._node = node
        self._external = make_labels(dict(external_labels or {}))
        self._gpu_details = gpu_details
        self._rng = rng or random.Random()
        self._session = session or requests.Session()
        self._owns_session = session is None
        self._stream = stream or sys.stdout
        self._store = OutboxStore(db)
        self._silence_store = SilenceStore(db)
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._inbox_lock = threading.Lock()
        self._inbox: list[AlertRecord] = []
        self._stats: dict[str, IntegrationStats] = {}
        self._last_housekeeping = float("-inf")
        self._log = get_logger("alert.dispatch")
        self._offline: tuple[str, float] | None = None  # (why, since) the database is unwritable
        self._deferred: list[Write] = []  # writes waiting for it, in order
        self._memory = MemoryOutbox()
        self._next_reconcile = float("-inf")
        self._fleet_silences: tuple[Silence, ...] = ()  # from the registry's heartbeat
        self._configure(config)
        self._restore(now)
        self._fail_orphaned(now)

    # ------------------------------------------------------------------------ configuration
    def _configure(self, config: AlertingConfig) -> None:
        self._config = config
        self._root = build_routes(config.root_route())
        self._receivers = build_integrations(
            config, node=self._node, session=self._session, stream=self._stream
        )
        self._integrations = all_integrations(self._receivers)
        self._by_id = {i.id: i for i in self._integrations}
        self._inhibit_rules = [InhibitRule.from_config(r) for r in config.inhibit_rules]
        self._delivery = Delivery(self._store, config.delivery, self._rng, self._stats_for)
        self._memory_delivery = Delivery(self._memory, config.delivery, self._rng, self._stats_for)

    def _restore(self, now: float) -> None:
        """Rebuild the working state from the database (start-up, or after a failed flush)."""
        self._book = AlertBook(
            self._root,
            self._receivers,
            self._store.load_alerts(),
            self._store.load_group_log(),
            self._store.load_alert_log(),
        )
        self._acks = {a.fingerprint: a for a in self._silence_store.acknowledgements()}
        self._silences: list[Silence] = self._silence_store.not_expired(now)
        if self._book.alerts:
            self._log.info(
                "alerts_restored", alerts=len(self._book.alerts), groups=len(self._book.groups)
            )

    def reload(self, config: AlertingConfig, now: float) -> None:
        """Apply a new ``alerting`` section; alerts, logs, counters and the outbox carry over.

        Waits for a running tick to finish. Pending notifications of integrations that no
        longer exist are marked failed (they have nowhere to go) and logged. Integrations
        that were rejecting notifications start afresh: the reload may have fixed them.
        """
        with self._tick_lock, self._lock:
            rejecting = {i for i, stats in self._stats.items() if stats.rejecting}
            self._configure(config)
            self._book.rewire(self._root, self._receivers)
            self._fail_orphaned(now)
            retry = rejecting & set(self._by_id)
            if retry:
                with self._db.begin() as conn:
                    for integration_id in sorted(retry):
                        self._store.forget_integration(conn, integration_id)
                self._book.forget(retry, now)
                self._log.info("notify_logs_reset", integrations=sorted(retry))

    def _fail_orphaned(self, now: float) -> None:
        dropped = self._store.fail_unknown(set(self._by_id), now)
        for integration_id, count in sorted(dropped.items()):
            self._log.warning(
                "outbox_integration_removed", integration=integration_id, dropped=count
            )

    def _stats_for(self, integration: Integration) -> IntegrationStats:
        stats = self._stats.get(integration.id)
        if stats is None:
            stats = IntegrationStats(integration.receiver, integration.name)
            self._stats[integration.id] = stats
        return stats

    # -------------------------------------------------------------------------------- input
    def submit(self, transitions: Sequence[Transition], now: float) -> None:
        """Record the transitions durably; notifications follow on the next ``tick``."""
        latest: dict[str, AlertRecord] = {}
        for t in transitions:
            if _notifiable(t):
                record = record_from_alert(t.alert, t.at, now)
                latest[record.fingerprint] = record
        self._record(list(latest.values()), now)

    def _record(self, records: list[AlertRecord], now: float) -> None:
        if not records:
            return
        records = [self._with_node_labels(r) for r in records]
        store = self._store
        self._write(lambda conn: store.upsert_alerts(conn, records, now), now, SUBMIT_WAIT)
        with self._inbox_lock:
            self._inbox.extend(records)

    # ----------------------------------------------------------------- storage, or memory
    @property
    def offline(self) -> bool:
        """Whether the dispatcher holds writes (and maybe notifications) in memory only."""
        return self._offline is not None

    def _write(self, write: Write, now: float, timeout: float | None = None) -> bool:
        """``write`` in a transaction now, or (offline) later, in order; True when durable."""
        with self._lock:
            if self._offline is None:
                try:
                    with self._db.begin(timeout=timeout) as conn:
                        write(conn)
                    return True
                except STORAGE_ERRORS as exc:
                    self._go_offline(exc, now)
            self._deferred.append(write)
            return False

    def _go_offline(self, exc: BaseException, now: float) -> None:
        with self._lock:
            if self._offline is not None:
                return
            reason = _reason(exc)
            self._offline = (reason, now)
            self._next_reconcile = now + RECONCILE_EVERY
            self._log.warning(
                "alert_outbox_offline",
                reason=reason,
                detail="notifications leave from memory until the database can be written",
            )

    def _reconcile(self, now: float) -> None:
        """Write the memory lane and the deferred writes back, all or nothing."""
        self._next_reconcile = now + RECONCILE_EVERY
        entries = self._memory.take()
        writes = list(self._deferred)
        try:
            with self._db.begin(timeout=RECONCILE_WAIT) as conn:
                written = self._store.restore(conn, entries)
                for write in writes:
                    write(conn)
        except STORAGE_ERRORS as exc:
            self._memory.put_back(entries)
            self._log.debug("alert_outbox_still_offline", reason=_reason(exc))
            return
        del self._deferred[: len(writes)]
        assert self._offline is not None
        reason, since = self._offline
        self._offline = None
        self._delivery.queued(i.id for i in self._integrations)
        self._log.info(
            "alert_outbox_reconciled",
            reason=reason,
            offline_for_s=round(now - since, 3),
            delivered_from_memory=sum(1 for e in entries if e.status == "delivered"),
            pending=sum(1 for e in entries if e.status == "pending"),
            written=written,
            writes=len(writes),
            dropped=self._memory.dropped,
        )

    def _with_node_labels(self, record: AlertRecord) -> AlertRecord:
        """``record`` with the node's labels it lacks (Prometheus' external_labels).

        The fingerprint stays the rules engine's (rule and the alert's own labels), so it, the
        PagerDuty dedup key and the API link do not change. A firing episode the dispatcher
        already holds keeps the node labels it was announced with until it ends (a label it
        did not have stays absent), so adding or changing node labels, or upgrading from a
        fleetd without them, re-announces nothing: groups, Alertmanager's label sets and the
        notification logs stay as they were; the next episode carries the new labels.
        """
        if not self._external:
            return record
        with self._lock:
            held = self._book.alerts.get(record.fingerprint)
        announced = (
            dict(held.labels) if held is not None and held.starts_at == record.starts_at else None
        )
        labels = dict(record.labels)
        for name, value in self._external:
            if name in labels:
                continue
            if announced is None:
                labels[name] = value
            elif name in announced:
                labels[name] = announced[name]
        return replace(record, labels=make_labels(labels))

    def submit_change(self, event: ChangeEvent, now: float) -> int:
        """Queue a remediation step for every integration with ``send_changes``; durable.

        Change events bypass routing (they are not alerts) and are never grouped; an event
        with an ``id`` is queued at most once per integration. Returns the entries queued.
        """
        if self._external:
            labels = dict(self._external) | dict(event.labels)
            event = replace(event, labels=make_labels(labels))
        entries = [
            self._entry(integration, "change", "", now, change=event, dedup_id=event.id)
            for integration in self._integrations
            if takes_change(integration, label_value(event.labels, "kind"))
        ]
        with self._lock:
            counted: list[int] = []
            store = self._store
            if self._write(lambda conn: counted.append(store.enqueue(conn, entries, now)), now):
                self._delivery.queued(e.integration for e in entries)
                return counted[0]
            self._deferred.pop()  # the entries go to the memory lane instead
            added = self._memory.add(entries, now)
            self._memory_delivery.queued(e.integration for e in added)
            return len(added)

    def _entry(
        self,
        integration: Integration,
        action: Action,
        reason: str,
        now: float,
        *,
        alerts: tuple[AlertRecord, ...] = (),
        change: ChangeEvent | None = None,
        dedup_id: str | None = None,
    ) -> NewEntry:
        notification = Notification(
            receiver=integration.receiver,
            integration=integration.id,
            action=action,
            status="firing",
            node=self._node,
            created_at=now,
            alerts=alerts,
            reason=reason or action,
            change=change,
            external_url=self._config.external_url,
            node_labels=self._external,
        )
        return new_entry(integration, notification, dedup_id=dedup_id)

    # --------------------------------------------------------------------------------- tick
    def tick(self, now: float) -> TickReport:
        """Flush due groups into the outbox, then deliver what is due. Never overlaps itself."""
        if not self._tick_lock.acquire(blocking=False):
            return TickReport(skipped=True)
        try:
            with self._lock:
                if self._offline is not None and now >= self._next_reconcile:
                    self._reconcile(now)
                flushed, queued = self._flush(now)
                hooks = DispatchHooks(
                    self._store, self._book, self._lock, self._delivery.queued, self._self_alert
                )
                offline = self._offline is not None
            report = DeliveryReport()
            if not offline:
                try:
                    report = self._delivery.run(self._integrations, now, hooks)
                except STORAGE_ERRORS as exc:  # the entry's outcome is not recorded: resent
                    self._go_offline(exc, now)
            if self._memory.has_pending():
                offline_hooks = OfflineHooks(hooks, self._defer, self._book, self._lock)
                memory = self._memory_delivery.run(self._integrations, now, offline_hooks)
                report.delivered += memory.delivered
                report.retried += memory.retried
                report.failed += memory.failed
            if self._offline is None:
                try:
                    self._housekeeping(now)
                except STORAGE_ERRORS as exc:
                    self._go_offline(exc, now)
        finally:
            self._tick_lock.release()
        return _report(flushed, queued, report)

    def _defer(self, write: Write) -> None:
        with self._lock:
            self._deferred.append(write)

    def _flush(self, now: float) -> tuple[int, int]:
        with self._inbox_lock:
            records, self._inbox = self._inbox, []
        self._end_acknowledgements(records)
        orphans = self._book.ingest(records)
        self._silences = [s for s in self._silences if s.state(now) != "expired"]
        ctx = planning.Context(
            self._node,
            self._config.external_url,
            now,
            self._acknowledged(),
            node_labels=self._external,
            gpu_details=self._gpu_details,
        )
        plan = planning.DeliveryPlan()
        flushed: dict[str, list[str]] = {}
        due = self._book.groups.due(now)
        if due:
            inhibitions = Inhibitions(self._inhibit_rules, self._book.alerts.values())
            for group in due:
                alerts = group.sorted_alerts()
                muted = frozenset(a.fingerprint for a in alerts if self._muted(a, inhibitions, now))
                view = planning.GroupView(group.route, group.key, group.labels, alerts, muted)
                integrations = self._receivers.get(group.route.receiver, [])
                book = self._book
                plan.extend(
                    planning.plan_group(view, integrations, book.group_log, book.alert_log, ctx)
                )
                flushed[group.key] = [a.fingerprint for a in alerts if not a.firing]
        sync_entries, sync_drops = self._book.plan_sync(ctx)
        work = (plan.entries, plan.group_logs, plan.alert_logs, sync_entries, sync_drops, orphans)
        if not flushed and not any(work):
            return 0, 0
        store = self._store
        retired = self._book.retire(flushed, sync_drops, orphans, now)

        def logs(conn: Connection) -> None:
            for integration_id, key, group_entry in plan.group_logs:
                store.put_group_log(conn, integration_id, key, group_entry)
            for integration_id, fp, alert_entry in plan.alert_logs:
                store.put_alert_log(conn, integration_id, fp, alert_entry)
            retired.write(conn, store)

        queued = 0
        durable = False
        if self._offline is None:
            try:
                with self._db.begin(timeout=FLUSH_WAIT) as conn:
                    queued = store.enqueue(conn, plan.entries, now)
                    for entry in sync_entries:
                        store.put_sync(conn, entry, now)
                    logs(conn)
                durable = True
            except STORAGE_ERRORS as exc:
                self._go_offline(exc, now)  # the same work goes to memory, below
            except Exception:
                # The groups were advanced in memory; the database was not. Start again from it.
                self._restore(now)
                raise
        if durable:
            self._delivery.queued(e.integration for e in [*plan.entries, *sync_entries])
        else:
            added = self._memory.add(plan.entries, now)
            for entry in sync_entries:
                self._memory.put_sync(entry, now)
            self._deferred.append(logs)
            queued = len(added)
            self._memory_delivery.queued(
                [e.integration for e in added] + [e.integration for e in sync_entries]
            )
        self._book.apply(plan, sync_drops, retired.gone, retired.logs_gone)
        return len(due), queued + len(sync_entries)

    def _end_acknowledgements(self, records: list[AlertRecord]) -> None:
        """An acknowledgement lasts one firing episode: forget it when the alert resolves."""
        over = [r.fingerprint for r in records if not r.firing and r.fingerprint in self._acks]
        for fp in over:
            del self._acks[fp]
        self._silence_store.forget_acknowledgements(over)

    def _muted(self, alert: AlertRecord, inhibitions: Inhibitions, now: float) -> bool:
        if any(silence.mutes(alert.labels, now) for silence in self._every_silence()):
            return True
        return inhibitions.muted_by(alert) is not None

    def _acknowledged(self) -> frozenset[str]:
        out = set()
        for fp, ack in self._acks.items():
            alert = self._book.alerts.get(fp)
            if alert is not None and alert.firing and ack.starts_at == alert.starts_at:
                out.add(fp)
        return frozenset(out)

    def _housekeeping(self, now: float) -> None:
        if now - self._last_housekeeping < HOUSEKEEPING_EVERY:
            return
        self._last_housekeeping = now
        retention = self._config.delivery.retention
        self._store.purge(now, retention)
        self._silence_store.purge(now, retention)

    def _self_alert(self, integration: Integration, error: str | None, now: float) -> None:
        """Raise (error given) or resolve the alert saying a receiver rejects notifications."""
        record = rejection_alert(self._node, integration, error, now, None)
        with self._lock:
            previous = self._book.alerts.get(record.fingerprint)
        if previous is not None:  # keep the episode's start
            record = rejection_alert(self._node, integration, error, now, previous)
        try:
            self._record([record], now)
        except Exception as exc:  # the delivery loop must go on
            self._log.error("self_alert_not_recorded", error=type(exc).__name__)

    # ---------------------------------------------------------------------------- silences
    def create_silence(
        self,
        matchers: Sequence[str | Matcher],
        *,
        starts_at: float,
        ends_at: float,
        created_by: str,
        comment: str,
        now: float,
    ) -> Silence:
        """Store a silence (matchers as ``name="value"`` text or Matchers); ValueError if bad."""
        parsed = tuple(m if isinstance(m, Matcher) else parse_matcher(m) for m in matchers)
        silence = self._silence_store.create(
            parsed,
            starts_at=starts_at,
            ends_at=ends_at,
            created_by=created_by,
            comment=comment,
            now=now,
        )
        with self._lock:
            self._silences.append(silence)
        self._log.info(
            "silence_created", id=silence.id, created_by=created_by, ends_at=iso8601(ends_at)
        )
        return silence

    def list_silences(self, now: float, state: SilenceState | None = None) -> list[Silence]:
        """This node's silences, then the fleet silences it applies (ids ``fleet:…``)."""
        fleet = [s for s in self._fleet_silences if state is None or s.state(now) == state]
        return [*self._silence_store.all(now, state), *fleet]

    def get_silence(self, silence_id: str) -> Silence | None:
        for silence in self._fleet_silences:
            if silence.id == silence_id:
                return silence
        return self._silence_store.get(silence_id)

    def set_fleet_silences(self, silences: Sequence[Silence]) -> None:
        """The fleet silences that name this node, as the registry heartbeat last read them.

        They replace the previous set whole; the heartbeat never calls this when the
        registry could not be read, so an agent cut off keeps the last set, each silence
        ending at its own ``ends_at``."""
        with self._lock:
            self._fleet_silences = tuple(silences)

    def fleet_silences(self) -> tuple[Silence, ...]:
        return self._fleet_silences

    def _every_silence(self) -> tuple[Silence, ...]:
        return (*self._silences, *self._fleet_silences)

    def expire_silence(self, silence_id: str, now: float) -> Silence:
        """End a silence now; KeyError if there is no such silence."""
        silence = self._silence_store.expire(silence_id, now)
        with self._lock:
            self._silences = [s for s in self._silences if s.id != silence_id]
        self._log.info("silence_expired", id=silence_id)
        return silence

    # ----------------------------------------------------------------------- acknowledgement
    def acknowledge(
        self, fingerprint: str, *, author: str, comment: str, now: float
    ) -> Acknowledgement:
        """A person is on this firing alert: no repeats for this episode; PagerDuty is told.

        KeyError if no such alert is firing.
        """
        with self._lock:
            alert = self._book.alerts.get(fingerprint)
            if alert is None or not alert.firing:
                raise KeyError(fingerprint)
            ack = self._silence_store.acknowledge(
                fingerprint, alert.starts_at, author, comment, now
            )
            self._acks[fingerprint] = ack
            entries = [
                self._entry(
                    integration,
                    "acknowledge",
                    "acknowledged",
                    now,
                    alerts=(alert,),
                    dedup_id=f"ack/{fingerprint}/{alert.starts_at!r}",
                )
                for integration in self._integrations
                if integration.kind == "pagerduty" and self._told_firing(integration, fingerprint)
            ]
            with self._db.begin() as conn:
                self._store.enqueue(conn, entries, now)
            self._delivery.queued(e.integration for e in entries)
        self._log.info("alert_acknowledged", fingerprint=fingerprint, author=author)
        return ack

    def _told_firing(self, integration: Integration, fingerprint: str) -> bool:
        entry = self._book.alert_log.get((integration.id, fingerprint))
        return entry is not None and entry.status == "firing"

    def acknowledgements(self) -> list[Acknowledgement]:
        with self._lock:
            return list(self._acks.values())

    # ------------------------------------------------------------------------------- views
    def alerts(self, now: float) -> list[HeldAlert]:
        """Every alert the dispatcher holds, with why it is muted (for the API)."""
        with self._lock:
            held = sorted(self._book.alerts.values(), key=lambda a: (a.starts_at, a.fingerprint))
            inhibitions = Inhibitions(self._inhibit_rules, held)
            acked = self._acknowledged()
            out: list[HeldAlert] = []
            for alert in held:
                inhibited = inhibitions.muted_by(alert)
                silenced = tuple(s.id for s in self._every_silence() if s.mutes(alert.labels, now))
                out.append(
                    HeldAlert(
                        alert,
                        silenced_by=silenced,
                        inhibited_by=() if inhibited is None else (inhibited,),
                        acknowledged=alert.fingerprint in acked,
                    )
                )
            return out

    def status(self, now: float) -> dict[str, object]:
        """Delivery health for the API: per integration counters, queue, last error."""
        pending = self._pending_stats()
        integrations = []
        for integration in self._integrations:
            depth, oldest = pending.get(integration.id, (0, now))
            item = self._stats_for(integration).as_dict()
            item.update(
                kind=integration.kind,
                mode=integration.mode,
                pending=depth,
                oldest_pending_age_seconds=max(0.0, now - oldest) if depth else 0.0,
            )
            integrations.append(item)
        with self._lock:
            firing = sum(1 for a in self._book.alerts.values() if a.firing)
            return {
                "node": self._node,
                "alerts": {"firing": firing, "resolved": len(self._book.alerts) - firing},
                "groups": len(self._book.groups),
                "silences_active": sum(
                    1 for s in self._every_silence() if s.state(now) == "active"
                ),
                "outbox_pending": sum(depth for depth, _ in pending.values()),
                "integrations": integrations,
            }

    def metrics(self, now: float) -> list[Reading]:
        """Current values of the ``fleetd_alert_*`` metrics, for the exporter."""
        pairs = [(i.id, self._stats_for(i)) for i in self._integrations]
        return readings(pairs, self._pending_stats(), now)

    def _pending_stats(self) -> dict[str, tuple[int, float]]:
        """Pending entries per integration, durable and in memory (the memory lane alone
        while the database cannot be read)."""
        try:
            stats = dict(self._store.pending_stats())
        except STORAGE_ERRORS:
            stats = {}
        for integration_id, (count, oldest) in self._memory.pending_stats().items():
            before, first = stats.get(integration_id, (0, oldest))
            stats[integration_id] = (before + count, min(first, oldest))
        return stats

    def close(self) -> None:
        if self._owns_session:
            self._session.close()


def _report(flushed: int, queued: int, delivery: DeliveryReport) -> TickReport:
    return TickReport(
        groups_flushed=flushed,
        queued=queued,
        delivered=delivery.delivered,
        retried=delivery.retried,
        failed=delivery.failed,
    )


class OfflineHooks:
    """``DeliveryHooks`` for the memory lane: what a delivery implies is applied to memory
    now and written to the database once it can be (``defer``)."""

    def __init__(
        self,
        hooks: DispatchHooks,
        defer: Callable[[Write], None],
        book: AlertBook,
        lock: threading.RLock,
    ) -> None:
        self._hooks = hooks
        self._defer = defer
        self._book = book
        self._lock = lock

    def prepare(self, integration: Integration, notification: Notification) -> Notification:
        try:
            return self._hooks.prepare(integration, notification)
        except STORAGE_ERRORS:  # no thread to reply in: a new message
            return notification

    def delivered(self, conn: Connection | None, sent: Sent) -> None:
        integration = sent.integration
        if integration.mode == "sync":  # resends count from now, in memory too
            with self._lock:
                for alert in sent.notification.alerts:
                    if alert.fingerprint in self._book.alerts:
                        entry = AlertLogEntry(alert.status, alert.starts_at, sent.at)
                        self._book.alert_log[(integration.id, alert.fingerprint)] = entry
        hooks = self._hooks
        self._defer(lambda c: hooks.delivered(c, sent))

    def rejected(self, integration: Integration, error: str, now: float) -> None:
        self._hooks.rejected(integration, error, now)

    def recovered(self, integration: Integration, now: float) -> None:
        self._hooks.recovered(integration, now)
