"""Health rules: YAML rule files → expressions over the Query → alert state → GPU health.

    spec.py, loader.py   rule files (strict YAML, file:line:col errors) → RuleSet
    lexer.py, parser.py  expression text → ast.py nodes (a PromQL subset; never eval)
    evaluate.py          nodes → values over a Query at one instant (per-tick cache)
    ranges.py            range functions kept incrementally across ticks
    state.py             the pure alert state machine and the restart rules
    engine.py            RuleEngine: evaluate(query, now) -> transitions; reload; restore
    health.py            GPU and node health from alerts and data freshness
    metrics.py           rule and health metrics as readings for /metrics
    templates.py         annotation templates (a safe subset of Prometheus')
    ruletest.py          `fleetd rules test`: YAML unit tests for rules
    export.py            `fleetd rules export`: Prometheus alerting rules
    config.py            the `rules:` section of fleetd.yaml

See docs/rules.md.
"""

from fleetd.rules.config import RulesConfig, engine_settings, load_rules, shipped_rules_dir
from fleetd.rules.engine import EngineSettings, ReloadStatus, RuleEngine, RuleStatus
from fleetd.rules.health import GpuHealth, NodeHealth
from fleetd.rules.loader import RuleSet, load_rule_file, load_rule_set
from fleetd.rules.metrics import rule_readings
from fleetd.rules.state import AlertEntry, StateChanges

__all__ = [
    "AlertEntry",
    "EngineSettings",
    "GpuHealth",
    "NodeHealth",
    "ReloadStatus",
    "RuleEngine",
    "RuleSet",
    "RuleStatus",
    "RulesConfig",
    "StateChanges",
    "engine_settings",
    "load_rule_file",
    "load_rule_set",
    "load_rules",
    "rule_readings",
    "shipped_rules_dir",
]
