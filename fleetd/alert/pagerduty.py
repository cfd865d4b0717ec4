"""PagerDuty Events API v2: alert events (trigger/acknowledge/resolve) and change events.

Vendor facts this follows (PagerDuty/developer-docs docs/events-API-v2/, 02-Trigger-Events.md,
03-Change-Events.md, 01-Overview.md):
* alert events go to /v2/enqueue, change events to /v2/change/enqueue; the ``routing_key`` in
  the body is the credential; success is 202;
* ``dedup_key`` is at most 255 characters; events with the same key and routing key apply to
  the same open alert, and a resolve with that key closes it;
* ``payload.summary`` is at most 1024 characters; ``payload.severity`` is one of critical,
  error, warning, info; ``source`` should be a hostname;
* the whole event may be at most 512 KB; like Alertmanager, custom_details go first if over;
* 429 means rate limited (not ingested), 5xx or no answer: retry; other 4xx: do not retry.
Change events never notify anyone, which is why remediation steps go out as change events.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import requests

from fleetd.alert.base import DeliveryMode, PostingNotifier, post_json_2xx, truncate
from fleetd.alert.config import PagerDutyConfig
from fleetd.alert.links import alert_url
from fleetd.alert.notification import AlertRecord, ChangeEvent, Notification, Receipt, iso8601
from fleetd.alert.wording import cut, headline

MAX_SUMMARY = 1024  # payload.summary, 02-Trigger-Events.md
MAX_DEDUP_KEY = 255  # dedup_key, 02-Trigger-Events.md
MAX_EVENT_BYTES = 512_000  # 01-Overview.md: events larger than 512 KB are rejected
SEVERITIES = frozenset({"critical", "error", "warning", "info"})
_DROPPED = {"note": "custom_details dropped: the event was larger than 512 KB"}


def dedup_key(node: str, alert: AlertRecord) -> str:
    """Stable per alert: node, GPU, rule, then the alert's fingerprint (its other labels).

    The same key triggers and resolves one PagerDuty alert, across restarts and hosts; it has
    no timestamp in it, so a firing episode that starts again opens a new incident only after
    the previous one was resolved (PagerDuty's rule).
    """
    gpu = alert.label("gpu")
    where = f"gpu{gpu}" if gpu else "node"
    tail = f"/{where}/{alert.rule}/{alert.fingerprint}"
    head = "fleetd/" + node
    room = MAX_DEDUP_KEY - len(tail)
    if room < len("fleetd/") + 1:
        return truncate(f"fleetd/{alert.fingerprint}/{alert.rule}", MAX_DEDUP_KEY, "")
    return head[:room] + tail


def severity(alert: AlertRecord) -> str:
    return alert.severity if alert.severity in SEVERITIES else "error"


def summary(node: str, alert: AlertRecord) -> str:
    """The incident title: node, GPU and the rule's summary, each said once, ≤ 1024 chars."""
    return cut(headline(node, alert), MAX_SUMMARY)


class PagerDutyNotifier(PostingNotifier[PagerDutyConfig]):
    """Sends one Events API v2 event per call."""

    kind: ClassVar[str] = "pagerduty"
    mode: ClassVar[DeliveryMode] = "alert"

    def __init__(
        self,
        config: PagerDutyConfig,
        session: requests.Session,
        *,
        source: str,
        external_url: str | None = None,
    ) -> None:
        super().__init__(config, session)
        self._source = config.source or source
        self._client_url = config.client_url or external_url

    def send(self, notification: Notification) -> Receipt | None:
        if notification.action == "change":
            assert notification.change is not None
            body = self.change_event(notification.change)
            url = self._config.change_url
        else:
            body = self.alert_event(notification)
            url = self._config.url
        post_json_2xx(
            self._session,
            url,
            body,
            timeout=self._config.timeout,
            what="pagerduty",
            secrets=[self._config.routing_key],
        )
        return None

    # -------------------------------------------------------------------------------- payloads
    def alert_event(self, notification: Notification) -> dict[str, Any]:
        """The Events API v2 alert event for the single alert in ``notification``."""
        (alert,) = notification.alerts
        action = _event_action(notification)
        event: dict[str, Any] = {
            "routing_key": self._config.routing_key.reveal(),
            "event_action": action,
            "dedup_key": dedup_key(notification.node, alert),
        }
        if action != "trigger":
            return event
        payload: dict[str, Any] = {
            "summary": summary(notification.node, alert),
            "source": self._source,
            "severity": severity(alert),
            "timestamp": iso8601(alert.starts_at),
            "component": f"gpu{alert.label('gpu')}" if alert.label("gpu") else "node",
            "class": alert.rule,
            "custom_details": _details(alert, notification),
        }
        if self._config.group:
            payload["group"] = self._config.group
        event["payload"] = payload
        event["client"] = self._config.client
        if self._client_url:
            event["client_url"] = self._client_url
        links = _links(alert, notification.external_url)
        if links:
            event["links"] = links
        return _fit(event)

    def change_event(self, change: ChangeEvent) -> dict[str, Any]:
        """The Events API v2 change event for one remediation step."""
        details: dict[str, Any] = {"labels": dict(change.labels)}
        if change.thread:
            details["thread"] = change.thread
        details.update(change.details)
        event: dict[str, Any] = {
            "routing_key": self._config.routing_key.reveal(),
            "payload": {
                "summary": cut(change.summary, MAX_SUMMARY),
                "source": self._source,
                "timestamp": iso8601(change.at),
                "custom_details": details,
            },
        }
        links = [{"href": href, "text": text} for href, text in change.links]
        if links:
            event["links"] = links
        return _fit(event)


def _event_action(notification: Notification) -> str:
    if notification.action == "acknowledge":
        return "acknowledge"
    return "trigger" if notification.status == "firing" else "resolve"


def _details(alert: AlertRecord, notification: Notification) -> dict[str, Any]:
    """What the responder reads first: the alert, the GPU (serial, BDF, product, firmware:
    what an RMA asks for) and the node's labels (cluster, rack)."""
    annotations = dict(alert.annotations)
    details: dict[str, Any] = {
        "alertname": alert.alertname,
        "rule": alert.rule,
        "value": alert.value,
        "labels": dict(alert.labels),
        "started_at": iso8601(alert.starts_at),
        "fingerprint": alert.fingerprint,
        "node": notification.node,
    }
    if notification.node_labels:
        details["node_labels"] = dict(notification.node_labels)
    gpu = notification.gpu_details.get(alert.label("gpu") or "")
    if gpu:
        details["gpu"] = dict(gpu)
    for key in ("description", "evidence", "runbook_url"):
        if key in annotations:
            details[key] = annotations.pop(key)
    annotations.pop("summary", None)
    if annotations:
        details["annotations"] = annotations
    return details


def _links(alert: AlertRecord, external_url: str | None) -> list[dict[str, str]]:
    links = []
    runbook = alert.annotation("runbook_url")
    if runbook and runbook.startswith(("http://", "https://")):
        links.append({"href": runbook, "text": "Runbook"})
    href = alert_url(external_url, alert.fingerprint)
    if href is not None:
        links.append({"href": href, "text": "fleetd"})
    return links


def _fit(event: dict[str, Any]) -> dict[str, Any]:
    """Drop custom_details when the event is over PagerDuty's 512 KB limit."""
    if len(json.dumps(event).encode()) <= MAX_EVENT_BYTES:
        return event
    payload = dict(event["payload"])
    payload["custom_details"] = _DROPPED
    return {**event, "payload": payload}
