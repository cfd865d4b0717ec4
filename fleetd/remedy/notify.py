"""Remediation events to the alert dispatcher: change events, and the alerts people need.

Every step becomes a ``ChangeEvent`` (never pages; its id is the event id, so a redelivery
after a crash is queued once). Three kinds of alerts go through the normal alert path, where
routing, grouping, silences and inhibition apply:

* ``GpuRemediationInProgress`` per GPU of the unit, from the moment the run holds its lease
  until it concludes — the dispatcher's default inhibition mutes the GPU's follow-on alerts
  (worker down, …) while it is being worked on;
* ``GpuRemediationHeld`` per GPU when a run leaves workers out of service (quarantine, a
  drain, a cancel after the stop): critical pages a human; resolved when the GPU is back;
* ``GpuRemediationBreakerOpen`` (node level) while the circuit breaker is open.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from fleetd.alert.config import REMEDIATION_ALERT
from fleetd.alert.notification import ChangeEvent, DetailValue
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy.events import RemediationEvent

HELD_ALERT = "GpuRemediationHeld"
_OPERATOR_KINDS = frozenset({"paused", "resumed", "breaker_reset"})
BREAKER_ALERT = "GpuRemediationBreakerOpen"

_CONCLUDED = frozenset({"done", "quarantined", "aborted", "drained"})


class Dispatcher(Protocol):
    """The two inputs of ``fleetd.alert.dispatch.Dispatcher`` remediation uses."""

    def submit(self, transitions: Sequence[Transition], now: float) -> None: ...

    def submit_change(self, event: ChangeEvent, now: float) -> int: ...


class DispatcherSink:
    """A ``ChangeSink`` that speaks to the alert dispatcher."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        transitions = alert_transitions(event)
        if transitions:
            self._dispatcher.submit(transitions, now)
        self._dispatcher.submit_change(change_event(event), now)


def change_event(event: RemediationEvent) -> ChangeEvent:
    labels: dict[str, str] = {"node": event.node, "kind": event.kind, "severity": event.severity}
    if event.run_id is not None:
        labels |= {"run_id": event.run_id, "plan": event.plan, "state": event.state}
    if event.gpus:
        labels["gpus"] = ",".join(str(g) for g in event.gpus)
    details: dict[str, DetailValue] = {"dry_run": event.dry_run}
    if event.workers:
        details["workers"] = ", ".join(event.workers)
    if event.trigger is not None:
        details["trigger"] = event.trigger.describe()
        if event.trigger.fingerprint is not None:
            details["alert_fingerprint"] = event.trigger.fingerprint
    for i, line in enumerate(event.evidence, start=1):
        details[f"evidence_{i}"] = line
    prefix = "[dry-run] " if event.dry_run else ""
    return ChangeEvent(
        summary=f"{prefix}{event.node}: {event.message}"[:1024],
        at=event.at,
        labels=make_labels(labels),
        details=details,
        id=event.event_id,
    )


def alert_transitions(event: RemediationEvent) -> list[Transition]:
    """The alerts this event opens or closes (none for a dry run)."""
    if event.dry_run:
        return []
    out: list[Transition] = []
    if event.run_id is None:
        if event.kind == "breaker_tripped":
            out.append(_firing(BREAKER_ALERT, event, None, Severity.CRITICAL))
        elif event.kind == "breaker_reset":
            out.append(_resolved(BREAKER_ALERT, event, None))
        return out
    if event.kind == "lease_granted":
        out += [_firing(REMEDIATION_ALERT, event, g, Severity.INFO) for g in event.gpus]
    if event.kind in _CONCLUDED:
        out += [_resolved(REMEDIATION_ALERT, event, g) for g in event.gpus]
    if event.raise_alert:
        severity = Severity(event.severity) if event.severity != "info" else Severity.WARNING
        out += [_firing(HELD_ALERT, event, g, severity) for g in event.gpus]
    if event.resolve_alert:
        out += [_resolved(HELD_ALERT, event, g) for g in event.gpus]
    return out


def _alert(
    name: str, event: RemediationEvent, gpu: int | None, severity: Severity, state: AlertState
) -> Alert:
    key_labels: dict[str, object] = {"node": event.node}
    if gpu is not None:
        key_labels["gpu"] = gpu
    labels = {**key_labels, "alertname": name, "severity": severity.value}
    if event.run_id is not None:
        labels["run_id"] = event.run_id
    firing = state is AlertState.FIRING
    return Alert(
        key=AlertKey(name, make_labels(key_labels)),
        state=state,
        severity=severity,
        labels=make_labels(labels),
        annotations=make_labels({"summary": event.message[:1024]}),
        active_at=event.at if firing else None,
        fired_at=event.at if firing else None,
        resolved_at=None if firing else event.at,
        last_eval_at=event.at,
    )


def _firing(name: str, event: RemediationEvent, gpu: int | None, severity: Severity) -> Transition:
    alert = _alert(name, event, gpu, severity, AlertState.FIRING)
    return Transition(alert, AlertState.INACTIVE, AlertState.FIRING, event.at)


def _resolved(name: str, event: RemediationEvent, gpu: int | None) -> Transition:
    alert = _alert(name, event, gpu, Severity.INFO, AlertState.RESOLVED)
    return Transition(alert, AlertState.FIRING, AlertState.RESOLVED, event.at)


class EventLogSink:
    """An ``EventSink`` writing each step to the store's event log (queryable by GPU)."""

    def __init__(self, append: Callable[..., object]) -> None:
        """``append`` is ``EventLog.append`` or ``ResilientStore.append_event`` (same keywords)."""
        self._append = append

    def record(self, event: RemediationEvent) -> None:
        self._append(
            event_log_kind(event),
            now=event.at,
            node=event.node,
            gpu=_event_gpu(event),
            message=event.message,
            data=event.to_dict(),
            actor=event.actor or "fleetd",
        )


def event_log_kind(event: RemediationEvent) -> str:
    """``reset`` for the reset, ``operator_action`` for a person's action, else remediation."""
    if event.kind == "reset_intent" and not event.dry_run:
        return "reset"
    if event.kind in _OPERATOR_KINDS or (event.actor is not None and event.kind == "run_planned"):
        return "operator_action"
    return "remediation"


def _event_gpu(event: RemediationEvent) -> int | None:
    if event.trigger is not None and event.trigger.gpu is not None:
        return event.trigger.gpu
    return event.gpus[0] if len(event.gpus) == 1 else None
