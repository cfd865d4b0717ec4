"""Slack: an incoming webhook, or the Web API with a bot token for threads and edits.

Vendor facts this follows:
* Incoming webhook: POST JSON with ``text`` (also the notification fallback) and ``blocks``;
  success is HTTP 200 with the body ``ok``; errors are an HTTP status with a plain-text reason
  (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
* chat.postMessage / chat.update with ``Authorization: Bearer xoxb-…``: HTTP 200 and
  ``{"ok": true, "channel": …, "ts": …}``, or ``{"ok": false, "error": …}``; rate limiting is
  HTTP 429 with Retry-After (https://docs.slack.dev/reference/methods/chat.postMessage,
  https://docs.slack.dev/reference/methods/chat.update, https://api.slack.com/docs/rate-limits).
* Block Kit: at most 50 blocks; a header's plain text at most 150 characters; a section's
  text at most 3000 (https://api.slack.com/reference/block-kit/blocks). Messages stay short:
  at most ``max_alerts`` alerts are listed and the rest are counted.
"""

from __future__ import annotations

from typing import Any, ClassVar

import requests

from fleetd.alert.base import (
    DeliveryMode,
    HttpNotifyError,
    error_for_status,
    post_json,
    redact,
    truncate,
)
from fleetd.alert.config import SlackConfig
from fleetd.alert.notification import AlertRecord, MessageRef, Notification, Receipt
from fleetd.configbase import Secret

MAX_HEADER = 150
MAX_SECTION = 3000
MAX_FALLBACK = 3000
# Web API errors that are Slack's own trouble, worth another try (chat.postMessage "Errors").
RETRYABLE_API_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)
_EMOJI = {"critical": ":red_circle:", "warning": ":large_orange_circle:"}


class SlackNotifier:
    """Posts one message (or edits one) per call."""

    kind: ClassVar[str] = "slack"
    mode: ClassVar[DeliveryMode] = "group"

    def __init__(self, config: SlackConfig, session: requests.Session) -> None:
        self._config = config
        self._session = session
        self.threads = config.bot_token is not None

    @property
    def _secrets(self) -> list[Secret | None]:
        return [self._config.webhook_url, self._config.bot_token]

    def send(self, notification: Notification) -> Receipt | None:
        text, blocks = render(notification, self._config.max_alerts)
        if self._config.webhook_url is not None:
            self._send_webhook(self._config.webhook_url, text, blocks)
            return None
        if notification.action == "update":
            assert notification.thread is not None
            edit: dict[str, Any] = {
                "channel": notification.thread.channel,
                "ts": notification.thread.ts,
                "text": text,
                "blocks": blocks,
            }
            self._call("chat.update", edit)
            return Receipt(ref=notification.thread)
        body: dict[str, Any] = {"channel": self._config.channel, "text": text, "blocks": blocks}
        if notification.thread is not None:
            body["channel"] = notification.thread.channel
            body["thread_ts"] = notification.thread.ts
            if self._config.reply_broadcast:
                body["reply_broadcast"] = True
        answer = self._call("chat.postMessage", body)
        if notification.thread is not None:
            return Receipt(ref=notification.thread)
        return Receipt(ref=MessageRef(str(answer.get("channel", "")), str(answer.get("ts", ""))))

    def _send_webhook(self, url: Secret, text: str, blocks: list[dict[str, Any]]) -> None:
        payload = {"text": text, "blocks": blocks}
        response = post_json(
            self._session, url.reveal(), payload, timeout=self._config.timeout, what="slack"
        )
        if response.status_code != 200:
            raise error_for_status(response, "slack", self._secrets)
        if response.text.strip() != "ok":
            body = redact(response.text[:200], self._secrets)
            raise HttpNotifyError(
                f"slack: unexpected answer {body!r} (expected 'ok')", retryable=False, status=200
            )

    def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._config.bot_token is not None
        url = f"{self._config.api_url.rstrip('/')}/{method}"
        headers = {
            "Authorization": f"Bearer {self._config.bot_token.reveal()}",
            "Content-Type": "application/json; charset=utf-8",
        }
        response = post_json(
            self._session, url, body, timeout=self._config.timeout, what="slack", headers=headers
        )
        if response.status_code != 200:
            raise error_for_status(response, f"slack {method}", self._secrets)
        try:
            answer = response.json()
        except ValueError:
            raise HttpNotifyError(
                f"slack {method}: answer is not JSON", retryable=True, status=200
            ) from None
        if not isinstance(answer, dict) or answer.get("ok") is not True:
            error = str(answer.get("error", "unknown_error")) if isinstance(answer, dict) else "?"
            error = redact(error, self._secrets)
            raise HttpNotifyError(
                f"slack {method}: {error}", retryable=error in RETRYABLE_API_ERRORS, status=200
            )
        return answer


# ------------------------------------------------------------------------------------ formatting
def render(notification: Notification, max_alerts: int) -> tuple[str, list[dict[str, Any]]]:
    """The plain-text fallback and the Block Kit blocks of one notification."""
    if notification.action == "change":
        return _render_change(notification)
    title = _title(notification)
    shown = notification.alerts[:max_alerts]
    hidden = len(notification.alerts) - len(shown) + notification.truncated_alerts
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(title, MAX_HEADER)}}
    ]
    lines = [title]
    for alert in shown:
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": truncate(_alert_mrkdwn(alert), MAX_SECTION)},
            }
        )
        lines.append(f"- {_alert_plain(alert)}")
    context = [f"node *{_escape(notification.node)}*"]
    if hidden:
        context.append(f"and {hidden} more alert{'s' if hidden != 1 else ''} not listed")
        lines.append(f"(and {hidden} more)")
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]}
    )
    return truncate("\n".join(lines), MAX_FALLBACK), blocks


def _title(notification: Notification) -> str:
    firing = len(notification.firing)
    names = {a.alertname for a in notification.alerts}
    name = next(iter(names)) if len(names) == 1 else f"{len(notification.alerts)} alerts"
    state = f"FIRING:{firing}" if firing else "RESOLVED"
    return f"[{state}] {name} on {notification.node}"


def _where(alert: AlertRecord) -> str:
    gpu = alert.label("gpu")
    return f"GPU {gpu}" if gpu else "node"


def _alert_mrkdwn(alert: AlertRecord) -> str:
    emoji = (
        _EMOJI.get(alert.severity, ":large_blue_circle:") if alert.firing else ":white_check_mark:"
    )
    state = alert.severity if alert.firing else "resolved"
    text = f"{emoji} *{_escape(alert.alertname)}* ({state}) {_where(alert)}"
    summary = alert.annotation("summary")
    if summary:
        text += f"\n{_escape(summary)}"
    if alert.value is not None:
        text += f"\nvalue: `{alert.value:g}`"
    runbook = alert.annotation("runbook_url")
    if runbook and runbook.startswith(("http://", "https://")):
        text += f"\n<{runbook}|Runbook>"
    return text


def _alert_plain(alert: AlertRecord) -> str:
    state = alert.severity if alert.firing else "resolved"
    summary = alert.annotation("summary")
    return f"{alert.alertname} ({state}) {_where(alert)}" + (f": {summary}" if summary else "")


def _render_change(notification: Notification) -> tuple[str, list[dict[str, Any]]]:
    change = notification.change
    assert change is not None
    text = f"{notification.node}: {change.summary}"
    labels = ", ".join(f"{k}={v}" for k, v in change.labels)
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": truncate(f":wrench: {_escape(text)}", MAX_SECTION)},
        }
    ]
    if labels:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": _escape(labels)}]}
        )
    return truncate(text, MAX_FALLBACK), blocks


def _escape(text: str) -> str:
    """Slack mrkdwn control characters (https://api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
