"""Per-rule staged trust: ``mode: shadow | alert | remediate`` in rule files and the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.errors import ConfigError
from fleetd.model import AlertState
from fleetd.rules.loader import load_rule_file, load_rule_set
from fleetd.rules.trust import log_shadow_events, rule_modes
from tests.rules.test_rule_engine import Node, engine_for, run

F = AlertState.FIRING

RULES = """
rules:
  - name: Hot
    expr: temp
    op: ">"
    threshold: 90
    severity: critical
    remediation: {plan: reset}
    mode: {mode}
"""


def _text(mode: str | None) -> str:
    text = RULES.replace("{mode}", mode or "")
    return text if mode is not None else text.replace("    mode: \n", "")


def test_the_default_mode_is_what_each_rule_did_before(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(_text(None) + "  - name: Warm\n    expr: temp > 80\n    severity: warning\n")
    rules = {r.name: r for r in load_rule_file(path).rules}
    assert rules["Hot"].mode == "remediate" and rules["Hot"].remediates
    assert rules["Warm"].mode == "alert" and not rules["Warm"].remediates
    assert [(m.rule, m.mode, m.plan) for m in rule_modes(load_rule_set([path]))] == [
        ("Hot", "remediate", "reset"),
        ("Warm", "alert", None),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: warning\n"
            "    mode: remediate\n",
            "r.yaml:5:5: rules[0].mode: mode remediate needs a remediation plan",
        ),
        (
            "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: warning\n    mode: loud\n",
            "r.yaml:5:5: rules[0].mode:",
        ),
    ],
    ids=["remediate-without-plan", "unknown-mode"],
)
def test_a_bad_mode_is_refused_with_its_position(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rule_file(path)
    shown = [str(p).replace(str(tmp_path) + "/", "") for p in info.value.problems]
    assert len(shown) == 1 and shown[0].startswith(problem), shown


def test_alert_mode_notifies_but_never_asks_for_remediation(tmp_path: Path) -> None:
    from fleetd.clock import FakeClock
    from tests.rules.test_rule_engine import T0

    node = Node(FakeClock(T0))
    engine = engine_for(tmp_path, _text("alert"))
    node.temps[0] = 95.0
    assert run(engine, node, 1) == [("0", AlertState.INACTIVE, F)]
    (alert,) = engine.alerts()
    assert alert.state is F and alert.remediation_plan is None  # the policy acts on none
    health = engine.health()
    assert health is not None and (g := health.gpu(0)) is not None
    assert g.health.state.value == "unhealthy"  # an alert-mode rule counts towards health
    remediate = engine_for(tmp_path, _text("remediate"))
    run(remediate, node, 1)
    assert remediate.alerts()[0].remediation_plan == "reset"


def test_a_shadow_rule_fires_internally_only(tmp_path: Path) -> None:
    from fleetd.clock import FakeClock
    from tests.rules.test_rule_engine import T0

    node = Node(FakeClock(T0))
    engine = engine_for(tmp_path, _text("shadow"))
    node.temps[0] = 95.0
    assert run(engine, node, 2) == []  # nothing for the outbox or remediation
    assert engine.alerts() == [] and engine.health_alerts() == []
    health = engine.health()
    assert (
        health is not None
        and (g := health.gpu(0)) is not None
        and g.health.state.value == "healthy"
    )  # not counted
    (shadow,) = engine.shadow_alerts()
    assert shadow.state is F and shadow.remediation_plan is None
    taken = engine.take_shadow()
    assert [(t.previous, t.current) for t in taken] == [(AlertState.INACTIVE, F)]
    assert engine.take_shadow() == []  # taken once
    logged: list[tuple[str, dict[str, object]]] = []
    n = log_shadow_events(taken, engine.rules, lambda kind, **kw: logged.append((kind, kw)))
    assert n == 1 and logged[0][0] == "shadow_alert"
    data = logged[0][1]["data"]
    assert isinstance(data, dict)
    assert data["rule"] == "Hot" and data["state"] == "firing" and data["mode"] == "shadow"
    assert data["would"] == "notify and remediate (reset)"
    assert str(logged[0][1]["message"]).startswith("[shadow, would notify and remediate")
    node.temps[0] = 70.0
    assert run(engine, node, 1) == []
    assert [t.current for t in engine.take_shadow()] == [AlertState.RESOLVED]


def test_a_reload_into_or_out_of_shadow_starts_the_alerts_over(tmp_path: Path) -> None:
    from fleetd.clock import FakeClock
    from tests.rules.test_rule_engine import T0

    node = Node(FakeClock(T0))
    engine = engine_for(tmp_path, _text("alert"))
    node.temps[0] = 95.0
    assert run(engine, node, 1) == [("0", AlertState.INACTIVE, F)]
    # demoted to shadow: the receivers are told the alert resolved; it goes on in shadow
    path = tmp_path / "rules.yaml"
    path.write_text(_text("shadow"))
    engine.reload(load_rule_set([path]))
    assert run(engine, node, 1) == [("0", F, AlertState.RESOLVED)]
    assert [t.current for t in engine.take_shadow()] == [F]
    # promoted to alert again: its firing reaches the receivers as a new alert
    path.write_text(_text("alert"))
    engine.reload(load_rule_set([path]))
    assert run(engine, node, 1) == [("0", AlertState.INACTIVE, F)]
    assert engine.take_shadow() == []


def test_a_shadow_rule_is_not_exported_to_prometheus(tmp_path: Path) -> None:
    from fleetd.rules.export import export_prometheus

    path = tmp_path / "r.yaml"
    path.write_text(
        _text("shadow") + "  - name: Warm\n    expr: temp > 80\n    severity: warning\n"
    )
    exported = export_prometheus(load_rule_set([path]))
    assert exported.exported == ("Warm",)
    assert exported.skipped == (
        ("Hot", "mode shadow: it never notifies (a Prometheus alert would)"),
    )
