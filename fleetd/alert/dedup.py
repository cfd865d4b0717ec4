"""Whether a group needs a notification now: Alertmanager's DedupStage.needsUpdate, pure.

Given what an integration was last told about a group (its notification-log entry) and what
the group holds now, say why to notify, or None. This is what makes a restart, a re-submitted
transition or a repeated flush harmless: nothing new, nothing sent, until repeat_interval.
"""

from __future__ import annotations

from enum import StrEnum

from fleetd.alert.outbox_store import GroupLogEntry


class NotifyReason(StrEnum):
    FIRST = "first_notification"
    NEW_ALERTS = "new_alerts_firing"
    RESOLVED = "alerts_resolved"
    ALL_RESOLVED = "all_alerts_resolved"
    REPEAT = "repeat_interval_elapsed"


def needs_update(
    entry: GroupLogEntry | None,
    firing: frozenset[str],
    resolved: frozenset[str],
    *,
    send_resolved: bool,
    repeat_interval: float,
    now: float,
    acknowledged: frozenset[str] = frozenset(),
) -> NotifyReason | None:
    """Why ``firing``/``resolved`` (fingerprints, unmuted) must be notified now, if at all.

    * never notified: only if something fires (alerts that fired and resolved within
      group_wait are never announced);
    * a firing alert the receiver has not heard of: notify;
    * nothing fires any more but the receiver last heard of firing alerts: notify, whatever
      ``send_resolved`` says, so the log forgets them (the send itself may be skipped);
    * an alert the receiver knew as firing has resolved and it wants resolves: notify;
    * otherwise only after ``repeat_interval``, and not while every firing alert is
      acknowledged.
    """
    if entry is None:
        return NotifyReason.FIRST if firing else None
    if not firing <= entry.firing:
        return NotifyReason.NEW_ALERTS
    if not firing:
        return NotifyReason.ALL_RESOLVED if entry.firing else None
    if send_resolved and not (resolved & entry.firing) <= entry.resolved:
        return NotifyReason.RESOLVED
    if now - entry.sent_at >= repeat_interval and not firing <= acknowledged:
        return NotifyReason.REPEAT
    return None
