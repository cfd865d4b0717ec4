"""GPU and node health: precedence of the verdicts, unknown for stale data, and the roll-up."""

from __future__ import annotations

from fleetd.model import (
    Alert,
    AlertKey,
    AlertState,
    HealthState,
    Sample,
    SeriesKey,
    Severity,
    make_labels,
)
from fleetd.rules.health import assess, health_vector
from fleetd.rules.state import AlertEntry

NOW = 1_767_225_600.0
H, D, U, K = HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY, HealthState.UNKNOWN


def up(*ages: float | None) -> dict[SeriesKey, Sample | None]:
    out: dict[SeriesKey, Sample | None] = {}
    for gpu, age in enumerate(ages):
        key = SeriesKey("fleetd_gpu_up", make_labels({"gpu": gpu, "uuid": f"U{gpu}"}))
        out[key] = None if age is None else Sample(NOW - age, 1.0)
    return out


def firing(
    rule: str, severity: Severity, gpu: int | None = None, *, no_data: float | None = None
) -> AlertEntry:
    labels = make_labels({} if gpu is None else {"gpu": gpu, "uuid": f"U{gpu}"})
    alert = Alert(AlertKey(rule, labels), AlertState.FIRING, severity, labels)
    return AlertEntry(alert, None if no_data is None else NOW - no_data)


def verdicts(report) -> list[HealthState]:  # type: ignore[no-untyped-def]
    return [g.health.state for g in report.gpus]


def test_fresh_and_quiet_is_healthy_with_its_data_age() -> None:
    report = assess(up(2.0, 4.0), [], NOW, stale_after_s=17.5)
    assert verdicts(report) == [H, H]
    assert report.node.state == H and report.node.data_age_s == 4.0
    assert report.gpus[0].health.data_age_s == 2.0


def test_warning_degrades_critical_makes_unhealthy_info_changes_nothing() -> None:
    alerts = [
        firing("Warm", Severity.WARNING, 0),
        firing("Broken", Severity.CRITICAL, 1),
        firing("Busy", Severity.INFO, 2),
    ]
    report = assess(up(1, 1, 1), alerts, NOW, stale_after_s=17.5)
    assert verdicts(report) == [D, U, H]
    assert report.gpus[1].health.reasons == ("Broken (critical)",)
    assert report.node.state == U


def test_stale_telemetry_is_unknown_even_with_a_critical_alert() -> None:
    """No verdict without data: not unhealthy forever, and never healthy."""
    report = assess(
        up(60.0, None), [firing("Broken", Severity.CRITICAL, 0)], NOW, stale_after_s=17.5
    )
    assert verdicts(report) == [K, K]
    assert report.gpus[0].health.reasons == ("no fresh telemetry for 1m",)
    assert report.gpus[1].health.data_age_s is None
    assert report.node.state == K


def test_an_alert_that_lost_its_data_makes_the_gpu_unknown() -> None:
    alerts = [
        firing("Hot", Severity.CRITICAL, 0, no_data=90.0),
        firing("Warm", Severity.WARNING, 0),
    ]
    report = assess(up(1.0), alerts, NOW, stale_after_s=17.5)
    assert verdicts(report) == [K]
    assert report.gpus[0].health.reasons == ("Hot: no data for 1m30s", "Warm (warning)")


def test_a_fresh_critical_outranks_an_unknown_alert() -> None:
    alerts = [
        firing("Hot", Severity.CRITICAL, 0, no_data=90.0),
        firing("Gone", Severity.CRITICAL, 0),
    ]
    assert verdicts(assess(up(1.0), alerts, NOW, stale_after_s=17.5)) == [U]


def test_node_rolls_up_worst_first_with_unknown_between_unhealthy_and_degraded() -> None:
    assert (
        assess(up(1, 1), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5).node.state
        == D
    )
    assert (
        assess(up(1, 60), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5).node.state
        == K
    )
    mixed = [firing("W", Severity.WARNING, 0), firing("C", Severity.CRITICAL, 1)]
    assert assess(up(1, 1, 60), mixed, NOW, stale_after_s=17.5).node.state == U


def test_node_level_alerts_count_for_the_node() -> None:
    report = assess(up(1, 1), [firing("NodeHot", Severity.CRITICAL)], NOW, stale_after_s=17.5)
    assert verdicts(report) == [H, H]
    assert report.node.state == U and "NodeHot (critical)" in report.node.reasons


def test_no_gpus_is_unknown() -> None:
    report = assess({}, [], NOW, stale_after_s=17.5)
    assert report.node.state == K and report.gpus == ()


def test_gpus_are_ordered_by_index_and_a_replaced_gpu_reports_its_newest_uuid() -> None:
    data = up(1, 1)
    data[SeriesKey("fleetd_gpu_up", make_labels({"gpu": 10, "uuid": "U10"}))] = Sample(NOW, 1.0)
    data[SeriesKey("fleetd_gpu_up", make_labels({"gpu": 1, "uuid": "NEW"}))] = Sample(NOW, 1.0)
    report = assess(data, [], NOW, stale_after_s=17.5)
    assert [(g.gpu, g.uuid) for g in report.gpus] == [("0", "U0"), ("1", "NEW"), ("10", "U10")]


def test_health_vector_is_a_state_set() -> None:
    report = assess(up(1), [firing("W", Severity.WARNING, 0)], NOW, stale_after_s=17.5)
    vector = health_vector(report)
    assert vector[make_labels({"gpu": 0, "uuid": "U0", "state": "degraded"})] == 1.0
    assert sum(vector.values()) == 1.0 and len(vector) == 4
