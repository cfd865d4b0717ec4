"""Annotation templates render like Prometheus; the rule metrics match the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.catalog import CATALOG
from fleetd.model import Reading, make_labels
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.rules.metrics import rule_readings
from fleetd.rules.templates import (
    TemplateError,
    compile_template,
    go_float,
    humanize,
    humanize_duration,
)
from fleetd.store.memory import MemoryWindow


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (91.0, "91"),
        (91.25, "91.25"),
        (-3.5, "-3.5"),
        (123456.7, "123456.7"),
        (1234567.0, "1.234567e+06"),
        (1e6, "1e+06"),
        (0.0001, "0.0001"),
        (1e-05, "1e-05"),
        (0.0, "0"),
        (float("inf"), "+Inf"),
    ],
)
def test_value_prints_like_go(value: float, text: str) -> None:
    assert go_float(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0"), (950.0, "950"), (1234.0, "1.234k"), (2.5e9, "2.5G"), (0.0125, "12.5m")],
)
def test_humanize(value: float, text: str) -> None:
    assert humanize(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0s"),
        (5.5, "5.5s"),
        (65.0, "1m 5s"),
        (3725.0, "1h 2m 5s"),
        (90061.0, "1d 1h 1m 1s"),
        (0.25, "250ms"),
    ],
)
def test_humanize_duration(value: float, text: str) -> None:
    assert humanize_duration(value) == text


def test_template_forms() -> None:
    tpl = compile_template(
        'GPU {{ $labels.gpu }}: {{ $value }} / {{ printf "%.1f°C" $value }}'
        ' / {{ $value | printf "%.0f" }}'
        " / {{ humanizePercentage $value }} / {{ $labels.missing }}."
    )
    assert tpl.render(0.456, {"gpu": "3"}) == "GPU 3: 0.456 / 0.5°C / 0 / 45.6% / ."


@pytest.mark.parametrize(
    ("text", "offset", "message"),
    [
        ("{{ $foo }}", 3, "unsupported template syntax"),
        ("{{ }}", 2, "empty"),
        ("{{ $value | nope }}", 12, "unknown template function 'nope'"),
        ('{{ printf "%d" $value }}', 10, "exactly one %f, %e or %g"),
        ("a }} b", 2, "unbalanced '}}'"),
        ("{{ $labels.x | humanize }}", 2, "functions apply to $value only"),
        ("{{ $value $value }}", 10, "expected '|' or '}}'"),
        ("{{ range . }}", 9, "unsupported template syntax"),
    ],
)
def test_template_errors_have_positions(text: str, offset: int, message: str) -> None:
    with pytest.raises(TemplateError) as info:
        compile_template(text)
    assert message in info.value.message and info.value.offset == offset


def test_rule_readings_use_catalog_names_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        "rules:\n"
        "  - name: Hot\n    expr: temp > 90\n    severity: critical\n"
        "  - name: Broken\n"
        "    expr: temp - on(uuid) (fleetd_gpu_up or fleetd_gpu_info)\n"
        "    severity: info\n"
    )
    clock = FakeClock()
    engine = RuleEngine(load_rule_set([path]), EngineSettings(), timer=clock.monotonic)
    window = MemoryWindow(retention=3600)
    for gpu in (0, 1):
        base = {"gpu": gpu, "uuid": f"U{gpu}"}
        window.append(
            [
                Reading("fleetd_gpu_up", make_labels(base), 1.0, clock.now()),
                Reading(
                    "fleetd_gpu_info", make_labels({**base, "model": "MI300X"}), 1.0, clock.now()
                ),
                Reading("temp", make_labels(base), 95.0 if gpu else 60.0, clock.now()),
            ]
        )
    engine.evaluate(window, clock.now())
    readings = rule_readings(engine, clock.now())
    for reading in readings:
        spec = CATALOG[reading.metric]
        assert tuple(k for k, _ in reading.labels) == tuple(sorted(spec.labels)), reading
    values = {(r.metric, r.labels): r.value for r in readings}
    assert (
        values[("fleetd_gpu_health", make_labels({"gpu": 1, "uuid": "U1", "state": "unhealthy"}))]
        == 1.0
    )
    assert (
        values[("fleetd_gpu_health", make_labels({"gpu": 0, "uuid": "U0", "state": "healthy"}))]
        == 1.0
    )
    assert values[("fleetd_node_health", make_labels({"state": "unhealthy"}))] == 1.0
    assert (
        values[("fleetd_alerts", make_labels({"severity": "critical", "state": "firing"}))] == 1.0
    )
    assert values[("fleetd_rule_health", make_labels({"rule": "Broken"}))] == 0.0
    assert values[("fleetd_rule_evaluation_failures_total", make_labels({"rule": "Broken"}))] == 1.0
    assert values[("fleetd_rules_loaded", ())] == 2.0
    assert values[("fleetd_rules_last_reload_success", ())] == 1.0
