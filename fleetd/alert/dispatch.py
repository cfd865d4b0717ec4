"""The dispatcher: from rule transitions to delivered notifications, durably.

    submit(transitions, now) ──► alert_notify_alerts (committed before returning)
                                   │ inbox
    tick(now) ── flush ──► route → group → silence/inhibit → plan ──► alert_outbox + logs
              └─ deliver ──► per integration, in order, rate-limited, retried ──► notifiers

``submit`` is called by the daemon's poll loop and only writes the database and an in-memory
inbox, so it never waits for a notifier. ``tick`` runs on the daemon's delivery job (every
second or so, never overlapping itself): the flush happens under the dispatcher's lock, the
HTTP calls outside it, each with its timeout. A restart rebuilds everything from the
database: alerts, groups and their timers (from the notification logs), pending deliveries.
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TextIO

import requests
from sqlalchemy import Connection

from fleetd.alert import plan as planning
from fleetd.alert.config import AlertingConfig
from fleetd.alert.delivery import Delivery, DeliveryReport
from fleetd.alert.groups import AggregationGroup, Groups
from fleetd.alert.inhibit import Inhibitions, InhibitRule
from fleetd.alert.integrations import Integration, all_integrations, build_integrations
from fleetd.alert.matchers import parse_matcher
from fleetd.alert.notification import (
    AlertRecord,
    ChangeEvent,
    Notification,
    Receipt,
    iso8601,
    record_from_alert,
)
from fleetd.alert.routing import Route, build_routes
from fleetd.alert.stats import IntegrationStats, readings
from fleetd.logs import get_logger
from fleetd.model import AlertState, Reading, Transition, make_labels
from fleetd.query import Matcher
from fleetd.store.db import Database
from fleetd.store.outbox import AlertLogEntry, NewEntry, OutboxStore, group_hash
from fleetd.store.silences import Acknowledgement, Silence, SilenceState, SilenceStore

SELF_ALERT = "FleetdNotificationsRejected"
HOUSEKEEPING_EVERY = 60.0


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
    ) -> None:
        self._db = db
        self._node = node
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
        self._configure(config)
        self._restore(now)

    # ------------------------------------------------------------------------ configuration
    def _configure(self, config: AlertingConfig) -> None:
        self._config = config
        self._root: Route = build_routes(config.root_route())
        self._receivers = build_integrations(
            config, node=self._node, session=self._session, stream=self._stream
        )
        self._integrations = all_integrations(self._receivers)
        self._by_id = {i.id: i for i in self._integrations}
        self._inhibit_rules = [InhibitRule.from_config(r) for r in config.inhibit_rules]
        self._delivery = Delivery(self._store, config.delivery, self._rng, self._stats_for)

    def reload(self, config: AlertingConfig, now: float) -> None:
        """Apply a new ``alerting`` section; alerts, logs, counters and the outbox carry over."""
        with self._lock:
            self._configure(config)
            self._regroup(now)

    def _restore(self, now: float) -> None:
        self._alerts: dict[str, AlertRecord] = {a.fingerprint: a for a in self._store.load_alerts()}
        self._group_log = self._store.load_group_log()
        self._alert_log = self._store.load_alert_log()
        self._acks = {a.fingerprint: a for a in self._silence_store.acknowledgements()}
        self._silences: list[Silence] = self._silence_store.not_expired(now)
        self._regroup(now)
        if self._alerts:
            self._log.info("alerts_restored", alerts=len(self._alerts), groups=len(self._groups))

    def _regroup(self, now: float) -> None:
        """Place every known alert in its groups; timers resume from the notification logs."""
        self._groups = Groups()
        self._sync_members: dict[str, set[str]] = {
            i.id: set() for i in self._integrations if i.mode == "sync"
        }
        for alert in self._alerts.values():
            self._place(alert)
        for group in self._groups.by_key.values():
            sent = self._last_sent(group)
            if sent is not None:
                group.flushed = True
                group.next_flush = sent + group.route.group_interval
        del now  # timers come from stored times only

    def _last_sent(self, group: AggregationGroup) -> float | None:
        times = []
        for integration in self._receivers.get(group.route.receiver, []):
            entry = self._group_log.get((integration.id, group_hash(group.key)))
            if entry is not None:
                times.append(entry.sent_at)
            for fp in group.alerts:
                alert_entry = self._alert_log.get((integration.id, fp))
                if alert_entry is not None:
                    times.append(alert_entry.sent_at)
        return max(times) if times else None

    def _place(self, alert: AlertRecord) -> None:
        routes = self._root.match(alert.labels)
        for route in routes:
            self._groups.place(route, alert)
        self._join_sync(alert, routes)

    def _join_sync(self, alert: AlertRecord, routes: list[Route]) -> None:
        for route in routes:
            for integration in self._receivers.get(route.receiver, []):
                if integration.mode == "sync":
                    self._sync_members[integration.id].add(alert.fingerprint)

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
        with self._db.begin() as conn:
            self._store.upsert_alerts(conn, records, now)
        with self._inbox_lock:
            self._inbox.extend(records)

    def submit_change(self, event: ChangeEvent, now: float) -> int:
        """Queue a remediation step for every integration with ``send_changes``; durable.

        Change events bypass routing (they are not alerts) and are never grouped; an event
        with an ``id`` is queued at most once per integration. Returns the entries queued.
        """
        entries = []
        for integration in self._integrations:
            if not integration.send_changes or integration.mode == "sync":
                continue
            notification = Notification(
                receiver=integration.receiver,
                integration=integration.id,
                action="change",
                status="firing",
                node=self._node,
                created_at=now,
                change=event,
                reason="change",
                external_url=self._config.external_url,
            )
            entries.append(
                NewEntry(
                    integration=integration.id,
                    receiver=integration.receiver,
                    kind=integration.kind,
                    action="change",
                    group_key="",
                    payload=notification.to_json(),
                    dedup_id=event.id,
                )
            )
        with self._db.begin() as conn:
            queued = self._store.enqueue(conn, entries, now)
        self._delivery.queued(e.integration for e in entries)
        return queued

    # --------------------------------------------------------------------------------- tick
    def tick(self, now: float) -> TickReport:
        """Flush due groups into the outbox, then deliver what is due. Never overlaps itself."""
        if not self._tick_lock.acquire(blocking=False):
            return TickReport(skipped=True)
        try:
            with self._lock:
                flushed, queued = self._flush(now)
            report = self._delivery.run(self._integrations, now, _Hooks(self))
            self._housekeeping(now)
        finally:
            self._tick_lock.release()
        return _report(flushed, queued, report)

    def _flush(self, now: float) -> tuple[int, int]:
        with self._inbox_lock:
            records, self._inbox = self._inbox, []
        orphans = self._ingest(records)
        self._silences = [s for s in self._silences if s.state(now) != "expired"]
        ctx = planning.Context(self._node, self._config.external_url, now, self._acknowledged())
        due = self._groups.due(now)
        plan = planning.Plan()
        done: dict[str, list[str]] = {}
        if due:
            inhibitions = Inhibitions(self._inhibit_rules, self._alerts.values())
            for group in due:
                alerts = group.sorted_alerts()
                muted = frozenset(a.fingerprint for a in alerts if self._muted(a, inhibitions, now))
                view = planning.GroupView(group.route, group.key, group.labels, alerts, muted)
                integrations = self._receivers.get(group.route.receiver, [])
                plan.extend(
                    planning.plan_group(view, integrations, self._group_log, self._alert_log, ctx)
                )
                done[group.key] = [a.fingerprint for a in alerts if not a.firing]
        sync_entries, sync_drops = self._plan_sync(ctx)
        work = plan.entries or plan.group_logs or plan.alert_logs or sync_entries or done
        if not (work or sync_drops or orphans):
            return 0, 0
        try:
            with self._db.begin() as conn:
                queued = self._store.enqueue(conn, plan.entries, now)
                for entry in sync_entries:
                    self._store.put_sync(conn, entry, now)
                for integration_id, key, group_entry in plan.group_logs:
                    self._store.put_group_log(conn, integration_id, key, group_entry)
                for integration_id, fp, alert_entry in plan.alert_logs:
                    self._store.put_alert_log(conn, integration_id, fp, alert_entry)
                for integration_id, fp in sync_drops:
                    self._store.delete_alert_log(conn, integration_id, fp)
                gone, logs_gone = self._collect(conn, due, done, sync_drops, orphans, now)
        except Exception:
            # The groups were advanced in memory; the database was not. Start again from it.
            self._restore(now)
            raise
        self._apply(plan, sync_drops, gone, logs_gone)
        self._delivery.queued(e.integration for e in [*plan.entries, *sync_entries])
        return len(due), queued + len(sync_entries)

    def _ingest(self, records: list[AlertRecord]) -> list[str]:
        """Bring submitted records into the groups; returns resolved alerts nobody knew."""
        orphans = []
        for record in records:
            old = self._alerts.get(record.fingerprint)
            if not record.firing:
                self._acks.pop(record.fingerprint, None)
                if old is None:
                    orphans.append(record.fingerprint)
                    continue
            if old is not None and old.firing and record.firing:
                record = replace(record, received_at=old.received_at)
            self._alerts[record.fingerprint] = record
            if not self._groups.update(record):
                self._place(record)
            elif self._sync_members:
                self._join_sync(record, self._root.match(record.labels))
        return orphans

    def _plan_sync(self, ctx: planning.Context) -> tuple[list[NewEntry], list[tuple[str, str]]]:
        entries: list[NewEntry] = []
        drops: list[tuple[str, str]] = []
        for integration_id, members in self._sync_members.items():
            if not members:
                continue
            integration = self._by_id[integration_id]
            entry, drop = planning.plan_sync(
                integration, sorted(members), self._alerts, self._alert_log, ctx
            )
            if entry is not None:
                entries.append(entry)
            drops.extend((integration_id, fp) for fp in sorted(drop))
        return entries, drops

    def _collect(
        self,
        conn: Connection,
        due: list[AggregationGroup],
        done: dict[str, list[str]],
        sync_drops: list[tuple[str, str]],
        orphans: list[str],
        now: float,
    ) -> tuple[list[str], list[tuple[str, str]]]:
        """Retire what the flush finished: resolved alerts leave their groups, empty groups
        and alerts with no work left are deleted. Returns the alerts and logs deleted."""
        candidates: set[str] = set(orphans)
        logs_gone: list[tuple[str, str]] = []
        for group in due:
            finished = done.get(group.key, [])
            candidates.update(finished)
            if self._groups.flushed(group, finished, now):
                for integration in self._receivers.get(group.route.receiver, []):
                    log_key = (integration.id, group_hash(group.key))
                    if log_key in self._group_log:
                        self._store.delete_group_log(conn, integration.id, group.key)
                        logs_gone.append(log_key)
        for integration_id, fp in sync_drops:
            self._sync_members[integration_id].discard(fp)
            candidates.add(fp)
        gone = sorted(
            fp
            for fp in candidates
            if not self._groups.holds(fp)
            and not any(fp in m for m in self._sync_members.values())
            and (fp not in self._alerts or not self._alerts[fp].firing)
        )
        self._store.delete_alerts(conn, gone)
        return gone, logs_gone

    def _apply(
        self,
        plan: planning.Plan,
        sync_drops: list[tuple[str, str]],
        gone: list[str],
        logs_gone: list[tuple[str, str]],
    ) -> None:
        """Mirror a committed flush in the in-memory logs."""
        for integration_id, key, group_entry in plan.group_logs:
            self._group_log[(integration_id, group_hash(key))] = group_entry
        for integration_id, fp, alert_entry in plan.alert_logs:
            self._alert_log[(integration_id, fp)] = alert_entry
        for pair in [*sync_drops, *logs_gone]:
            self._alert_log.pop(pair, None)
            self._group_log.pop(pair, None)
        for fp in gone:
            self._alerts.pop(fp, None)
            for integration in self._integrations:
                self._alert_log.pop((integration.id, fp), None)

    def _muted(self, alert: AlertRecord, inhibitions: Inhibitions, now: float) -> bool:
        return self._silenced_by(alert, now) is not None or inhibitions.muted_by(alert) is not None

    def _silenced_by(self, alert: AlertRecord, now: float) -> str | None:
        for silence in self._silences:
            if silence.mutes(alert.labels, now):
                return silence.id
        return None

    def _acknowledged(self) -> frozenset[str]:
        out = set()
        for fp, ack in self._acks.items():
            alert = self._alerts.get(fp)
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

    # ------------------------------------------------------------------------- self-alerts
    def _self_alert(self, integration: Integration, error: str | None, now: float) -> None:
        """Raise (error given) or resolve the alert saying a receiver rejects notifications."""
        labels = make_labels(
            {
                "alertname": SELF_ALERT,
                "severity": "warning",
                "node": self._node,
                "receiver": integration.receiver,
                "integration": integration.name,
            }
        )
        fp = hashlib.sha256(repr(labels).encode()).hexdigest()[:16]
        old = self._alerts.get(fp)
        starts = old.starts_at if old is not None and old.firing else now
        summary = (
            f"{self._node}: receiver {integration.receiver} ({integration.name}) rejects "
            "notifications; fix its configuration"
        )
        record = AlertRecord(
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
        return self._silence_store.all(now, state)

    def get_silence(self, silence_id: str) -> Silence | None:
        return self._silence_store.get(silence_id)

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
            alert = self._alerts.get(fingerprint)
            if alert is None or not alert.firing:
                raise KeyError(fingerprint)
            ack = self._silence_store.acknowledge(
                fingerprint, alert.starts_at, author, comment, now
            )
            self._acks[fingerprint] = ack
            entries = []
            for integration in self._integrations:
                entry = self._alert_log.get((integration.id, fingerprint))
                if integration.kind != "pagerduty" or entry is None or entry.status != "firing":
                    continue
                notification = Notification(
                    receiver=integration.receiver,
                    integration=integration.id,
                    action="acknowledge",
                    status="firing",
                    node=self._node,
                    created_at=now,
                    alerts=(alert,),
                    reason="acknowledged",
                    external_url=self._config.external_url,
                )
                entries.append(
                    NewEntry(
                        integration.id,
                        integration.receiver,
                        integration.kind,
                        "acknowledge",
                        "",
                        notification.to_json(),
                        dedup_id=f"ack/{fingerprint}/{alert.starts_at!r}",
                    )
                )
            with self._db.begin() as conn:
                self._store.enqueue(conn, entries, now)
            self._delivery.queued(e.integration for e in entries)
        self._log.info("alert_acknowledged", fingerprint=fingerprint, author=author)
        return ack

    def acknowledgements(self) -> list[Acknowledgement]:
        with self._lock:
            return list(self._acks.values())

    # ------------------------------------------------------------------------------- views
    def alerts(self, now: float) -> list[dict[str, object]]:
        """Every alert the dispatcher holds, with why it is muted (for the API)."""
        with self._lock:
            inhibitions = Inhibitions(self._inhibit_rules, self._alerts.values())
            silences = list(self._silences)
            acked = self._acknowledged()
            out: list[dict[str, object]] = []
            for alert in sorted(self._alerts.values(), key=lambda a: (a.starts_at, a.fingerprint)):
                silenced = [s.id for s in silences if s.mutes(alert.labels, now)]
                inhibited = inhibitions.muted_by(alert)
                out.append(
                    {
                        "fingerprint": alert.fingerprint,
                        "status": alert.status,
                        "labels": dict(alert.labels),
                        "annotations": dict(alert.annotations),
                        "startsAt": iso8601(alert.starts_at),
                        "endsAt": None if alert.ends_at is None else iso8601(alert.ends_at),
                        "silencedBy": silenced,
                        "inhibitedBy": [] if inhibited is None else [inhibited],
                        "acknowledged": alert.fingerprint in acked,
                    }
                )
            return out

    def status(self, now: float) -> dict[str, object]:
        """Delivery health for the API: per integration counters, queue, last error."""
        pending = self._store.pending_stats()
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
            firing = sum(1 for a in self._alerts.values() if a.firing)
            return {
                "node": self._node,
                "alerts": {"firing": firing, "resolved": len(self._alerts) - firing},
                "groups": len(self._groups),
                "silences_active": sum(1 for s in self._silences if s.state(now) == "active"),
                "outbox_pending": sum(depth for depth, _ in pending.values()),
                "integrations": integrations,
            }

    def metrics(self, now: float) -> list[Reading]:
        """Current values of the ``fleetd_alert_*`` metrics, for the exporter."""
        pairs = [(i.id, self._stats_for(i)) for i in self._integrations]
        return readings(pairs, self._store.pending_stats(), now)

    def close(self) -> None:
        if self._owns_session:
            self._session.close()


class _Hooks:
    """The dispatcher's side of delivery: threads, sync logs, self-alerts."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._d = dispatcher

    def prepare(self, integration: Integration, notification: Notification) -> Notification:
        if not integration.notifier.threads or notification.action != "notify":
            return notification
        if notification.thread is not None:
            return notification
        refs = self._d._store.get_refs(integration.id, [a.fingerprint for a in notification.alerts])
        for alert in notification.alerts:
            found = refs.get(alert.fingerprint)
            if found is not None and found[0] == alert.starts_at:
                return notification.with_thread(found[1])
        return notification

    def delivered(
        self,
        conn: Connection,
        integration: Integration,
        notification: Notification,
        receipt: Receipt | None,
        now: float,
    ) -> None:
        d = self._d
        if integration.mode == "sync":
            with d._lock:
                for alert in notification.alerts:
                    sent = AlertLogEntry(alert.status, alert.starts_at, now)
                    d._store.put_alert_log(conn, integration.id, alert.fingerprint, sent)
                    if alert.fingerprint in d._alerts:
                        d._alert_log[(integration.id, alert.fingerprint)] = sent
            return
        if receipt is None or receipt.ref is None or notification.action != "notify":
            return
        items = [(a.fingerprint, a.starts_at) for a in notification.alerts]
        d._store.put_refs(conn, integration.id, items, receipt.ref, now)
        if notification.thread is not None:  # a reply in the thread: bring the parent up to date
            update = replace(notification, action="update", reason="thread_updated", created_at=now)
            entry = NewEntry(
                integration.id,
                integration.receiver,
                integration.kind,
                "update",
                notification.group_key,
                update.to_json(),
            )
            d._store.enqueue(conn, [entry], now)
            d._delivery.queued([integration.id])

    def rejected(self, integration: Integration, error: str, now: float) -> None:
        self._d._self_alert(integration, error, now)

    def recovered(self, integration: Integration, now: float) -> None:
        self._d._self_alert(integration, None, now)


def _report(flushed: int, queued: int, delivery: DeliveryReport) -> TickReport:
    return TickReport(
        groups_flushed=flushed,
        queued=queued,
        delivered=delivery.delivered,
        retried=delivery.retried,
        failed=delivery.failed,
    )
