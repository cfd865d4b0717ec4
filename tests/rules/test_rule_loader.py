"""Rule files: every kind of mistake is reported as file:line:col with a clear message, all at
once; local rules override and disable shipped ones by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.errors import ConfigError
from fleetd.model import Severity
from fleetd.rules.loader import load_rule_file, load_rule_set

GOOD_RULE = """\
  - name: Hot
    expr: temp > 90
    severity: warning
"""


def problems_of(tmp_path: Path, text: str, name: str = "r.yaml") -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rule_file(path)
    return [str(p).replace(str(tmp_path) + "/", "") for p in info.value.problems]


BAD_FILES = [
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: warning\n    colour: red\n",
        ["r.yaml:5:5: rules[0].colour: unknown key"],
        id="unknown-key",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    severity: warning\n",
        ["r.yaml:2:5: rules[0].expr: required key is missing"],
        id="missing-expr",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: urgent\n",
        ["r.yaml:4:5: rules[0].severity: Input should be 'critical', 'warning' or 'info'"],
        id="bad-severity",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: info\n    for: 5 minutes\n",
        [
            "r.yaml:5:5: rules[0].for: invalid duration '5 minutes': use seconds or text like "
            "'30s', '5m', '1h30m'"
        ],
        id="bad-duration",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp >> 90\n    severity: info\n",
        ["r.yaml:3:17: rules[0].expr: unexpected '>'"],
        id="expr-plain-scalar",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: 'rate(temp) > 90'\n    severity: info\n",
        ["r.yaml:3:12: rules[0].expr: rate() needs a range selector such as metric[5m]"],
        id="expr-quoted-scalar",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: >-\n      limit\n        - ignoring(limit) tmp{a=b}\n"
        "    severity: info\n",
        ["r.yaml:5:33: rules[0].expr: expected a quoted value, found 'b'"],
        id="expr-folded-block",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: |\n      temp\n      > on(gpu gpu_max\n"
        "    severity: info\n",
        ["r.yaml:5:16: rules[0].expr: expected ',' or ')', found 'gpu_max'"],
        id="expr-literal-block",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 90\n    severity: info\n"
        "    annotations:\n      summary: 'GPU {{ $labels.gpu }} {{ .Value }}'\n",
        ["r.yaml:6:42: rules[0].annotations.summary: unsupported template syntax"],
        id="template",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp\n    op: '>'\n    threshold: 90\n    clear: 95\n"
        "    severity: info\n",
        ["r.yaml:2:5: rules[0]: clear (95) must be at or below the threshold (90) for hysteresis"],
        id="clear-wrong-side",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 90\n    clear: 80\n    severity: info\n",
        ["r.yaml:2:5: rules[0]: clear needs op and threshold"],
        id="clear-without-threshold",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp\n    op: '>'\n    severity: info\n",
        ["r.yaml:2:5: rules[0]: give op and threshold together (or neither, for a condition expr)"],
        id="op-without-threshold",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp\n    op: '>'\n"
        "    threshold: {MI300X: 90, MI999: 1, default: 80}\n"
        "    severity: info\n",
        [
            "r.yaml:5:5: rules[0].threshold: unknown product 'MI999': use MI300X, MI325X, MI350X, "
            "MI355X or default"
        ],
        id="unknown-product",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp\n    op: '>'\n    threshold: {MI300X: 90}\n"
        "    severity: info\n",
        [
            "r.yaml:5:5: rules[0].threshold: a per-product threshold needs a 'default' for other "
            "GPUs"
        ],
        id="product-without-default",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 1\n    severity: info\n  - name: Hot\n"
        "    expr: temp > 2\n"
        "    severity: info\n",
        ["r.yaml:5:5: rules[1].name: rule 'Hot' is already defined in rules[0]"],
        id="duplicate-name",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 1\n    severity: info\n"
        "    labels: {severity: page}\n",
        ["r.yaml:5:5: rules[0].labels: label 'severity' is set by fleetd and cannot be given here"],
        id="reserved-label",
    ),
    pytest.param(
        "rules:\n  - name: 3Hot\n    expr: temp > 1\n    severity: info\n",
        ["r.yaml:2:5: rules[0].name: String should match pattern '^[A-Za-z_][A-Za-z0-9_]*$'"],
        id="bad-name",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: 1 + 1\n    severity: info\n",
        [
            "r.yaml:3:11: rules[0].expr: an alert expression must produce series, not a single "
            "number"
        ],
        id="scalar-expr",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 1\n    severity: info\n"
        "    remediation: {plan: Reset!}\n",
        [
            "r.yaml:5:19: rules[0].remediation.plan: String should match pattern "
            "'^[a-z][a-z0-9_-]*$'"
        ],
        id="bad-plan",
    ),
    pytest.param(
        "rules:\n  - name: Hot\n    expr: temp > 1\n   severity: info\n",
        ["r.yaml:4:4: invalid YAML: expected <block end>, but found '<block mapping start>'"],
        id="invalid-yaml",
    ),
    pytest.param(
        "- name: Hot\n",
        ["r.yaml:1:1: Input should be a valid dictionary or instance of RuleFileModel"],
        id="not-a-mapping",
    ),
    pytest.param(
        "rules:\n  - just text\n",
        ["r.yaml:2:5: rules[0]: Input should be a valid dictionary or instance of RuleModel"],
        id="rule-not-a-mapping",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_each_error_names_file_line_and_column(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    assert problems_of(tmp_path, text) == expected


def test_every_problem_in_a_file_is_reported_at_once(tmp_path: Path) -> None:
    text = (
        "rules:\n"
        "  - name: A\n    expr: x >\n    severity: info\n"
        "  - name: B\n    expr: y > 1\n    severity: never\n"
        "  - name: C\n    expr: z > 1\n    severity: info\n"
        "    annotations: {summary: '{{ nope }}'}\n" + GOOD_RULE
    )
    found = problems_of(tmp_path, text)
    assert [p.split(": ")[0] for p in found] == ["r.yaml:3:14", "r.yaml:7:5", "r.yaml:11:32"]


def test_a_good_file_compiles_every_field(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(
        "rules:\n"
        "  - name: HbmHot\n"
        "    rationale: HBM errors climb when hot.\n"
        '    expr: temp{sensor="hbm"}\n'
        "    op: '>='\n"
        "    threshold: {MI300X: 90, default: 95}\n"
        "    clear: {MI300X: 85, default: 90}\n"
        "    for: 1m30s\n"
        "    keep_firing_for: 10m\n"
        "    severity: critical\n"
        "    labels: {team: gpu}\n"
        "    annotations: {summary: 'GPU {{ $labels.gpu }} at {{ $value }}'}\n"
        "    runbook: docs/runbooks/HbmHot.md\n"
        "    remediation: {plan: reset}\n"
        "    health: false\n"
    )
    rule = load_rule_file(path, runbook_base_url="https://wiki.example/").rules[0]
    assert rule.name == "HbmHot" and rule.severity == Severity.CRITICAL
    assert rule.op == ">=" and rule.threshold is not None and rule.clear is not None
    assert rule.threshold.for_model("MI300X") == 90 and rule.threshold.for_model("MI355X") == 95
    assert rule.clear.for_model(None) == 90
    assert rule.for_s == 90 and rule.keep_firing_for_s == 600
    assert rule.labels == (("team", "gpu"),)
    assert rule.remediation_plan == "reset" and rule.health is False
    annotations = {name: tpl.render(91.0, {"gpu": "2"}) for name, tpl in rule.annotations}
    assert annotations == {
        "summary": "GPU 2 at 91",
        "runbook_url": "https://wiki.example/docs/runbooks/HbmHot.md",
    }
    assert rule.source == f"{path}:2"


class TestRuleSets:
    def write(self, directory: Path, name: str, text: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / name
        path.write_text(text)
        return path

    def test_local_rules_override_by_name_and_can_disable(self, tmp_path: Path) -> None:
        shipped = tmp_path / "shipped"
        self.write(
            shipped,
            "a.yaml",
            "rules:\n" + GOOD_RULE + "  - name: Cold\n    expr: temp < 10\n    severity: info\n",
        )
        self.write(
            shipped, "b.yaml", "rules:\n  - name: Loud\n    expr: fan > 9000\n    severity: info\n"
        )
        local = tmp_path / "local"
        self.write(
            local,
            "site.yaml",
            "rules:\n  - name: Hot\n    expr: temp > 80\n    severity: critical\ndisable: [Loud]\n",
        )
        rules = load_rule_set([shipped], [local])
        assert [r.name for r in rules.rules] == ["Hot", "Cold"]
        hot = rules.get("Hot")
        assert hot is not None and hot.severity == Severity.CRITICAL and "local" in hot.source
        assert rules.disabled == ("Loud",)

    def test_duplicate_names_across_shipped_files_are_errors(self, tmp_path: Path) -> None:
        shipped = tmp_path / "shipped"
        self.write(shipped, "a.yaml", "rules:\n" + GOOD_RULE)
        self.write(shipped, "b.yaml", "rules:\n" + GOOD_RULE)
        with pytest.raises(ConfigError) as info:
            load_rule_set([shipped])
        (problem,) = info.value.problems
        assert str(problem).startswith(
            f"{shipped / 'b.yaml'}:2: name: rule 'Hot' is already defined at {shipped / 'a.yaml'}:2"
        )

    def test_disabling_an_unknown_rule_is_an_error(self, tmp_path: Path) -> None:
        local = self.write(tmp_path, "site.yaml", "disable:\n  - Hot\n  - Hott\n")
        shipped = self.write(tmp_path / "s", "a.yaml", "rules:\n" + GOOD_RULE)
        with pytest.raises(ConfigError) as info:
            load_rule_set([shipped], [local])
        assert [str(p) for p in info.value.problems] == [
            f"{local}:3:5: disable[1]: no rule named 'Hott' to disable; did you mean 'Hot'?"
        ]

    def test_problems_in_several_files_are_all_reported(self, tmp_path: Path) -> None:
        a = self.write(tmp_path, "a.yaml", "rules:\n  - name: A\n    expr: (\n    severity: info\n")
        b = self.write(tmp_path, "b.yaml", "rules: 7\n")
        with pytest.raises(ConfigError) as info:
            load_rule_set([a, b])
        where = [str(p).split(": ")[0] for p in info.value.problems]
        assert where == [f"{a}:3:12", f"{b}:1:1"]

    def test_an_unreadable_file_is_a_problem_not_a_crash(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="cannot read"):
            load_rule_set([tmp_path / "missing.yaml"])

    def test_identical_sub_expressions_are_shared_across_rules(self, tmp_path: Path) -> None:
        path = self.write(
            tmp_path,
            "r.yaml",
            "rules:\n"
            "  - name: A\n    expr: increase(errors[10m]) > 0\n    severity: info\n"
            "  - name: B\n    expr: increase(errors[10m]) > 5\n    severity: info\n",
        )
        a, b = load_rule_set([path]).rules
        assert a.expr.lhs is b.expr.lhs  # type: ignore[union-attr]


class TestUnwrittenMetrics:
    """A selector on a metric fleetd never writes: a warning, not a problem (the rule loads,
    and can never fire), kept with where it is written and the closest name fleetd writes."""

    def test_each_selector_is_a_warning_with_its_position_rule_and_suggestion(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "site.yaml"
        path.write_text(
            "rules:\n"
            "  - name: HbmHot\n"
            "    expr: max(fleetd_gpu_temprature_celsius{sensor='hbm'}) > 95"
            " unless fleetd_gpu_temprature_celsius{sensor='hbm'} < 0\n"
            "    severity: warning\n"
        )
        rules = load_rule_set([], [path])
        assert [r.name for r in rules.rules] == ["HbmHot"]  # loaded all the same
        assert [(u.rule, u.metric, u.suggestion) for u in rules.unknown] == [
            ("HbmHot", "fleetd_gpu_temprature_celsius", "fleetd_gpu_temperature_celsius")
        ] * 2
        assert [(w.line, w.col, w.key) for w in rules.warnings] == [
            (3, 15, "rules[0].expr"),
            (3, 72, "rules[0].expr"),
        ]
        assert rules.unknown[0].describe() == (
            "HbmHot can never fire: fleetd never writes fleetd_gpu_temprature_celsius "
            "(did you mean fleetd_gpu_temperature_celsius?)"
        )

    def test_a_metric_only_metrics_shows_is_warned_of_as_such(self, tmp_path: Path) -> None:
        """fleetd exports alert delivery, remediation, KPI, build and poll-timing series on
        /metrics only (computed at a scrape): a rule on one loads and can never fire."""
        path = tmp_path / "site.yaml"
        path.write_text(
            "rules:\n"
            "  - name: OutboxBacklog\n    expr: fleetd_alert_outbox_pending > 100\n"
            "    severity: warning\n"
            "  - name: Paused\n    expr: fleetd_remediation_paused == 1\n    severity: info\n"
            "  - name: Unhealthy\n    expr: fleetd_node_health == 1\n    severity: info\n"
        )
        rules = load_rule_set([], [path])
        assert [u.metric for u in rules.unknown] == [
            "fleetd_alert_outbox_pending",
            "fleetd_remediation_paused",
        ]  # fleetd_node_health is the rules' own, in the window
        assert all("only /metrics shows" in w.message for w in rules.warnings), rules.warnings

    def test_only_the_rules_that_run_are_warned_of(self, tmp_path: Path) -> None:
        """A shipped-pack rule on an unwritten name that a local rule replaces is not."""
        shipped = tmp_path / "s" / "a.yaml"
        shipped.parent.mkdir()
        shipped.write_text("rules:\n" + GOOD_RULE)  # temp: not a name fleetd writes
        local = tmp_path / "site.yaml"
        local.write_text(
            "rules:\n  - name: Hot\n    expr: fleetd_gpu_up == 0\n    severity: info\n"
        )
        assert load_rule_set([shipped]).unknown[0].rule == "Hot"
        assert load_rule_set([shipped], [local]).unknown == ()
        assert load_rule_set([shipped], known_metrics=None).unknown == ()  # not checked

    def test_a_rule_that_does_not_compile_can_still_be_disabled_elsewhere(
        self, tmp_path: Path
    ) -> None:
        """Its own problem is reported, not a false "no rule named" for the disable."""
        broken = tmp_path / "s" / "a.yaml"
        broken.parent.mkdir()
        broken.write_text("rules:\n  - name: Hot\n    expr: temp >\n    severity: warning\n")
        local = tmp_path / "site.yaml"
        local.write_text("disable: [Hot]\n")
        with pytest.raises(ConfigError) as info:
            load_rule_set([broken], [local])
        assert [p.key for p in info.value.problems] == ["rules[0].expr"]
