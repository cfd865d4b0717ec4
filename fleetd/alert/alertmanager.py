"""Feeding an existing Alertmanager through its API v2 (POST /api/v2/alerts).

Client duties from Alertmanager's docs/alerts_api.md, done the way Prometheus does them:
* re-send firing alerts periodically, with ``endsAt`` a few resend intervals ahead (a lease),
  so an Alertmanager that stops hearing from us resolves them by itself;
* resolve by sending the same labels with ``endsAt`` ≤ now, and keep re-sending the resolved
  alert for a while so a restarted Alertmanager still learns of it;
* in an HA setup send to EVERY Alertmanager (one integration per URL), never load-balance.
The dispatcher owns the cadence (``sync`` mode); this module only builds and posts the list.
Routing decides which alerts an Alertmanager gets, but fleetd's grouping, silences and
inhibition do not apply: Alertmanager groups, silences and inhibits by itself, and an alert
fleetd stopped sending would look resolved to it.
Alertmanager answers 200, or 400 for a malformed alert, or 5xx.
"""

from __future__ import annotations

from typing import Any, ClassVar

import requests

from fleetd.alert.base import DeliveryMode, PostingNotifier, post_json_2xx
from fleetd.alert.config import AlertmanagerConfig
from fleetd.alert.notification import AlertRecord, Notification, Receipt, iso8601
from fleetd.alert.webhook import generator_url

ALERTS_PATH = "/api/v2/alerts"


def postable_alert(
    alert: AlertRecord, lease_until: float | None, external_url: str | None
) -> dict[str, Any]:
    """One entry of the POST /api/v2/alerts body (openapi.yaml: postableAlert)."""
    item: dict[str, Any] = {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": iso8601(alert.starts_at),
    }
    ends = alert.ends_at if not alert.firing else lease_until
    if ends is not None:
        item["endsAt"] = iso8601(ends)
    url = generator_url(external_url, alert)
    if url:
        item["generatorURL"] = url
    return item


class AlertmanagerNotifier(PostingNotifier[AlertmanagerConfig]):
    """POSTs the current state of a list of alerts to one Alertmanager."""

    kind: ClassVar[str] = "alertmanager"
    mode: ClassVar[DeliveryMode] = "sync"

    def __init__(self, config: AlertmanagerConfig, session: requests.Session) -> None:
        super().__init__(config, session)
        self._url = config.url.rstrip("/") + ALERTS_PATH

    @property
    def resend_interval(self) -> float:
        return self._config.resend_interval

    @property
    def resolved_retention(self) -> float:
        return self._config.resolved_retention

    def send(self, notification: Notification) -> Receipt | None:
        body = [
            postable_alert(a, notification.lease_until, notification.external_url)
            for a in notification.alerts
        ]
        post_json_2xx(
            self._session,
            self._url,
            body,
            timeout=self._config.timeout,
            what="alertmanager",
            token=self._config.bearer_token,
        )
        return None
