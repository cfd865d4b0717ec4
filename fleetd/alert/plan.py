"""Deciding what to send: from a group (or a sync integration's alerts) to outbox entries.

Pure functions over the dispatcher's state; they return a ``DeliveryPlan`` (entries to queue and the
notification-log entries to write with them, in one transaction) and touch nothing.

* group mode (Slack, webhook, console): Alertmanager's dedup — one message per group when
  ``needs_update`` says so, listing the firing alerts and, with ``send_resolved``, the alerts
  the receiver knew as firing that have since resolved;
* alert mode (PagerDuty): one event per alert that changed — trigger when it first fires for
  this receiver (or when repeat_interval passed and nobody acknowledged it), resolve when an
  alert the receiver knows as open resolves. A resolve goes out even while the alert is
  silenced or inhibited, so no incident is left open by a mute;
* sync mode (Alertmanager): when anything changed or the resend interval passed, the whole
  current state (firing alerts with a lease, recently resolved ones) in one request.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetd.alert.dedup import NotifyReason, needs_update
from fleetd.alert.entries import new_entry
from fleetd.alert.gpuinfo import GpuDetails, collect
from fleetd.alert.integrations import Integration
from fleetd.alert.notification import AlertRecord, Notification, Status
from fleetd.alert.outbox_store import SYNC_GROUP, AlertLogEntry, GroupLogEntry, NewEntry, group_hash
from fleetd.alert.routing import Route
from fleetd.model import Labels

LEASE_RESENDS = 4  # Prometheus: endsAt = now + 4 × resend delay, so two missed sends are fine


@dataclass
class DeliveryPlan:
    entries: list[NewEntry] = field(default_factory=list)
    group_logs: list[tuple[str, str, GroupLogEntry]] = field(default_factory=list)
    alert_logs: list[tuple[str, str, AlertLogEntry]] = field(default_factory=list)

    def extend(self, other: DeliveryPlan) -> None:
        self.entries.extend(other.entries)
        self.group_logs.extend(other.group_logs)
        self.alert_logs.extend(other.alert_logs)


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group at flush time: every alert, and which of them are muted."""

    route: Route
    key: str
    labels: Labels
    alerts: tuple[AlertRecord, ...]  # sorted by (starts_at, fingerprint)
    muted: frozenset[str]


@dataclass(frozen=True, slots=True)
class Context:
    node: str
    external_url: str | None
    now: float
    acknowledged: frozenset[str] = frozenset()
    node_labels: Labels = ()
    gpu_details: GpuDetails | None = None


def plan_group(
    group: GroupView,
    integrations: Sequence[Integration],
    group_log: Mapping[tuple[str, str], GroupLogEntry],
    alert_log: Mapping[tuple[str, str], AlertLogEntry],
    ctx: Context,
) -> DeliveryPlan:
    plan = DeliveryPlan()
    for integration in integrations:
        if integration.mode == "group":
            entry = group_log.get((integration.id, group_hash(group.key)))
            plan.extend(_plan_group_mode(group, integration, entry, ctx))
        elif integration.mode == "alert":
            plan.extend(_plan_alert_mode(group, integration, alert_log, ctx))
    return plan


def _plan_group_mode(
    group: GroupView, integration: Integration, entry: GroupLogEntry | None, ctx: Context
) -> DeliveryPlan:
    visible = [a for a in group.alerts if a.fingerprint not in group.muted]
    firing = frozenset(a.fingerprint for a in visible if a.firing)
    resolved = frozenset(a.fingerprint for a in visible if not a.firing)
    reason = needs_update(
        entry,
        firing,
        resolved,
        send_resolved=integration.send_resolved,
        repeat_interval=group.route.repeat_interval,
        now=ctx.now,
        acknowledged=ctx.acknowledged,
    )
    if reason is None:
        return DeliveryPlan()
    plan = DeliveryPlan(
        group_logs=[(integration.id, group.key, GroupLogEntry(firing, resolved, ctx.now))]
    )
    known = entry.firing if entry is not None else frozenset()
    alerts = [a for a in visible if a.firing]
    if integration.send_resolved:
        alerts += [a for a in visible if not a.firing and a.fingerprint in known]
    if not alerts:
        return plan  # e.g. all resolved but the receiver does not want resolves
    status: Status = "firing" if firing else "resolved"
    notification = _notification(group, integration, ctx, status, tuple(alerts), reason)
    plan.entries.append(_entry(integration, group.key, notification))
    return plan


def _plan_alert_mode(
    group: GroupView,
    integration: Integration,
    alert_log: Mapping[tuple[str, str], AlertLogEntry],
    ctx: Context,
) -> DeliveryPlan:
    plan = DeliveryPlan()
    for alert in group.alerts:
        log = alert_log.get((integration.id, alert.fingerprint))
        known_open = log is not None and log.status == "firing"
        reason: NotifyReason | None = None
        if alert.firing and alert.fingerprint not in group.muted:
            if not known_open:
                reason = NotifyReason.FIRST
            elif (
                log is not None
                and ctx.now - log.sent_at >= group.route.repeat_interval
                and alert.fingerprint not in ctx.acknowledged
            ):
                reason = NotifyReason.REPEAT
        elif not alert.firing and known_open:
            reason = NotifyReason.RESOLVED
        if reason is None:
            continue
        plan.alert_logs.append(
            (
                integration.id,
                alert.fingerprint,
                AlertLogEntry(alert.status, alert.starts_at, ctx.now),
            )
        )
        if not alert.firing and not integration.send_resolved:
            continue
        notification = _notification(group, integration, ctx, alert.status, (alert,), reason)
        plan.entries.append(_entry(integration, group.key, notification))
    return plan


def plan_sync(
    integration: Integration,
    members: Collection[str],
    alerts: Mapping[str, AlertRecord],
    alert_log: Mapping[tuple[str, str], AlertLogEntry],
    ctx: Context,
) -> tuple[NewEntry | None, set[str]]:
    """The state to push to one Alertmanager now (or None), and the members it can forget."""
    current: list[AlertRecord] = []
    drop: set[str] = set()
    due = False
    for fp in members:
        alert = alerts.get(fp)
        log = alert_log.get((integration.id, fp))
        if alert is None:
            drop.add(fp)
            continue
        if not alert.firing:
            ended = alert.ends_at if alert.ends_at is not None else ctx.now
            if log is None or ctx.now - ended >= integration.resolved_retention:
                drop.add(fp)  # never announced, or resolved long enough ago
                continue
        current.append(alert)
        if (
            log is None
            or log.status != alert.status
            or log.starts_at != alert.starts_at
            or ctx.now - log.sent_at >= integration.resend_interval
        ):
            due = True
    if not due or not current:
        return None, drop
    current.sort(key=lambda a: (a.starts_at, a.fingerprint))
    status: Status = "firing" if any(a.firing for a in current) else "resolved"
    notification = replace(
        _notify(integration, ctx, status, SYNC_GROUP, tuple(current), "sync"),
        lease_until=ctx.now + LEASE_RESENDS * integration.resend_interval,
    )
    return _entry(integration, SYNC_GROUP, notification), drop


def _notification(
    group: GroupView,
    integration: Integration,
    ctx: Context,
    status: Status,
    alerts: tuple[AlertRecord, ...],
    reason: NotifyReason,
) -> Notification:
    return replace(
        _notify(integration, ctx, status, group.key, alerts, str(reason)),
        group_labels=group.labels,
        node_labels=ctx.node_labels,
        gpu_details=collect(ctx.gpu_details, (a.label("gpu") for a in alerts)),
    )


def _notify(
    integration: Integration,
    ctx: Context,
    status: Status,
    group_key: str,
    alerts: tuple[AlertRecord, ...],
    reason: str,
) -> Notification:
    """What every notification to ``integration`` of this flush carries."""
    return Notification(
        receiver=integration.receiver,
        integration=integration.id,
        action="notify",
        status=status,
        node=ctx.node,
        created_at=ctx.now,
        group_key=group_key,
        alerts=alerts,
        reason=reason,
        external_url=ctx.external_url,
    )


def _entry(integration: Integration, group_key: str, notification: Notification) -> NewEntry:
    assert notification.group_key == group_key
    return new_entry(integration, notification)
