"""Remediation events to the alert dispatcher: change events, and the alerts people need.

Every step is journaled and written to the event log, but only the *milestones* of a run
become ``ChangeEvent`` notifications (never pages; the id is the event id, so a redelivery
after a crash is queued once; the thread is the run, so Slack threads them): planned (what,
why, which GPUs and workers), reset done, and how it ended (back in service, quarantined,
aborted, drained, rebooting) — per-worker detail inside the message, not as messages. So a
run speaks about three times per integration, never once per worker per step.

Three kinds of alerts go through the normal alert path, where routing, grouping, silences
and inhibition apply:

* ``GpuRemediationInProgress`` per GPU of the unit, from the moment the run holds its lease
  until it concludes — the dispatcher's default inhibition mutes the consequences of the
  drain and reset on that GPU meanwhile, never the alert that caused the run (named in its
  ``caused_by`` annotation);
* ``GpuRemediationHeld``, once per reset unit (labelled with the faulty GPU and the unit's
  ``gpus``), when a run leaves workers out of service (quarantine, a drain, a cancel after
  the stop): critical pages a human — one incident per unit; resolved when it is back;
* ``GpuRemediationBreakerOpen`` (node level) while the circuit breaker is open.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from fleetd.alert.config import REMEDIATION_ALERT
from fleetd.alert.notification import ChangeEvent, DetailValue
from fleetd.alert.ticket import TICKET_KIND
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy.codec import event_to_dict
from fleetd.remedy.events import ChangeSink, RemediationEvent
from fleetd.remedy.machine import gpu_ranges

HELD_ALERT = "GpuRemediationHeld"
MAX_SUMMARY = 1024
_OPERATOR_KINDS = frozenset({"paused", "resumed", "breaker_reset"})
BREAKER_ALERT = "GpuRemediationBreakerOpen"

_CONCLUDED = frozenset({"done", "quarantined", "aborted", "drained"})
MILESTONES = frozenset(
    {
        "run_planned",
        "classified",
        "replanned",
        "reset_done",
        "reboot_intent",
        *_CONCLUDED,
        "hold_released",
        # node level: decisions about remediation itself
        "not_remediated",
        "paused",
        "resumed",
        "breaker_tripped",
        "breaker_reset",
    }
)
"""The kinds of remediation event that are notified as change events; the rest (each
worker's step, waits, checks) stay in the journal and the event log."""
AFTER_THE_END = frozenset({"evidence_captured", "evidence_failed"})
"""Notified only once the run has concluded (the bundle a quarantine captures comes after
its page); the pre-reset bundle is named in ``reset_done``'s details instead."""
_ENDED_STATES = frozenset({"done", "quarantined", "aborted", "drained"})


def notified(event: RemediationEvent) -> bool:
    """Whether ``event`` becomes a change event (an RMA ticket is one, for the ticket
    receivers alone: ``fleetd.alert.integrations.takes_change``)."""
    return (
        event.kind in MILESTONES
        or event.kind == TICKET_KIND
        or (event.kind in AFTER_THE_END and event.state in _ENDED_STATES)
    )


class AlertIntake(Protocol):
    """The two inputs of ``fleetd.alert.dispatch.Dispatcher`` remediation uses."""

    def submit(self, transitions: Sequence[Transition], now: float) -> None: ...

    def submit_change(self, event: ChangeEvent, now: float) -> int: ...


class FanoutSink:
    """Hands every remediation step to several sinks (the dispatcher, the demo's timeline)."""

    def __init__(self, sinks: list[ChangeSink]) -> None:
        self._sinks = sinks

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        for sink in self._sinks:
            sink.submit_change(event, now)


class DispatcherSink:
    """A ``ChangeSink`` that speaks to the alert dispatcher."""

    def __init__(self, dispatcher: AlertIntake) -> None:
        self._dispatcher = dispatcher

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        transitions = alert_transitions(event)
        if transitions:
            self._dispatcher.submit(transitions, now)
        if notified(event):
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
    for key, value in event.details:
        details[key] = value
    prefix = "[dry-run] " if event.dry_run else ""
    return ChangeEvent(
        summary=f"{prefix}{event.node}: {event.message}"[:1024],
        at=event.at,
        labels=make_labels(labels),
        details=details,
        id=event.event_id,
        thread=event.run_id,
    )


def alert_transitions(event: RemediationEvent) -> list[Transition]:
    """The alerts this event opens or closes (none for a dry run)."""
    if event.dry_run:
        return []
    out: list[Transition] = []
    if event.run_id is None:
        if event.kind == "breaker_tripped":
            out.append(_transition(BREAKER_ALERT, event, {}, Severity.CRITICAL, AlertState.FIRING))
        elif event.kind == "breaker_reset":
            out.append(_transition(BREAKER_ALERT, event, {}, Severity.INFO, AlertState.RESOLVED))
        return out
    if event.kind == "lease_granted":
        out += [_in_progress(event, g, AlertState.FIRING) for g in event.gpus]
    if event.kind in _CONCLUDED:
        out += [_in_progress(event, g, AlertState.RESOLVED) for g in event.gpus]
    if event.raise_alert and event.gpus:
        severity = Severity(event.severity) if event.severity != "info" else Severity.WARNING
        out.append(_held(event, severity, AlertState.FIRING))
    if event.resolve_alert and event.gpus:
        out.append(_held(event, Severity.INFO, AlertState.RESOLVED))
    return out


def _in_progress(event: RemediationEvent, gpu: int, state: AlertState) -> Transition:
    """One GPU being worked on; it names the alert that caused the run so inhibition never
    mutes that alert."""
    trigger = event.trigger
    cause = trigger.describe() if trigger is not None else "a remediation request"
    annotations = {
        "summary": (
            f"GPU {gpu} is out of service for remediation: {event.plan} of GPUs "
            f"{gpu_ranges(event.gpus)} for {cause} (run {event.run_id})"
        ),
    }
    if trigger is not None and trigger.fingerprint is not None:
        annotations["caused_by"] = trigger.fingerprint
    return _transition(REMEDIATION_ALERT, event, {"gpu": gpu}, Severity.INFO, state, annotations)


def _held(event: RemediationEvent, severity: Severity, state: AlertState) -> Transition:
    """The unit held out of service: one alert (one incident) per unit, keyed by the GPU the
    run was about, with the unit's GPUs listed once."""
    trigger_gpu = event.trigger.gpu if event.trigger is not None else None
    gpu = trigger_gpu if trigger_gpu in event.gpus else min(event.gpus)
    annotations = {
        "summary": _summary(held_summary(event)),
        "description": _summary(event.message),
        "gpus": gpu_ranges(event.gpus),
    }
    if event.workers:
        annotations["workers"] = ", ".join(event.workers)
    if event.trigger is not None:
        annotations["trigger"] = event.trigger.describe()
    bundles = [line for line in event.evidence if line.startswith("evidence bundle")]
    if bundles:  # where the pre-reset state is kept, and its digest (fleetctl evidence)
        annotations["evidence"] = "; ".join(bundles)
    labels = {"gpu": gpu, "gpus": ",".join(str(g) for g in sorted(event.gpus))}
    return _transition(HELD_ALERT, event, labels, severity, state, annotations, key={"gpu": gpu})


def held_summary(event: RemediationEvent) -> str:
    """One line a person reads once: which GPUs, in what state, why. The workers and the
    trigger are details of their own, not repeated here."""
    gpus = f"GPUs {gpu_ranges(event.gpus)}" if len(event.gpus) > 1 else f"GPU {event.gpus[0]}"
    why = event.outcome or event.message
    if event.kind == "quarantined":
        return f"{gpus} quarantined: {why}; a person must decide (fleetctl undrain)"
    if event.kind == "drained":
        return f"{gpus} drained on request and held out of service"
    if event.kind == "aborted":
        return f"{gpus}: remediation aborted ({why})"
    return event.message


def _transition(
    name: str,
    event: RemediationEvent,
    labels: dict[str, object],
    severity: Severity,
    state: AlertState,
    annotations: dict[str, str] | None = None,
    *,
    key: dict[str, object] | None = None,
) -> Transition:
    key_labels: dict[str, object] = {"node": event.node, **(key if key is not None else labels)}
    full = {**key_labels, **labels, "alertname": name, "severity": severity.value}
    if event.run_id is not None:
        full["run_id"] = event.run_id
    firing = state is AlertState.FIRING
    alert = Alert(
        key=AlertKey(name, make_labels(key_labels)),
        state=state,
        severity=severity,
        labels=make_labels(full),
        annotations=make_labels(annotations or {"summary": _summary(event.message)}),
        active_at=event.at if firing else None,
        fired_at=event.at if firing else None,
        resolved_at=None if firing else event.at,
        last_eval_at=event.at,
    )
    previous = AlertState.INACTIVE if firing else AlertState.FIRING
    return Transition(alert, previous, state, event.at)


def _summary(text: str) -> str:
    """A summary a person reads once: at most 1,024 characters, cut at a word."""
    if len(text) <= MAX_SUMMARY:
        return text
    return text[: MAX_SUMMARY - 1].rsplit(" ", 1)[0] + "…"


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
            data=event_to_dict(event),
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
