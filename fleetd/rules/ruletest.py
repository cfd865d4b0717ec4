"""``fleetd rules test``: unit tests for rules, written in YAML like ``promtool test rules``.

    rule_files: [../gpu.yaml]          # relative to this file
    evaluation_interval: 5s            # the engine runs every 5 s of test time
    tests:
      - name: hotspot close to its limit
        interval: 5s                   # one input value per 5 s
        input_series:
          - series: 'fleetd_gpu_temperature_celsius{gpu="0",uuid="G0",sensor="hotspot"}'
            values: '70x10 96x40'
        alert_rule_test:
          - eval_time: 3m
            alertname: GpuTemperatureNearThrottle
            exp_alerts:                # the FIRING alerts of that rule at that time
              - exp_labels: {gpu: "0", uuid: G0, sensor: hotspot, severity: warning}
                exp_annotations: {summary: "..."}   # only the keys given are compared
        health_test:
          - eval_time: 3m
            gpu: "0"                   # omit for the node verdict
            exp_state: degraded

The real engine runs over the real in-memory window (``fleetd.store.memory.MemoryWindow``),
so a test exercises exactly what the daemon will do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from fleetd.configbase import (
    Duration,
    Marks,
    Path_,
    StrictModel,
    dotted,
    format_duration,
    load_file,
    load_yaml,
    mark_for,
)
from fleetd.errors import ConfigError, Problem
from fleetd.model import AlertState, HealthState, Reading
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import RuleSet, load_rule_set
from fleetd.rules.series import SeriesError, parse_series, parse_values
from fleetd.rules.yamlpos import locate
from fleetd.store.memory import MemoryWindow

TEST_EPOCH = 1_767_225_600.0
"""Test time 0 (2026-01-01T00:00:00Z): a realistic Unix time, never 0."""


class AlertExpectation(StrictModel):
    exp_labels: dict[str, str] = Field(default_factory=dict)
    exp_annotations: dict[str, str] | None = None


class AlertRuleTest(StrictModel):
    eval_time: Duration
    alertname: str
    exp_alerts: list[AlertExpectation] = Field(default_factory=list)


class HealthTest(StrictModel):
    eval_time: Duration
    gpu: str | None = None
    exp_state: HealthState


class InputSeries(StrictModel):
    series: str
    values: str


class TestCase(StrictModel):
    name: str | None = None
    interval: Duration | None = None
    input_series: list[InputSeries] = Field(default_factory=list)
    alert_rule_test: list[AlertRuleTest] = Field(default_factory=list)
    health_test: list[HealthTest] = Field(default_factory=list)


class TestFile(StrictModel):
    rule_files: list[str] = Field(min_length=1)
    evaluation_interval: Duration = Field(default=5.0, gt=0)
    poll_interval: Duration | None = Field(default=None, gt=0)
    tests: list[TestCase] = Field(min_length=1)


@dataclass
class CaseResult:
    """The outcome of one test case: passed when ``failures`` is empty."""

    file: str
    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def run_test_file(path: str | Path) -> list[CaseResult]:
    """Run every case in one test file; a malformed file raises ``ConfigError``."""
    filename = str(path)
    spec = load_file(TestFile, path)
    text = Path(path).read_text(encoding="utf-8")
    _, marks = load_yaml(text, filename)
    base_dir = Path(path).parent
    rules = load_rule_set([base_dir / f for f in spec.rule_files])
    inputs = _inputs(spec, text, filename, marks)
    settings = EngineSettings(poll_interval_s=spec.poll_interval or spec.evaluation_interval)
    results = []
    for index, case in enumerate(spec.tests):
        name = case.name or f"tests[{index}]"
        results.append(
            CaseResult(
                filename,
                name,
                _run_case(case, inputs[index], rules, settings, spec.evaluation_interval),
            )
        )
    return results


def _inputs(spec: TestFile, text: str, filename: str, marks: Marks) -> list[list[Reading]]:
    problems: list[Problem] = []
    per_case: list[list[Reading]] = []
    for ci, case in enumerate(spec.tests):
        interval = case.interval or spec.evaluation_interval
        readings: list[Reading] = []
        for si, item in enumerate(case.input_series):
            base: Path_ = ("tests", ci, "input_series", si)
            try:
                metric, labels = parse_series(item.series)
            except SeriesError as exc:
                problems.append(_at(text, filename, marks, (*base, "series"), exc))
                continue
            try:
                values = parse_values(item.values)
            except SeriesError as exc:
                problems.append(_at(text, filename, marks, (*base, "values"), exc))
                continue
            for i, value in enumerate(values):
                if value is not None:
                    readings.append(Reading(metric, labels, value, TEST_EPOCH + i * interval))
        readings.sort(key=lambda r: r.ts)
        per_case.append(readings)
    if problems:
        raise ConfigError(problems)
    return per_case


def _at(text: str, filename: str, marks: Marks, path: Path_, exc: SeriesError) -> Problem:
    where = locate(text, path, exc.offset) or mark_for(marks, path)
    return Problem(filename, where[0], where[1], dotted(path), exc.message)


def _run_case(
    case: TestCase, readings: list[Reading], rules: RuleSet, settings: EngineSettings, step: float
) -> list[str]:
    window = MemoryWindow(retention=10 * 365 * 86400.0)
    window.append(readings)
    engine = RuleEngine(rules, settings)
    failures: list[str] = []
    for check in case.alert_rule_test:
        if rules.get(check.alertname) is None:
            failures.append(f"alertname {check.alertname!r}: no such rule in the rule files")
    checks_at = sorted(
        {c.eval_time for c in case.alert_rule_test} | {h.eval_time for h in case.health_test}
    )
    if not checks_at:
        return failures
    times = _schedule(step, checks_at)
    for t in times:
        engine.evaluate(window, TEST_EPOCH + t)
        for check in case.alert_rule_test:
            if check.eval_time == t and rules.get(check.alertname) is not None:
                failures.extend(_check_alerts(engine, check))
        for hcheck in case.health_test:
            if hcheck.eval_time == t:
                failures.extend(_check_health(engine, hcheck))
    return failures


def _schedule(step: float, checks_at: list[float]) -> list[float]:
    """Every evaluation instant up to the last check, plus the check instants themselves."""
    last = checks_at[-1]
    count = int(last // step)
    times = {round(i * step, 9) for i in range(count + 1)}
    times.update(checks_at)
    return sorted(times)


def _check_alerts(engine: RuleEngine, check: AlertRuleTest) -> list[str]:
    firing = [  # a shadow rule's too: its tests say what it would send
        a
        for a in engine.alerts(shadow=True)
        if a.key.rule == check.alertname and a.state == AlertState.FIRING
    ]
    got = [({k: v for k, v in a.labels if k != "alertname"}, dict(a.annotations)) for a in firing]
    unmatched = list(got)
    missing: list[AlertExpectation] = []
    for expected in check.exp_alerts:
        for i, (labels, texts) in enumerate(unmatched):
            if labels == expected.exp_labels and (
                expected.exp_annotations is None
                or all(texts.get(k) == v for k, v in expected.exp_annotations.items())
            ):
                del unmatched[i]
                break
        else:
            missing.append(expected)
    if not missing and not unmatched:
        return []
    exp_text = [
        {
            "labels": e.exp_labels,
            **({"annotations": e.exp_annotations} if e.exp_annotations else {}),
        }
        for e in check.exp_alerts
    ]
    got_text = [{"labels": labels, "annotations": annotations} for labels, annotations in got]
    return [
        f"alertname: {check.alertname}, time: {format_duration(check.eval_time)}\n"
        f"    exp: {exp_text}\n    got: {got_text}"
    ]


def _check_health(engine: RuleEngine, check: HealthTest) -> list[str]:
    report = engine.health()
    if report is None:
        return [f"health at {format_duration(check.eval_time)}: no evaluation yet"]
    if check.gpu is None:
        verdict = report.node
        what = "node"
    else:
        gpu = report.gpu(check.gpu)
        if gpu is None:
            return [
                f"health of gpu {check.gpu} at {format_duration(check.eval_time)}: GPU not known"
            ]
        verdict = gpu.health
        what = f"gpu {check.gpu}"
    if verdict.state == check.exp_state:
        return []
    return [
        f"health of {what} at {format_duration(check.eval_time)}: exp {check.exp_state.value}, "
        f"got {verdict.state.value} ({'; '.join(verdict.reasons) or 'no reasons'})"
    ]
