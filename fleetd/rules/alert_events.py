"""Alert transitions as event-log entries (kind ``alert``): what fired, when, how bad, why.

The event log answers "what happened to GPU 3 last night" (``fleetctl history``, ``explain``,
``GET /api/v1/alerts/{fingerprint}`` for an alert the dispatcher no longer holds). Firing and
resolving are the moments people look for; pending is not logged (most pending alerts never
fire). ``alert_events`` is pure; ``log_alert_events`` appends its entries through the
event log's ``append_event`` (passed in: the rules know no store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fleetd.model import AlertState, Transition, label_value

ALERT_EVENT_KIND = "alert"
LOGGED = frozenset({AlertState.FIRING, AlertState.RESOLVED})


@dataclass(frozen=True, slots=True)
class AlertEvent:
    """One event-log entry, in ``EventLog.append``'s terms."""

    at: float
    gpu: int | None
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    kind: str = ALERT_EVENT_KIND
    actor: str = "fleetd"


def alert_events(transitions: Iterable[Transition]) -> list[AlertEvent]:
    """The entries for the transitions that fired or resolved an alert, in order."""
    return [_event(t) for t in transitions if t.current in LOGGED and t.previous != t.current]


def log_alert_events(transitions: Iterable[Transition], append: Callable[..., object]) -> None:
    """Append the entries for ``transitions`` with ``append`` (``ResilientStore.append_event``)."""
    for event in alert_events(transitions):
        append(
            event.kind,
            now=event.at,
            gpu=event.gpu,
            message=event.message,
            data=event.data,
            actor=event.actor,
        )


def _event(transition: Transition) -> AlertEvent:
    alert = transition.alert
    rule = alert.key.rule
    raw_gpu = label_value(alert.key.labels, "gpu")
    gpu = int(raw_gpu) if raw_gpu is not None and raw_gpu.isascii() and raw_gpu.isdigit() else None
    summary = label_value(alert.annotations, "summary")
    where = f" on GPU {gpu}" if gpu is not None else ""
    if transition.current == AlertState.FIRING:
        value = f" (value {alert.value:g})" if alert.value is not None else ""
        message = f"{rule} firing ({alert.severity.value}){where}{value}"
        if summary:
            message += f": {summary}"
    else:
        message = f"{rule} resolved{where}"
        reason = label_value(alert.annotations, "resolved_reason")
        if reason:
            message += f": {reason}"
    data: dict[str, Any] = {
        "rule": rule,
        "state": transition.current.value,
        "previous": transition.previous.value,
        "severity": alert.severity.value,
        "gpu": gpu,
        "value": alert.value,
        "summary": summary,
        "fingerprint": alert.key.fingerprint(),
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "active_at": alert.active_at,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
    }
    return AlertEvent(transition.at, gpu, message, data)
