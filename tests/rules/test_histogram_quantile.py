"""``histogram_quantile`` with Prometheus' semantics: the maths by hand, the language, and
Prometheus itself (promtool) firing the same alert with the same value on the export."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetd.model import make_labels
from fleetd.rules.export import export_prometheus
from fleetd.rules.loader import load_rule_set
from fleetd.rules.parser import ExprError, parse
from fleetd.rules.quantile import bucket_quantile, histogram_quantile
from fleetd.rules.render import render
from fleetd.rules.ruletest import run_test_file

INF = math.inf
B = [(0.1, 10.0), (0.5, 50.0), (1.0, 90.0), (INF, 100.0)]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.05, 0.05),  # lowest bucket interpolates from 0
        (0.3, 0.3),  # 0.1 + 0.4 * (20/40)
        (0.7, 0.75),
        (0.9, 1.0),  # exactly on a bound
        (0.95, 1.0),  # in +Inf: the highest finite bound
        (1.0, 1.0),
        (-0.1, -INF),
        (1.1, INF),
    ],
)
def test_quantiles_as_prometheus_computes_them(q: float, expected: float) -> None:
    assert bucket_quantile(q, B) == pytest.approx(expected)


def test_nan_cases() -> None:
    assert math.isnan(bucket_quantile(math.nan, B))
    assert math.isnan(bucket_quantile(0.5, [(0.1, 1.0), (1.0, 2.0)]))  # no +Inf bucket
    assert math.isnan(bucket_quantile(0.5, [(INF, 4.0)]))  # fewer than two buckets
    assert math.isnan(bucket_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]))  # no observations


def test_non_monotonic_counts_are_carried_forward_and_a_bound_below_zero_is_the_answer() -> None:
    # rates of buckets scraped a moment apart: 50 then 48 is read as 50
    assert bucket_quantile(0.7, [(0.1, 10.0), (0.5, 50.0), (1.0, 48.0), (INF, 100.0)]) == 1.0
    assert bucket_quantile(0.1, [(-1.0, 5.0), (0.0, 5.0), (INF, 10.0)]) == -1.0


def test_series_group_by_labels_without_le_and_series_without_le_are_ignored() -> None:
    vector = {
        make_labels({"worker": "w0", "le": le}): count
        for le, count in (("0.1", 10.0), ("0.5", 50.0), ("1.0", 90.0), ("+Inf", 100.0))
    }
    vector |= {make_labels({"worker": "w1", "le": "1"}): 5.0}
    vector |= {make_labels({"worker": "w1", "le": "+Inf"}): 5.0}
    vector |= {make_labels({"worker": "w2"}): 7.0}  # no le: ignored
    vector |= {make_labels({"worker": "w3", "le": "x"}): 7.0}  # unparsable le: ignored
    out = histogram_quantile(0.7, vector)
    assert set(out) == {make_labels({"worker": "w0"}), make_labels({"worker": "w1"})}
    assert out[make_labels({"worker": "w0"})] == pytest.approx(0.75)
    assert out[make_labels({"worker": "w1"})] == pytest.approx(0.7)  # all at or below 1


def test_the_language_checks_its_arguments_and_renders_it() -> None:
    text = "histogram_quantile(0.99, sum by (worker, le) (rate(x_bucket[5m])))"
    assert render(parse(text)) == text
    with pytest.raises(ExprError, match="quantile"):
        parse("histogram_quantile(x, y)")
    with pytest.raises(ExprError, match="takes 2 arguments"):
        parse("histogram_quantile(0.5)")


RULES = """\
rules:
  - name: SlowFirstToken
    expr: >-
      histogram_quantile(0.7,
        sum by (worker, model, le) (rate(fleetd_vllm_time_to_first_token_seconds_bucket[1m])))
      > 0.6
    for: 30s
    severity: warning
    health: false
    annotations:
      summary: "worker {{ $labels.worker }} p70 TTFT {{ $value }} s"
"""

TEST = """\
rule_files: [rules.yaml]
evaluation_interval: 15s
tests:
  - name: a slow worker's quantile, interpolated
    interval: 15s
    input_series:
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w0",model="m",le="0.1"}'
        values: '0+10x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w0",model="m",le="0.5"}'
        values: '0+50x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w0",model="m",le="1.0"}'
        values: '0+90x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w0",model="m",le="+Inf"}'
        values: '0+100x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w1",model="m",le="0.1"}'
        values: '0+90x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w1",model="m",le="0.5"}'
        values: '0+99x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w1",model="m",le="1.0"}'
        values: '0+100x20'
      - series: 'fleetd_vllm_time_to_first_token_seconds_bucket{worker="w1",model="m",le="+Inf"}'
        values: '0+100x20'
    alert_rule_test:
      - eval_time: 10s
        alertname: SlowFirstToken
      - eval_time: 2m
        alertname: SlowFirstToken
        exp_alerts:
          - exp_labels: {worker: w0, model: m, severity: warning}
            exp_annotations: {summary: "worker w0 p70 TTFT 0.75 s"}
"""


def test_fleetd_fires_on_the_quantile(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "test.yaml").write_text(TEST)
    results = run_test_file(tmp_path / "test.yaml")
    assert [r.failures for r in results] == [[]]


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
def test_prometheus_fires_the_same_alert_with_the_same_value_on_the_export(
    tmp_path: Path,
) -> None:
    from tests.rules.test_rule_export import _to_promtool

    assert PROMTOOL is not None
    (tmp_path / "rules.yaml").write_text(RULES)
    exported = export_prometheus(load_rule_set([tmp_path / "rules.yaml"]))
    assert "histogram_quantile(0.7, sum by (worker, model, le, instance)" in exported.text
    (tmp_path / "prometheus.rules.yaml").write_text(exported.text)
    converted = _to_promtool(yaml.safe_load(TEST), "prometheus.rules.yaml")
    (tmp_path / "promtool_test.yaml").write_text(yaml.safe_dump(converted))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp_path / "promtool_test.yaml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
