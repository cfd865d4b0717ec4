"""Delivery self-metrics: what was sent, failed, retried and rejected, per integration.

Counters live in memory (they restart from zero with the process, as Prometheus counters
may); queue depth and the age of the oldest pending entry are read from the outbox when
asked, so they are true even for entries a previous process left behind. Every name is in
``fleetd.collect.catalog.ALERT_METRICS``; values never contain a secret.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from fleetd.model import Reading, make_labels

SENT = "fleetd_alert_notifications_sent_total"
FAILED = "fleetd_alert_notifications_failed_total"
RETRIED = "fleetd_alert_notifications_retried_total"
CONFIG_ERRORS = "fleetd_alert_config_errors_total"
REJECTING = "fleetd_alert_receiver_rejecting"
PENDING = "fleetd_alert_outbox_pending"
OLDEST_AGE = "fleetd_alert_outbox_oldest_pending_age_seconds"


@dataclass
class IntegrationStats:
    """Counters and the last outcome of one integration."""

    receiver: str
    integration: str  # <kind>/<index>
    sent: int = 0
    failed: int = 0
    retried: int = 0
    config_errors: int = 0
    rejecting: bool = False  # the receiver answered "your request/config is wrong" last time
    last_error: str | None = None  # redacted
    last_error_at: float | None = None
    last_success_at: float | None = None
    logged_error: str | None = None  # the error text last logged, so each is logged once

    def as_dict(self) -> dict[str, object]:
        """Every field but ``logged_error`` (the log's own bookkeeping), for the API."""
        data: dict[str, object] = asdict(self)
        del data["logged_error"]
        return data


def readings(
    stats: Iterable[tuple[str, IntegrationStats]],
    pending: Mapping[str, tuple[int, float]],
    now: float,
) -> list[Reading]:
    """Current values of every delivery metric; ``stats`` pairs an integration id with its stats."""
    out: list[Reading] = []
    for integration_id, s in stats:
        labels = make_labels({"receiver": s.receiver, "integration": s.integration})
        depth, oldest = pending.get(integration_id, (0, now))
        values = (
            (SENT, float(s.sent)),
            (FAILED, float(s.failed)),
            (RETRIED, float(s.retried)),
            (CONFIG_ERRORS, float(s.config_errors)),
            (REJECTING, 1.0 if s.rejecting else 0.0),
            (PENDING, float(depth)),
            (OLDEST_AGE, max(0.0, now - oldest) if depth else 0.0),
        )
        out.extend(Reading(name, labels, value, now) for name, value in values)
    return out
