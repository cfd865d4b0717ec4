"""The console receiver: one line per alert as it fires or resolves (the demo prints these).

It works alert by alert (like PagerDuty), not group by group: a line says what changed, and
an alert already printed is not printed again when its group changes.

Writes to the stream it is given (stdout in the demo; under systemd that is the journal).
A line is ``<time> FIRING <severity> <alertname> <labels> value=<v>: <summary>`` or
``<time> RESOLVED <severity> <alertname> <labels> was=<v>``, or one JSON object per line with
``format: json``.
"""

from __future__ import annotations

import json
from typing import ClassVar, TextIO

from fleetd.alert.base import DeliveryMode
from fleetd.alert.config import ConsoleConfig
from fleetd.alert.notification import AlertRecord, Notification, Receipt, iso8601
from fleetd.errors import NotifyError

_HIDDEN_LABELS = frozenset({"alertname", "severity"})


def alert_line(alert: AlertRecord, at: float) -> str:
    """A firing alert with its value and summary; a resolved one with its last value as
    ``was=`` and no summary (the summary describes the moment it fired)."""
    state = "FIRING" if alert.firing else "RESOLVED"
    labels = " ".join(f"{k}={v}" for k, v in alert.labels if k not in _HIDDEN_LABELS)
    line = f"{iso8601(at)} {state:<8} {alert.severity:<8} {alert.alertname}"
    if labels:
        line += f" {labels}"
    if alert.value is not None:
        line += f" {'value' if alert.firing else 'was'}={alert.value:g}"
    summary = alert.annotation("summary")
    if summary and alert.firing:
        line += f": {summary}"
    return line


class ConsoleNotifier:
    """Prints notifications; a closed or broken stream is a retryable failure."""

    kind: ClassVar[str] = "console"
    mode: ClassVar[DeliveryMode] = "alert"
    threads = False

    def __init__(self, config: ConsoleConfig, stream: TextIO) -> None:
        self._config = config
        self._stream = stream

    def send(self, notification: Notification) -> Receipt | None:
        lines = self._lines(notification)
        try:
            self._stream.write("".join(line + "\n" for line in lines))
            self._stream.flush()
        except (OSError, ValueError) as exc:
            raise NotifyError(
                f"console: cannot write ({type(exc).__name__})", retryable=True
            ) from None
        return None

    def _lines(self, notification: Notification) -> list[str]:
        if notification.action == "change":
            change = notification.change
            assert change is not None
            if self._config.format == "json":
                return [
                    json.dumps({"type": "change", "node": notification.node, **change.to_dict()})
                ]
            labels = " ".join(f"{k}={v}" for k, v in change.labels)
            return [
                f"{iso8601(change.at)} CHANGE   {change.summary}" + (f" {labels}" if labels else "")
            ]
        out = []
        for alert in notification.alerts:
            at = alert.ends_at if (not alert.firing and alert.ends_at) else alert.starts_at
            if self._config.format == "json":
                out.append(
                    json.dumps({"type": "alert", "node": notification.node, **alert.to_dict()})
                )
            else:
                out.append(alert_line(alert, at))
        return out
