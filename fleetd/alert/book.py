"""The dispatcher's working state: the alerts it holds, their groups, what each integration
was told, and which alerts each Alertmanager is kept in step with.

Everything here is a mirror of the database (``fleetd.alert.outbox_store``) that a restart rebuilds
with ``AlertBook(...)`` from the stored alerts and logs; the dispatcher changes it only after
the transaction that records the same change has committed (``apply``), so memory never runs
ahead of what a crash would leave behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from sqlalchemy import Connection

from fleetd.alert import plan as planning
from fleetd.alert.groups import AggregationGroup, Groups
from fleetd.alert.integrations import Integration
from fleetd.alert.notification import AlertRecord
from fleetd.alert.outbox_store import (
    AlertLogEntry,
    GroupLogEntry,
    NewEntry,
    OutboxStore,
    group_hash,
)
from fleetd.alert.routing import Route

LogKey = tuple[str, str]  # (integration id, group hash or fingerprint)


@dataclass
class Retired:
    """What a flush retires: alerts, group logs (integration, group key) and per-alert logs
    (integration, fingerprint) to delete; ``logs_gone`` the group-log keys, for ``apply``."""

    gone: list[str] = field(default_factory=list)
    logs_gone: list[LogKey] = field(default_factory=list)
    group_logs: list[tuple[str, str]] = field(default_factory=list)
    alert_logs: list[LogKey] = field(default_factory=list)

    def write(self, conn: Connection, store: OutboxStore) -> None:
        for integration_id, key in self.group_logs:
            store.delete_group_log(conn, integration_id, key)
        for integration_id, fp in self.alert_logs:
            store.delete_alert_log(conn, integration_id, fp)
        store.delete_alerts(conn, self.gone)


class AlertBook:
    """Alerts, groups, notification logs and Alertmanager members, routed by one tree."""

    def __init__(
        self,
        root: Route,
        receivers: Mapping[str, list[Integration]],
        alerts: Iterable[AlertRecord],
        group_log: dict[LogKey, GroupLogEntry],
        alert_log: dict[LogKey, AlertLogEntry],
    ) -> None:
        self.alerts: dict[str, AlertRecord] = {a.fingerprint: a for a in alerts}
        self.group_log = group_log
        self.alert_log = alert_log
        self.rewire(root, receivers)

    def rewire(self, root: Route, receivers: Mapping[str, list[Integration]]) -> None:
        """Route every alert again (new configuration); timers resume from the logs."""
        self.root = root
        self.receivers = receivers
        self._integrations = [i for items in receivers.values() for i in items]
        self.groups = Groups()
        self.sync_members: dict[str, set[str]] = {
            i.id: set() for i in self._integrations if i.mode == "sync"
        }
        for alert in self.alerts.values():
            self.place(alert)
        for group in self.groups.by_key.values():
            sent = self._last_sent(group)
            if sent is not None:
                group.flushed = True
                group.next_flush = sent + group.route.group_interval

    def _last_sent(self, group: AggregationGroup) -> float | None:
        times = []
        for integration in self.receivers.get(group.route.receiver, []):
            entry = self.group_log.get((integration.id, group_hash(group.key)))
            if entry is not None:
                times.append(entry.sent_at)
            for fp in group.alerts:
                alert_entry = self.alert_log.get((integration.id, fp))
                if alert_entry is not None:
                    times.append(alert_entry.sent_at)
        return max(times) if times else None

    def place(self, alert: AlertRecord) -> None:
        routes = self.root.match(alert.labels)
        for route in routes:
            self.groups.place(route, alert)
        self._join_sync(alert, routes)

    def _join_sync(self, alert: AlertRecord, routes: list[Route]) -> None:
        for route in routes:
            for integration in self.receivers.get(route.receiver, []):
                if integration.mode == "sync":
                    self.sync_members[integration.id].add(alert.fingerprint)

    # ------------------------------------------------------------------------------ changes
    def ingest(self, records: Iterable[AlertRecord]) -> list[str]:
        """Take submitted records in; returns resolved alerts nobody knew (nothing to tell)."""
        orphans = []
        for record in records:
            old = self.alerts.get(record.fingerprint)
            if old is None and not record.firing:
                orphans.append(record.fingerprint)
                continue
            if old is not None and old.firing and record.firing:
                record = replace(record, received_at=old.received_at)
            self.alerts[record.fingerprint] = record
            if not self.groups.update(record):
                self.place(record)
            elif self.sync_members:
                self._join_sync(record, self.root.match(record.labels))
        return orphans

    def plan_sync(self, ctx: planning.Context) -> tuple[list[NewEntry], list[LogKey]]:
        """What to push to each Alertmanager, and which members each can forget."""
        entries: list[NewEntry] = []
        drops: list[LogKey] = []
        by_id = {i.id: i for i in self._integrations}
        for integration_id, members in self.sync_members.items():
            if not members:
                continue
            entry, drop = planning.plan_sync(
                by_id[integration_id], sorted(members), self.alerts, self.alert_log, ctx
            )
            if entry is not None:
                entries.append(entry)
            drops.extend((integration_id, fp) for fp in sorted(drop))
        return entries, drops

    def retire(
        self,
        flushed: dict[str, list[str]],
        sync_drops: list[LogKey],
        orphans: list[str],
        now: float,
    ) -> Retired:
        """Finish a flush: resolved alerts leave their groups (which re-arm their timers),
        empty groups and alerts with nothing left to do are to be deleted; the caller writes
        ``Retired.write`` in the flush's transaction (or later, while storage is down).

        ``flushed`` maps each flushed group's key to the resolved alerts it dealt with.
        """
        candidates: set[str] = set(orphans)
        retired = Retired()
        for key, finished in flushed.items():
            group = self.groups.by_key[key]
            candidates.update(finished)
            if self.groups.flushed(group, finished, now):
                for integration in self.receivers.get(group.route.receiver, []):
                    log_key = (integration.id, group_hash(key))
                    if log_key in self.group_log:
                        retired.group_logs.append((integration.id, key))
                        retired.logs_gone.append(log_key)
        for integration_id, fp in sync_drops:
            retired.alert_logs.append((integration_id, fp))
            self.sync_members[integration_id].discard(fp)
            candidates.add(fp)
        retired.gone = sorted(fp for fp in candidates if self._finished(fp))
        return retired

    def _finished(self, fp: str) -> bool:
        alert = self.alerts.get(fp)
        if alert is not None and alert.firing:
            return False
        if self.groups.holds(fp):
            return False
        return not any(fp in members for members in self.sync_members.values())

    def apply(
        self,
        plan: planning.DeliveryPlan,
        sync_drops: list[LogKey],
        gone: list[str],
        logs_gone: list[LogKey],
    ) -> None:
        """Mirror a committed flush in the logs and the alert table."""
        for integration_id, key, group_entry in plan.group_logs:
            self.group_log[(integration_id, group_hash(key))] = group_entry
        for integration_id, fp, alert_entry in plan.alert_logs:
            self.alert_log[(integration_id, fp)] = alert_entry
        for pair in [*sync_drops, *logs_gone]:
            self.alert_log.pop(pair, None)
            self.group_log.pop(pair, None)
        for fp in gone:
            self.alerts.pop(fp, None)
            for integration in self._integrations:
                self.alert_log.pop((integration.id, fp), None)

    def forget(self, integration_ids: set[str], now: float) -> None:
        """Drop what these integrations were told (after the same was deleted in the store);
        their groups flush at once so they learn the current state."""
        for key in [k for k in self.group_log if k[0] in integration_ids]:
            del self.group_log[key]
        for key in [k for k in self.alert_log if k[0] in integration_ids]:
            del self.alert_log[key]
        receivers = {i.receiver for i in self._integrations if i.id in integration_ids}
        for group in self.groups.by_key.values():
            if group.route.receiver in receivers:
                group.next_flush = min(group.next_flush, now)
