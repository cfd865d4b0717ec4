"""Two small stand-ins: the ``audit`` webhook receiver and an Alertmanager ``/api/v2/alerts``
recorder (used only when the real Alertmanager binary is absent).

The webhook accepts Alertmanager's webhook message (``version: "4"``: status, receiver,
groupKey, alerts with labels, startsAt, endsAt, generatorURL) and fleetd's change message
(``version: "fleetd-change-1"``: summary, timestamp, labels); anything else is 400.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.standins.http import Incoming, RecordingServer, Reply

ALERT_KEYS = ("status", "labels", "annotations", "startsAt", "endsAt", "generatorURL")


class WebhookStandIn(RecordingServer):
    name = "webhook-standin"

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__()

    @property
    def hook_url(self) -> str:
        return self.url + self.path

    def respond(self, request: Incoming, problems: list[str]) -> Reply:
        if request.method != "POST" or request.path != self.path:
            problems.append(f"{request.method} {request.path}: not the webhook")
            return Reply.text(404, "not found")
        try:
            body = request.json()
        except ValueError:
            problems.append("body is not JSON")
            return Reply.text(400, "bad JSON")
        problems += payload_problems(body)
        return Reply.text(400, "; ".join(problems)) if problems else Reply.text(200, "")

    def payloads(self, version: str | None = None) -> list[dict[str, Any]]:
        out = []
        for record in self.records:
            body = record.json()
            if record.status == 200 and (version is None or body.get("version") == version):
                out.append(body)
        return out


def payload_problems(body: Any) -> list[str]:
    """What a consumer of the two webhook formats would reject."""
    if not isinstance(body, dict):
        return ["payload is not an object"]
    version = body.get("version")
    if version == "fleetd-change-1":
        missing = [k for k in ("summary", "timestamp", "labels", "node") if k not in body]
        return [f"change message without {k}" for k in missing]
    if version != "4":
        return [f"unknown payload version {version!r}"]
    problems = [
        f"message without {k}"
        for k in ("groupKey", "status", "receiver", "alerts")
        if k not in body
    ]
    for i, alert in enumerate(body.get("alerts") or []):
        problems += [f"alerts[{i}] without {k}" for k in ALERT_KEYS if k not in alert]
    return problems


class AlertmanagerRecorder(RecordingServer):
    """``POST /api/v2/alerts`` recorder, and ``GET`` answering the latest state per alert."""

    name = "alertmanager-recorder"

    def __init__(self) -> None:
        self.latest: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        super().__init__()

    def respond(self, request: Incoming, problems: list[str]) -> Reply:
        if request.path.split("?")[0] != "/api/v2/alerts":
            problems.append(f"{request.method} {request.path}: not /api/v2/alerts")
            return Reply.json(404, {"message": "not found"})
        if request.method == "GET":
            return Reply.json(200, list(self.latest.values()))
        try:
            alerts = request.json()
        except ValueError:
            problems.append("body is not JSON")
            return Reply.json(400, {"message": "bad JSON"})
        if not isinstance(alerts, list) or not all(
            isinstance(a, dict) and isinstance(a.get("labels"), dict) for a in alerts
        ):
            problems.append("not a list of alerts with labels")
            return Reply.json(400, {"message": "bad alerts"})
        for alert in alerts:
            self.latest[tuple(sorted(alert["labels"].items()))] = alert
        return Reply.json(200, {})
