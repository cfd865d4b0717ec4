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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import requests

from fleetd.alert.base import (
    DeliveryMode,
    HttpNotifyError,
    error_for_status,
    post_json,
    redact,
)
from fleetd.alert.config import SlackConfig
from fleetd.alert.notification import AlertRecord, MessageRef, Notification, Receipt
from fleetd.alert.wording import cut, gpu_phrase, on_node, split_summary, was
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
            if self._config.reply_broadcast and notification.action == "notify":
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
MAX_LINE = 400  # one alert line; a longer summary is cut at a word
_MORE_ROOM = 40  # kept free in a text for "… and N more alerts not listed"


@dataclass(frozen=True, slots=True)
class _Line:
    """One line of a message: alerts that read the same, and the GPUs they are about."""

    mrkdwn: str
    plain: str
    alerts: int


def render(notification: Notification, max_alerts: int) -> tuple[str, list[dict[str, Any]]]:
    """The plain-text fallback and the Block Kit blocks of one notification.

    Alerts are listed one line each, alerts that say the same thing (same rule, state and
    summary) on one line with their GPUs, at most ``max_alerts`` and as many as fit in a
    section (3000 characters); the rest are counted ("and N more"), never cut mid-word.
    """
    if notification.action == "change":
        return _render_change(notification)
    title = _title(notification)
    shown = notification.alerts[:max_alerts]
    hidden = len(notification.alerts) - len(shown) + notification.truncated_alerts
    lines = _lines(shown)
    md, listed = _fit([line.mrkdwn for line in lines], MAX_SECTION - _MORE_ROOM)
    plain, _ = _fit([title] + [line.plain for line in lines[:listed]], MAX_FALLBACK - _MORE_ROOM)
    hidden += sum(line.alerts for line in lines[listed:])
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": cut(title, MAX_HEADER)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": md or "(no alerts listed)"}},
    ]
    context = [f"node *{_escape(notification.node)}*"]
    context += [f"{_escape(k)} *{_escape(v)}*" for k, v in notification.node_labels]
    if hidden:
        more = f"and {hidden} more alert{'s' if hidden != 1 else ''} not listed"
        context.append(more)
        plain += f"\n({more})"
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(context)}]}
    )
    return plain, blocks


def _fit(lines: list[str], limit: int) -> tuple[str, int]:
    """As many whole lines as fit in ``limit`` characters, and how many that is."""
    out: list[str] = []
    size = 0
    for line in lines:
        extra = len(line) + (1 if out else 0)
        if size + extra > limit:
            break
        out.append(line)
        size += extra
    return "\n".join(out), len(out)


def _title(notification: Notification) -> str:
    firing = len(notification.firing)
    names = {a.alertname for a in notification.alerts}
    name = next(iter(names)) if len(names) == 1 else f"{len(notification.alerts)} alerts"
    state = f"FIRING:{firing}" if firing else "RESOLVED"
    return f"[{state}] {name} on {notification.node}"


def _lines(alerts: Sequence[AlertRecord]) -> list[_Line]:
    """Alerts that read the same share a line; the order is the alerts' own."""
    groups: dict[tuple[str, bool, str, str], list[AlertRecord]] = {}
    for alert in alerts:
        where, what = split_summary(alert)
        merge = bool(where) and where.startswith("GPU ") and "(" not in where
        text = what if alert.firing else ""
        key = (alert.alertname, alert.firing, alert.severity, text if merge else alert.fingerprint)
        groups.setdefault(key, []).append(alert)
    seen_runbooks: set[str] = set()
    out = []
    for members in groups.values():
        out.append(_line(members, seen_runbooks))
    return out


def _line(alerts: list[AlertRecord], seen_runbooks: set[str]) -> _Line:
    first = alerts[0]
    where, what = split_summary(first)
    if len(alerts) > 1:
        where = gpu_phrase(a.label("gpu") or "" for a in alerts)
    name = first.alertname
    if first.firing:
        emoji = _EMOJI.get(first.severity, ":large_blue_circle:")
        state = first.severity
        if not what and first.value is not None:
            what = f"value {first.value:g}"
    else:
        emoji, state = ":white_check_mark:", ""
        last = was(first) if len(alerts) == 1 else ""
        what = f"resolved ({last})" if last else "resolved"
    head = f"{where}: {what}" if where and what else (where or what)
    runbook = first.annotation("runbook_url")
    link = ""
    if runbook and runbook.startswith(("http://", "https://")) and runbook not in seen_runbooks:
        seen_runbooks.add(runbook)
        link = f" <{runbook}|runbook>"
    mrkdwn = cut(f"{emoji} *{_escape(name)}* {_escape(head)}", MAX_LINE) + link
    plain = cut(f"- {name} ({state}) {head}" if first.firing else f"- {name} {head}", MAX_LINE)
    return _Line(mrkdwn, plain, len(alerts))


def _render_change(notification: Notification) -> tuple[str, list[dict[str, Any]]]:
    change = notification.change
    assert change is not None
    text = on_node(notification.node, change.summary)
    labels = ", ".join(f"{k}={v}" for k, v in change.labels)
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": cut(f":wrench: {_escape(text)}", MAX_SECTION)},
        }
    ]
    if labels:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": cut(_escape(labels), 2000)}],
            }
        )
    return cut(text, MAX_FALLBACK), blocks


def _escape(text: str) -> str:
    """Slack mrkdwn control characters (https://api.slack.com/reference/surfaces/formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
