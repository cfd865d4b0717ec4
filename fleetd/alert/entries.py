"""From a notification to the outbox entry that carries it, and which lane it takes.

Lanes: per integration the outbox delivers every URGENT entry before any INFORMATIONAL one, each
lane in the order it was queued. A rate-limited receiver therefore gets a new page as its
next request even with a remediation run's change events queued ahead of it.

* urgent: alert notifications (triggers, resolves, acknowledgements, group messages) with at
  least one alert above ``info``;
* informational: change events, chat edits of an earlier message, and notifications whose
  alerts are all ``info`` (``GpuRemediationInProgress``).

An alert's resolve never takes a faster lane than its trigger did unless its severity rose
between the two, which fleetd's alerts never do (remediation resolves with ``info``), so a
resolve cannot overtake the trigger it closes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fleetd.alert.notification import Notification
from fleetd.alert.outbox_store import INFORMATIONAL, URGENT, NewEntry

if TYPE_CHECKING:
    from fleetd.alert.integrations import Integration

__all__ = ["INFORMATIONAL", "URGENT", "new_entry", "priority"]


def new_entry(
    integration: Integration, notification: Notification, *, dedup_id: str | None = None
) -> NewEntry:
    """The outbox entry for ``notification`` on ``integration``, with its event id fixed."""
    if not notification.id:
        notification = replace(notification, id=notification.event_id)
    return NewEntry(
        integration=integration.id,
        receiver=integration.receiver,
        kind=integration.kind,
        action=notification.action,
        group_key=notification.group_key,
        payload=notification.to_json(),
        dedup_id=dedup_id,
        priority=priority(notification),
    )


def priority(notification: Notification) -> int:
    if notification.action in ("change", "update"):
        return INFORMATIONAL
    if notification.alerts and all(a.severity == "info" for a in notification.alerts):
        return INFORMATIONAL
    return URGENT
