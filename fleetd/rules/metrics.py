"""The rules engine's contribution to /metrics, as ``Reading``s the exporter renders.

Names and labels are in ``fleetd.collect.catalog.RULE_METRICS``. Health is a state set (one
series per state, 1 for the current one) so dashboards and a central Prometheus can match
``fleetd_gpu_health{state="unhealthy"} == 1``; the rule export relies on that name too.
``fleetd_gpu_service`` says whether each GPU is in service, and if not why (the state set of
``SERVICE_STATES``): ``fleetd_gpu_health{state="out_of_service"}`` says *that* it is out.
"""

from __future__ import annotations

from functools import lru_cache

from fleetd.model import AlertState, Labels, Reading, Severity, make_labels
from fleetd.rules.coverage import rule_labels
from fleetd.rules.engine import RuleEngine
from fleetd.rules.health import (
    HEALTH_STATES,
    SERVICE_STATES,
    NodeHealth,
    health_labels,
    service_state,
)


def health_readings(report: NodeHealth | None, now: float) -> list[Reading]:
    """The GPU and node health series of one verdict (none before the first)."""
    out: list[Reading] = []
    if report is None:
        return out
    append = out.append
    for item in report.gpus:
        uuid = item.uuid or ""
        age_labels, service_labels = _gpu_series_labels(item.gpu, uuid)
        health = item.health.state
        for state, labels in zip(HEALTH_STATES, health_labels(item.gpu, uuid), strict=True):
            append(Reading("fleetd_gpu_health", labels, float(health == state), now))
        if item.health.data_age_s is not None:
            age = float(item.health.data_age_s)
            append(Reading("fleetd_gpu_health_data_age_seconds", age_labels, age, now))
        current = service_state(item)
        for name, labels in zip(SERVICE_STATES, service_labels, strict=True):
            append(Reading("fleetd_gpu_service", labels, float(current == name), now))
    node = report.node
    for state, labels in zip(HEALTH_STATES, _NODE_HEALTH_LABELS, strict=True):
        append(Reading("fleetd_node_health", labels, float(node.state == state), now))
    if node.data_age_s is not None:
        append(Reading("fleetd_node_health_data_age_seconds", (), float(node.data_age_s), now))
    return out


# every evaluation writes ~11 series a device (704 on a CPX node): their label tuples are
# built once a device (the health state set's by ``fleetd.rules.health``)
_NODE_HEALTH_LABELS = tuple(make_labels({"state": state.value}) for state in HEALTH_STATES)


@lru_cache(maxsize=1024)
def _gpu_series_labels(gpu: str, uuid: str) -> tuple[Labels, tuple[Labels, ...]]:
    """The labels of a device's data age and of its service state set."""
    base = {"gpu": gpu, "uuid": uuid}
    return make_labels(base), tuple(make_labels({**base, "state": name}) for name in SERVICE_STATES)


def rule_readings(
    engine: RuleEngine, now: float, *, health: NodeHealth | None = None
) -> list[Reading]:
    """Every rule, alert and health metric value as of the last evaluation (``health``:
    that verdict with a newer view of what remediation has out of service)."""
    out = health_readings(health if health is not None else engine.health(), now)

    def add(name: str, value: float, **labels: object) -> None:
        out.append(Reading(name, make_labels(labels), float(value), now))

    counts = {(sev, st): 0 for sev in Severity for st in (AlertState.PENDING, AlertState.FIRING)}
    for alert in engine.alerts():
        if (alert.severity, alert.state) in counts:
            counts[(alert.severity, alert.state)] += 1
    for (severity, alert_state), count in counts.items():
        add("fleetd_alerts", count, severity=severity.value, state=alert_state.value)

    for status in engine.rule_statuses():
        labels = rule_labels(status.rule)
        if status.health != "unknown":
            out.append(Reading("fleetd_rule_health", labels, float(status.health == "ok"), now))
        failures = float(status.failures_total)
        out.append(Reading("fleetd_rule_evaluation_failures_total", labels, failures, now))
    add("fleetd_rule_evaluation_duration_seconds", engine.last_duration_s)
    add("fleetd_rules_loaded", len(engine.rules))
    reloads = engine.reload_status
    add("fleetd_rule_reloads_total", reloads.successes, result="success")
    add("fleetd_rule_reloads_total", reloads.failures, result="failure")
    add("fleetd_rules_last_reload_success", reloads.last_ok)
    return out
