"""The rules engine's contribution to /metrics, as ``Reading``s the exporter renders.

Names and labels are in ``fleetd.collect.catalog.RULE_METRICS``. Health is a state set (one
series per state, 1 for the current one) so dashboards and a central Prometheus can match
``fleetd_gpu_health{state="unhealthy"} == 1``; the rule export relies on that name too.
``fleetd_gpu_service`` says whether each GPU is in service, and if not why (the state set of
``SERVICE_STATES``): ``fleetd_gpu_health{state="out_of_service"}`` says *that* it is out.
"""

from __future__ import annotations

from fleetd.model import AlertState, HealthState, Reading, Severity, make_labels
from fleetd.rules.engine import RuleEngine
from fleetd.rules.health import SERVICE_STATES, NodeHealth, service_state


def health_readings(report: NodeHealth | None, now: float) -> list[Reading]:
    """The GPU and node health series of one verdict (none before the first)."""
    out: list[Reading] = []

    def add(name: str, value: float, **labels: object) -> None:
        out.append(Reading(name, make_labels(labels), float(value), now))

    if report is None:
        return out
    for item in report.gpus:
        uuid = item.uuid or ""
        for state in HealthState:
            add(
                "fleetd_gpu_health",
                item.health.state == state,
                gpu=item.gpu,
                uuid=uuid,
                state=state.value,
            )
        if item.health.data_age_s is not None:
            add(
                "fleetd_gpu_health_data_age_seconds",
                item.health.data_age_s,
                gpu=item.gpu,
                uuid=uuid,
            )
        current = service_state(item)
        for name in SERVICE_STATES:
            add("fleetd_gpu_service", current == name, gpu=item.gpu, uuid=uuid, state=name)
    for state in HealthState:
        add("fleetd_node_health", report.node.state == state, state=state.value)
    if report.node.data_age_s is not None:
        add("fleetd_node_health_data_age_seconds", report.node.data_age_s)
    return out


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
        if status.health != "unknown":
            add("fleetd_rule_health", status.health == "ok", rule=status.rule)
        add("fleetd_rule_evaluation_failures_total", status.failures_total, rule=status.rule)
    add("fleetd_rule_evaluation_duration_seconds", engine.last_duration_s)
    add("fleetd_rules_loaded", len(engine.rules))
    reloads = engine.reload_status
    add("fleetd_rule_reloads_total", reloads.successes, result="success")
    add("fleetd_rule_reloads_total", reloads.failures, result="failure")
    add("fleetd_rules_last_reload_success", reloads.last_ok)
    return out
