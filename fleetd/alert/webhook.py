"""A generic webhook that receives Alertmanager's webhook payload (``version: "4"``).

The format is Alertmanager's (prometheus/alertmanager docs/configuration.md, webhook_config),
so anything written for Alertmanager webhooks can take fleetd's notifications unchanged.
Change events (remediation steps) use a small fleetd format and are off by default
(``send_changes``), because an Alertmanager-format consumer would not expect them.

Both carry ``eventId``, the receiver's de-duplication key: delivery is at least once (a crash
between the receiver's answer and fleetd recording it sends the request again), and every
retry and redelivery of one notification carries the same id.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fleetd.alert.base import DeliveryMode, PostingNotifier, post_json_2xx
from fleetd.alert.config import WebhookConfig
from fleetd.alert.links import alert_url
from fleetd.alert.notification import AlertRecord, Notification, Receipt, iso8601

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing
CHANGE_VERSION = "fleetd-change-1"


def generator_url(external_url: str | None, alert: AlertRecord) -> str:
    """The alert's page in fleetd's API, or "" when ``alerting.external_url`` is unset."""
    return alert_url(external_url, alert.fingerprint) or ""


def webhook_alert(alert: AlertRecord, external_url: str | None) -> dict[str, Any]:
    return {
        "status": alert.status,
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": iso8601(alert.starts_at),
        "endsAt": ZERO_TIME if alert.ends_at is None else iso8601(alert.ends_at),
        "generatorURL": generator_url(external_url, alert),
        "fingerprint": alert.fingerprint,
    }


def webhook_payload(notification: Notification, max_alerts: int = 0) -> dict[str, Any]:
    """Alertmanager's webhook message (version 4) for one group notification."""
    alerts = list(notification.alerts)
    truncated = notification.truncated_alerts
    if max_alerts and len(alerts) > max_alerts:
        truncated += len(alerts) - max_alerts
        alerts = alerts[:max_alerts]
    return {
        "version": "4",
        "eventId": notification.event_id,
        "groupKey": notification.group_key,
        "truncatedAlerts": truncated,
        "status": "firing" if notification.firing else "resolved",
        "receiver": notification.receiver,
        "groupLabels": dict(notification.group_labels),
        "commonLabels": notification.common_labels(),
        "commonAnnotations": notification.common_annotations(),
        "externalURL": notification.external_url or "",
        "alerts": [webhook_alert(a, notification.external_url) for a in alerts],
    }


def change_payload(notification: Notification) -> dict[str, Any]:
    change = notification.change
    assert change is not None
    return {
        "version": CHANGE_VERSION,
        "eventId": notification.event_id,
        "receiver": notification.receiver,
        "node": notification.node,
        "summary": change.summary,
        "timestamp": iso8601(change.at),
        "labels": dict(change.labels),
        "details": dict(change.details),
        "links": [{"href": href, "text": text} for href, text in change.links],
        "thread": change.thread,
    }


class WebhookNotifier(PostingNotifier[WebhookConfig]):
    """POSTs one Alertmanager-format message per call; any 2xx is success."""

    kind: ClassVar[str] = "webhook"
    mode: ClassVar[DeliveryMode] = "group"

    def send(self, notification: Notification) -> Receipt | None:
        if notification.action == "change":
            body = change_payload(notification)
        else:
            body = webhook_payload(notification, self._config.max_alerts)
        post_json_2xx(
            self._session, self._config.url, body, timeout=self._config.timeout, what="webhook"
        )
        return None
