"""A PagerDuty Events API v2 stand-in: /v2/enqueue and /v2/change/enqueue.

It checks every body against the Events v2 rules (/work/shared/reference/integrations.md,
Part 2): ``routing_key``; ``event_action`` trigger/acknowledge/resolve; ``dedup_key`` at most
255 characters and required for acknowledge/resolve; a trigger's ``payload.summary`` (1 to
1024 characters), ``payload.source`` and ``payload.severity`` (critical, error, warning,
info); ISO 8601 timestamps; ``links[].href``; change events' ``payload.summary``,
``payload.timestamp`` and ``payload.source``; 512 KB per event. A violation is answered 400
with PagerDuty's error JSON, anything else 202. With ``per_minute`` set, more calls than that
within a sliding 60 s answer 429, as PagerDuty's rate limit does.

It also keeps PagerDuty's alert model (the same dedup_key and routing_key apply to one open
alert; a resolve without an open alert is dropped), so a test can tell a resolve that closed
something from one that PagerDuty would have thrown away.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.e2e.standins.http import Incoming, Record, RecordingServer, Reply

ALERT_PATH = "/v2/enqueue"
CHANGE_PATH = "/v2/change/enqueue"
SEVERITIES = frozenset({"critical", "error", "warning", "info"})
ACTIONS = frozenset({"trigger", "acknowledge", "resolve"})
MAX_SUMMARY = 1024
MAX_DEDUP_KEY = 255
MAX_EVENT_BYTES = 512 * 1024
ISO8601 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)$")


@dataclass(frozen=True)
class Event:
    """One accepted (202) event."""

    record: Record
    body: dict[str, Any]
    kind: str  # trigger | acknowledge | resolve | change
    closed_alert: bool = False  # a resolve that found an open alert to close

    @property
    def at(self) -> float:
        return self.record.at

    @property
    def payload(self) -> dict[str, Any]:
        payload = self.body.get("payload")
        return payload if isinstance(payload, dict) else {}

    @property
    def summary(self) -> str:
        return str(self.payload.get("summary", ""))

    @property
    def dedup_key(self) -> str:
        return str(self.body.get("dedup_key", ""))

    @property
    def details(self) -> dict[str, Any]:
        details = self.payload.get("custom_details")
        return details if isinstance(details, dict) else {}

    @property
    def labels(self) -> dict[str, Any]:
        labels = self.details.get("labels")
        return labels if isinstance(labels, dict) else {}

    def about(self, alertname: str, gpu: int | None = None) -> bool:
        """The event is about ``alertname`` (on ``gpu``), whichever field of it says so."""
        names = {self.details.get("alertname"), self.labels.get("alertname"),
                 self.payload.get("class")}  # fmt: skip
        if alertname not in names:
            return False
        if gpu is None:
            return True
        gpus = {str(self.labels.get("gpu")), str(self.details.get("gpu")),
                str(self.payload.get("component"))}  # fmt: skip
        return bool(gpus & {str(gpu), f"gpu{gpu}"})


class PagerDutyStandIn(RecordingServer):
    name = "pagerduty-standin"

    def __init__(self, routing_key: str, *, per_minute: int | None = None) -> None:
        self.routing_key = routing_key
        self.per_minute = per_minute
        self.events: list[Event] = []
        self.open_alerts: dict[tuple[str, str], dict[str, Any]] = {}
        super().__init__()

    # ---- answering -------------------------------------------------------------------------
    def respond(self, request: Incoming, problems: list[str]) -> Reply:
        if request.method != "POST" or request.path not in (ALERT_PATH, CHANGE_PATH):
            problems.append(f"{request.method} {request.path}: not an Events API v2 endpoint")
            return Reply.json(404, {"status": "Not found", "message": "Not found"})
        if self.per_minute is not None:
            recent = [r for r in self._records if request.at - r.at < 60.0]
            if len(recent) >= self.per_minute:
                return Reply.json(
                    429,
                    {
                        "status": "throttle event",
                        "message": "Requests for this service are arriving too quickly. "
                        "Please retry later.",
                    },
                )
        if len(request.raw) > MAX_EVENT_BYTES:
            problems.append(f"event is {len(request.raw)} bytes, over 512 KB")
            return _invalid(problems)
        try:
            body = request.json()
        except ValueError:
            problems.append("JSON parse error")
            return Reply.json(
                400,
                {
                    "status": "Unrecognized object",
                    "message": "Event object format is unrecognized",
                    "errors": ["JSON parse error"],
                },
            )
        if not isinstance(body, dict):
            problems.append("the event is not a JSON object")
            return _invalid(problems)
        if request.path == CHANGE_PATH:
            problems += change_problems(body, self.routing_key)
            kind = "change"
        else:
            problems += alert_problems(body, self.routing_key)
            kind = str(body.get("event_action"))
        if problems:
            return _invalid(problems)
        record = Record(request.at, request.method, request.path, request.headers, request.raw, 202)
        self.events.append(Event(record, body, kind, self._apply(kind, body)))
        if kind == "change":
            return Reply.json(202, {"status": "success", "message": "Change event processed"})
        return Reply.json(
            202,
            {"status": "success", "message": "Event processed", "dedup_key": body["dedup_key"]},
        )

    def _apply(self, kind: str, body: dict[str, Any]) -> bool:
        """PagerDuty's alert model; True when a resolve closed an open alert."""
        if kind == "change":
            return False
        key = (str(body["routing_key"]), str(body.get("dedup_key", "")))
        if kind == "trigger":
            self.open_alerts.setdefault(key, body)
            return False
        if kind == "resolve":
            return self.open_alerts.pop(key, None) is not None
        return False

    # ---- reading -----------------------------------------------------------------------------
    def accepted(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    def triggers(self, alertname: str | None = None, gpu: int | None = None) -> list[Event]:
        """Accepted triggers (about ``alertname`` on ``gpu``, when given)."""
        return [
            e
            for e in self.accepted()
            if e.kind == "trigger" and (alertname is None or e.about(alertname, gpu))
        ]

    def resolves(self, dedup_key: str | None = None) -> list[Event]:
        return [
            e
            for e in self.accepted()
            if e.kind == "resolve" and (dedup_key is None or e.dedup_key == dedup_key)
        ]

    def changes(self) -> list[Event]:
        return [e for e in self.accepted() if e.kind == "change"]


def _invalid(problems: list[str]) -> Reply:
    return Reply.json(
        400, {"status": "invalid event", "message": "Event object is invalid", "errors": problems}
    )


def _text(value: object, name: str, problems: list[str], *, limit: int | None = None) -> None:
    if not isinstance(value, str) or not value.strip():
        problems.append(f"'{name}' is missing or blank")
    elif limit is not None and len(value) > limit:
        problems.append(f"'{name}' is {len(value)} characters, over {limit}")


def _timestamp(value: object, name: str, problems: list[str]) -> None:
    if not isinstance(value, str) or not ISO8601.match(value):
        problems.append(f"'{name}' is not an ISO 8601 timestamp: {value!r}")


def _routing_key(body: dict[str, Any], expected: str, problems: list[str]) -> None:
    key = body.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        problems.append("'routing_key' must be a 32-character integration key")
    elif key != expected:
        problems.append("'routing_key' is not an integration key of this account")


def _links(body: dict[str, Any], problems: list[str]) -> None:
    links = body.get("links", [])
    if not isinstance(links, list):
        problems.append("'links' must be a list")
        return
    for i, link in enumerate(links):
        if not isinstance(link, dict):
            problems.append(f"'links[{i}]' must be an object")
            continue
        _text(link.get("href"), f"links[{i}].href", problems)
        if "text" in link and not isinstance(link["text"], str):
            problems.append(f"'links[{i}].text' must be a string")
    images = body.get("images", [])
    if not isinstance(images, list) or not all(
        isinstance(i, dict) and str(i.get("src", "")).startswith("https://") for i in images
    ):
        problems.append("'images' must be a list of objects with an https 'src'")


def alert_problems(body: dict[str, Any], routing_key: str) -> list[str]:
    """What PagerDuty would reject in one alert event (empty: valid)."""
    problems: list[str] = []
    _routing_key(body, routing_key, problems)
    action = body.get("event_action")
    if action not in ACTIONS:
        problems.append(f"'event_action' must be trigger, acknowledge or resolve, not {action!r}")
    dedup = body.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or len(dedup) > MAX_DEDUP_KEY):
        problems.append(f"'dedup_key' must be a string of at most {MAX_DEDUP_KEY} characters")
    if action in ("acknowledge", "resolve") and not dedup:
        problems.append(f"'dedup_key' is required to {action}")
    if action == "trigger":
        payload = body.get("payload")
        if not isinstance(payload, dict):
            problems.append("'payload' is missing")
            payload = {}
        _text(payload.get("summary"), "payload.summary", problems, limit=MAX_SUMMARY)
        _text(payload.get("source"), "payload.source", problems)
        if payload.get("severity") not in SEVERITIES:
            problems.append(
                f"'payload.severity' must be critical, error, warning or info, "
                f"not {payload.get('severity')!r}"
            )
        if "timestamp" in payload:
            _timestamp(payload["timestamp"], "payload.timestamp", problems)
        for name in ("component", "group", "class"):
            if name in payload and not isinstance(payload[name], str):
                problems.append(f"'payload.{name}' must be a string")
        if "custom_details" in payload and not isinstance(payload["custom_details"], dict | str):
            problems.append("'payload.custom_details' must be an object")
        for name in ("client", "client_url"):
            if name in body and not isinstance(body[name], str):
                problems.append(f"'{name}' must be a string")
    _links(body, problems)
    return problems


def change_problems(body: dict[str, Any], routing_key: str) -> list[str]:
    """What PagerDuty would reject in one change event (empty: valid)."""
    problems: list[str] = []
    _routing_key(body, routing_key, problems)
    if isinstance(body.get("routing_key"), str) and body["routing_key"].startswith("R"):
        problems.append("change events need a service integration key, not a ruleset key")
    payload = body.get("payload")
    if not isinstance(payload, dict):
        problems.append("'payload' is missing")
        payload = {}
    _text(payload.get("summary"), "payload.summary", problems, limit=MAX_SUMMARY)
    _timestamp(payload.get("timestamp"), "payload.timestamp", problems)
    _text(payload.get("source"), "payload.source", problems)
    if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
        problems.append("'payload.custom_details' must be an object")
    for name in ("event_action", "dedup_key"):
        if name in body:
            problems.append(f"'{name}' does not belong in a change event")
    _links(body, problems)
    if len(json.dumps(body).encode()) > MAX_EVENT_BYTES:
        problems.append("change event over 512 KB")
    return problems
