"""Alert transitions become event-log entries: firing and resolved, never pending."""

from __future__ import annotations

from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.rules.alert_events import alert_events

NOW = 1_767_225_600.0
KEY = AlertKey("GpuEccUncorrectableError", make_labels({"gpu": 3, "uuid": "U3"}))


def transition(previous: AlertState, current: AlertState, **extra: object) -> Transition:
    alert = Alert(
        KEY,
        current,
        Severity.CRITICAL,
        make_labels({"gpu": 3, "uuid": "U3", "alertname": KEY.rule, "severity": "critical"}),
        annotations=make_labels({"summary": "GPU 3: 1 new uncorrectable ECC error(s)", **extra}),
        value=1.0,
        active_at=NOW - 5,
        fired_at=NOW if current == AlertState.FIRING else NOW - 60,
        resolved_at=NOW if current == AlertState.RESOLVED else None,
    )
    return Transition(alert, previous, current, NOW)


def test_firing_and_resolved_are_logged_with_rule_severity_gpu_value_and_summary() -> None:
    events = alert_events(
        [
            transition(AlertState.INACTIVE, AlertState.PENDING),
            transition(AlertState.PENDING, AlertState.FIRING),
            transition(AlertState.FIRING, AlertState.RESOLVED, resolved_reason="no data for 1h"),
        ]
    )
    assert [e.data["state"] for e in events] == ["firing", "resolved"]
    fired, resolved = events
    assert fired.kind == "alert" and fired.gpu == 3 and fired.at == NOW
    assert fired.message == (
        "GpuEccUncorrectableError firing (critical) on GPU 3 (value 1): "
        "GPU 3: 1 new uncorrectable ECC error(s)"
    )
    assert fired.data["rule"] == "GpuEccUncorrectableError"
    assert fired.data["severity"] == "critical" and fired.data["value"] == 1.0
    assert fired.data["summary"] == "GPU 3: 1 new uncorrectable ECC error(s)"
    assert fired.data["fingerprint"] == KEY.fingerprint()
    assert fired.data["labels"]["alertname"] == "GpuEccUncorrectableError"
    assert resolved.message == "GpuEccUncorrectableError resolved on GPU 3: no data for 1h"
    assert resolved.data["previous"] == "firing" and resolved.data["resolved_at"] == NOW


def test_a_node_level_alert_has_no_gpu() -> None:
    key = AlertKey("FleetdStorageDegraded", ())
    alert = Alert(key, AlertState.FIRING, Severity.WARNING, (), value=None)
    (event,) = alert_events([Transition(alert, AlertState.PENDING, AlertState.FIRING, NOW)])
    assert event.gpu is None and event.message == "FleetdStorageDegraded firing (warning)"
