"""Aggregation groups: the alerts a route collects under one set of group labels, and when
each group is next due.

Alertmanager's timers: a new group waits ``group_wait`` before its first notification (so
related and inhibiting alerts arrive first); after each flush the group is due again after
``group_interval``; ``repeat_interval`` is checked at those flushes, so it is effectively
rounded up to a multiple of ``group_interval``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetd.alert.notification import AlertRecord
from fleetd.alert.routing import Route
from fleetd.model import Labels


@dataclass
class AggregationGroup:
    route: Route
    key: str
    labels: Labels
    next_flush: float
    flushed: bool = False
    alerts: dict[str, AlertRecord] = field(default_factory=dict)

    def sorted_alerts(self) -> tuple[AlertRecord, ...]:
        return tuple(sorted(self.alerts.values(), key=lambda a: (a.starts_at, a.fingerprint)))


class Groups:
    """Every aggregation group, and which groups each alert is in."""

    def __init__(self) -> None:
        self.by_key: dict[str, AggregationGroup] = {}
        self.by_alert: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self.by_key)

    def place(self, route: Route, alert: AlertRecord) -> AggregationGroup:
        """Put ``alert`` in its group at ``route``, creating the group (due after group_wait)."""
        labels = route.group_labels(alert.labels)
        key = route.group_key(labels)
        group = self.by_key.get(key)
        if group is None:
            group = AggregationGroup(route, key, labels, alert.received_at + route.group_wait)
            self.by_key[key] = group
        group.alerts[alert.fingerprint] = alert
        self.by_alert.setdefault(alert.fingerprint, set()).add(key)
        return group

    def update(self, alert: AlertRecord) -> bool:
        """Replace the record in every group holding it; False when no group holds it."""
        keys = self.by_alert.get(alert.fingerprint)
        if not keys:
            return False
        for key in keys:
            self.by_key[key].alerts[alert.fingerprint] = alert
        return True

    def holds(self, fingerprint: str) -> bool:
        return bool(self.by_alert.get(fingerprint))

    def due(self, now: float) -> list[AggregationGroup]:
        return [g for g in self.by_key.values() if g.next_flush <= now]

    def flushed(self, group: AggregationGroup, done: Iterable[str], now: float) -> bool:
        """After a flush: drop the resolved alerts it dealt with, re-arm the timer.

        Returns True when the group is now empty and was removed.
        """
        for fp in done:
            group.alerts.pop(fp, None)
            keys = self.by_alert.get(fp)
            if keys is not None:
                keys.discard(group.key)
                if not keys:
                    del self.by_alert[fp]
        group.flushed = True
        group.next_flush = now + group.route.group_interval
        if group.alerts:
            return False
        del self.by_key[group.key]
        return True
