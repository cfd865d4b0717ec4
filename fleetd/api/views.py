"""JSON views of fleetd's value types, as the API returns them.

One place decides field names (snake_case), units (in the name: ``_c``, ``_w``, ``_s``,
``_bytes``) and time (Unix seconds), so every endpoint and fleetctl agree. Missing values
are ``null``, never zero. A value type whose fields already are the API's keys, in the API's
order and with JSON values, is shown with ``dataclasses.asdict``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from fleetd.alert.notification import HeldAlert
from fleetd.alert.silence_store import Silence, silence_json
from fleetd.model import Alert, Health, Labels, label_value
from fleetd.remedy.codec import trigger_to_dict
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.journal import PauseState
from fleetd.remedy.lease import BreakerStatus
from fleetd.remedy.machine import Run
from fleetd.remedy.service import HeldGpus
from fleetd.rules.engine import RuleStatus
from fleetd.rules.state import AlertEntry
from fleetd.store.events import Event

Json = dict[str, Any]


def health_view(health: Health) -> Json:
    """A verdict; ``out_of_service`` says why and by which run when the GPU is out, and
    ``rules_state`` what the rules and telemetry alone say."""
    hold = health.out_of_service
    return {
        "state": health.state.value,
        "data_age_s": _round(health.data_age_s),
        "reasons": list(health.reasons),
        "rules_state": health.judged.value,
        "out_of_service": None
        if hold is None
        else {
            "reason": hold.reason.value,
            "run_id": hold.run_id,
            "plan": hold.plan,
            "run_state": hold.run_state,
            "since": hold.since,
            "detail": hold.detail,
        },
    }


def gpu_of(labels: Labels) -> int | None:
    """The ``gpu`` label as an index, or None for node-level series and alerts."""
    value = label_value(labels, "gpu")
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def alert_view(entry: AlertEntry, muting: HeldAlert | None = None) -> Json:
    """A rules-engine alert; ``muting`` is the dispatcher's view of it when it has one."""
    alert: Alert = entry.alert
    fingerprint = alert.key.fingerprint()
    return {
        "fingerprint": fingerprint,
        "rule": alert.key.rule,
        "state": alert.state.value,
        "severity": alert.severity.value,
        "gpu": gpu_of(alert.key.labels),
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "value": alert.value,
        "active_at": alert.active_at,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
        "no_data_since": entry.no_data_since,
        "remediation_plan": alert.remediation_plan,
        "source": "rules",
        **_muting(muting),
    }


def dispatcher_alert_view(held: HeldAlert) -> Json:
    """An alert only the dispatcher holds (remediation in progress, delivery self-alerts)."""
    record = held.alert
    labels = dict(record.labels)
    return {
        "fingerprint": record.fingerprint,
        "rule": record.rule,
        "state": record.status,
        "severity": record.severity,
        "gpu": gpu_of(record.labels),
        "labels": labels,
        "annotations": dict(record.annotations),
        "value": record.value,
        "active_at": record.starts_at,
        "fired_at": record.starts_at,
        "resolved_at": record.ends_at,
        "no_data_since": None,
        "remediation_plan": None,
        "source": "dispatcher",
        **_muting(held),
    }


def _muting(held: HeldAlert | None) -> Json:
    if held is None:
        return {"silenced_by": [], "inhibited_by": [], "acknowledged": False}
    return {
        "silenced_by": list(held.silenced_by),
        "inhibited_by": list(held.inhibited_by),
        "acknowledged": held.acknowledged,
    }


def silence_view(silence: Silence, now: float) -> Json:
    return {**silence_json(silence), "state": silence.state(now)}


_TRIGGER_INTERNAL = frozenset({"fingerprint", "labels"})
"""Kept in the journal, not shown by the API (docs/api/openapi.yaml ``Run.trigger``)."""


def run_view(run: Run) -> Json:
    """A remediation run: what it is doing, to which GPUs and workers, and why."""
    trigger = run.trigger
    return {
        "run_id": run.run_id,
        "plan": run.plan.value,
        "state": run.state.value,
        "phase": run.state.phase,
        "terminal": run.terminal,
        "holding": run.holding,
        "dry_run": run.dry_run,
        "gpus": list(run.gpu_indices),
        "workers": [
            {"name": w.name, "phase": w.phase.value, "in_flight": w.in_flight, "detail": w.detail}
            for w in run.workers
        ],
        "trigger": {
            **trigger_to_dict(trigger, leave_out=_TRIGGER_INTERNAL),
            "description": trigger.describe(),
        },
        "created_at": run.created_at,
        "entered_at": run.entered_at,
        "next_at": run.next_at,
        "deadline": run.deadline,
        "reset_count": run.reset_count,
        "outcome": run.outcome,
        "problems": list(run.last_problems),
        "evidence": list(run.evidence),
        "bundles": [asdict(b) for b in run.bundles],
        "validators": list(run.settings.validators),
        "validation": [asdict(o) for o in run.validation],
    }


def remediation_event_view(event: RemediationEvent) -> Json:
    return {
        "event_id": event.event_id,
        "run_id": event.run_id,
        "seq": event.seq,
        "at": event.at,
        "kind": event.kind,
        "severity": event.severity,
        "message": event.message,
        "state": event.state,
        "phase": event.phase,
        "plan": event.plan,
        "dry_run": event.dry_run,
        "gpus": list(event.gpus),
        "workers": list(event.workers),
        "evidence": list(event.evidence),
    }


def pause_view(state: PauseState) -> Json:
    return asdict(state)


def breaker_view(state: BreakerStatus) -> Json:
    return {"tripped": state.tripped, "reason": state.reason, "tripped_at": state.tripped_at}


def held_view(held: HeldGpus) -> Json:
    """GPUs a finished run keeps out of service (quarantined, drained) until a human acts."""
    return {
        "run_id": held.run_id,
        "gpus": list(held.gpus),
        "workers": list(held.workers),
        "state": held.state,
        "reason": held.reason,
        "since": held.since,
    }


def event_view(event: Event) -> Json:
    return {
        "id": event.id,
        "ts": event.ts,
        "node": event.node,
        "gpu": event.gpu,
        "kind": event.kind,
        "message": event.message,
        "actor": event.actor,
        "data": dict(event.data),
    }


def rule_status_view(status: RuleStatus) -> Json:
    return asdict(status)


def severity_counts(severities: Iterable[str]) -> dict[str, int]:
    counts = {"critical": 0, "warning": 0, "info": 0}
    for severity in severities:
        counts[severity] = counts.get(severity, 0) + 1
    return counts


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
