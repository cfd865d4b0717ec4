"""A Slack stand-in: an incoming webhook and the two Web API methods fleetd calls.

* ``POST /services/<T>/<B>/<secret>``: an incoming webhook; ``200 ok`` for a message with
  ``text`` (or blocks/attachments), ``400 invalid_payload`` / ``missing_text_or_fallback_or_
  attachments`` otherwise (integrations.md 3.1);
* ``POST /api/chat.postMessage`` and ``/api/chat.update`` with ``Authorization: Bearer``:
  ``{"ok": true, "channel", "ts"}`` or ``{"ok": false, "error"}`` (3.2).

Slack's documented limit is one message per second (short bursts are Slack's grace, not a
promise): a message that arrives less than ``min_gap`` after the previous accepted one on
the same webhook or channel (chat.postMessage; chat.update is Tier 3) is answered **429 with
Retry-After: 1** and is not posted. Arrival is stamped by the server's thread, which on a
loaded 2-core test machine runs up to a few hundred milliseconds late, so a gap within
``JITTER_S`` of ``min_gap`` still counts as kept: a sender pacing at 1/s passes, one at
1.25/s does not.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from tests.e2e.standins.http import Incoming, RecordingServer, Reply

WEBHOOK_PREFIX = "/services/"
API_PREFIX = "/api/"
CHANNEL_ID = "C0E2E0001"


@dataclass(frozen=True)
class Message:
    """One message Slack accepted (posted, or an edit)."""

    at: float
    where: str  # the webhook path or the channel
    method: str  # webhook | chat.postMessage | chat.update
    text: str
    thread_ts: str | None = None


JITTER_S = 0.2


class SlackStandIn(RecordingServer):
    name = "slack-standin"

    def __init__(self, *, webhook_path: str, bot_token: str, min_gap: float = 1.0) -> None:
        self.webhook_path = webhook_path
        self.bot_token = bot_token
        self.min_gap = min_gap
        self.messages: list[Message] = []
        self._last: dict[str, float] = {}
        self._ts = itertools.count(1)
        super().__init__()

    @property
    def webhook_url(self) -> str:
        return self.url + self.webhook_path

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    def respond(self, request: Incoming, problems: list[str]) -> Reply:
        if request.method == "POST" and request.path == self.webhook_path:
            return self._webhook(request, problems)
        if request.method == "POST" and request.path in (
            API_PREFIX + "chat.postMessage",
            API_PREFIX + "chat.update",
        ):
            return self._web_api(request, problems)
        problems.append(f"{request.method} {request.path}: no such hook or method")
        return Reply.text(404, "no_service")

    def _limited(self, where: str, at: float) -> Reply | None:
        last = self._last.get(where)
        if last is not None and at - last < self.min_gap - JITTER_S:
            return Reply.text(429, "rate_limited", {"Retry-After": "1"})
        return None

    def _webhook(self, request: Incoming, problems: list[str]) -> Reply:
        try:
            body = request.json()
        except ValueError:
            problems.append("body is not JSON")
            return Reply.text(400, "invalid_payload")
        if not isinstance(body, dict) or not (
            body.get("text") or body.get("blocks") or body.get("attachments")
        ):
            problems.append("no text, blocks or attachments")
            return Reply.text(400, "missing_text_or_fallback_or_attachments")
        limited = self._limited(request.path, request.at)
        if limited is not None:
            return limited
        self._last[request.path] = request.at
        self.messages.append(Message(request.at, request.path, "webhook", str(body.get("text"))))
        return Reply.text(200, "ok")

    def _web_api(self, request: Incoming, problems: list[str]) -> Reply:
        method = request.path[len(API_PREFIX) :]
        if request.headers.get("authorization") != f"Bearer {self.bot_token}":
            problems.append("bad or missing bearer token")
            return Reply.json(200, {"ok": False, "error": "invalid_auth"})
        try:
            body: Any = json.loads(request.raw)
        except ValueError:
            problems.append("body is not JSON")
            return Reply.json(200, {"ok": False, "error": "invalid_json"})
        channel = str(body.get("channel", "")) if isinstance(body, dict) else ""
        if not channel:
            problems.append("no channel")
            return Reply.json(200, {"ok": False, "error": "channel_not_found"})
        if not (body.get("text") or body.get("blocks")):
            problems.append("no text or blocks")
            return Reply.json(200, {"ok": False, "error": "no_text"})
        if method == "chat.update" and not body.get("ts"):
            problems.append("chat.update without ts")
            return Reply.json(200, {"ok": False, "error": "message_not_found"})
        # one channel here ("#gpu-incidents" is C0E2E0001); edits are Tier 3, not 1 per second
        if method == "chat.postMessage":
            if self._limited(CHANNEL_ID, request.at) is not None:
                return Reply.json(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "1"})
            self._last[CHANNEL_ID] = request.at
        ts = str(body["ts"]) if method == "chat.update" else f"1767225600.{next(self._ts):06d}"
        thread = body.get("thread_ts")
        self.messages.append(
            Message(request.at, channel, method, str(body.get("text")), thread and str(thread))
        )
        return Reply.json(200, {"ok": True, "channel": CHANNEL_ID, "ts": ts})

    def accepted(self) -> list[Message]:
        with self._lock:
            return list(self.messages)
