"""The Prometheus export: promtool accepts it, and Prometheus fires the same alerts as fleetd.

The second part runs one unit test twice: through fleetd's engine (``run_test_file``) and,
converted, through ``promtool test rules`` against the exported rules. Both must pass, so the
export (per-product thresholds, hysteresis through ALERTS, joins) means what fleetd means.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.export import export_prometheus, prometheus_expr
from fleetd.rules.loader import load_rule_set
from fleetd.rules.ruletest import run_test_file

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_promtool_accepts_the_exported_shipped_packs(tmp_path: Path) -> None:
    result = export_prometheus(load_rule_set([shipped_rules_dir()]))
    out = tmp_path / "fleetd.rules.yaml"
    out.write_text(result.text)
    checked = promtool("check", "rules", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(result.exported)} rules found" in checked.stdout
    assert [name for name, _ in result.skipped] == ["GpuTelemetryStale"]
    assert "# not exported: GpuTelemetryStale: stale() is fleetd-only" in result.text


def test_joins_and_groupings_also_match_on_instance(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(
        "rules:\n"
        "  - name: A\n    expr: count by (gpu) (x == 0) > 1 and on(gpu) y\n    severity: info\n"
        "  - name: B\n    expr: a - ignoring(limit) b\n    op: '<'\n    threshold: 5\n"
        "    severity: info\n"
    )
    a, b = load_rule_set([path]).rules
    assert prometheus_expr(a) == "count by (gpu, instance) (x == 0) > 1 and on(gpu, instance) y"
    assert prometheus_expr(b) == "(a - ignoring(limit) b) < 5"


RULES = """\
rules:
  - name: Hot
    expr: fleetd_gpu_temperature_celsius{sensor="hotspot"}
    op: ">"
    threshold: {MI300X: 90, MI325X: 90, default: 95}
    clear: {MI300X: 85, MI325X: 85, default: 90}
    for: 20s
    severity: critical
    labels: {team: gpu}
    annotations:
      summary: "GPU {{ $labels.gpu }} hotspot at {{ $value }} °C"
  - name: NarrowLink
    expr: fleetd_gpu_pcie_link_width_lanes < fleetd_gpu_pcie_link_max_width_lanes
    for: 10s
    severity: warning
    annotations:
      summary: "GPU {{ $labels.gpu }} link at x{{ $value }}"
  - name: LinksDown
    expr: count by (gpu) (fleetd_gpu_xgmi_link_up == 0) >= 2
    keep_firing_for: 15s
    severity: critical
"""

TEST = """\
rule_files: [rules.yaml]
evaluation_interval: 5s
tests:
  - name: thresholds per product, hysteresis, joins and keep_firing_for
    interval: 5s
    input_series:
      - series: 'fleetd_gpu_info{gpu="0",uuid="U0",model="MI300X"}'
        values: '1x40'
      - series: 'fleetd_gpu_info{gpu="1",uuid="U1",model="MI355X"}'
        values: '1x40'
      - series: 'fleetd_gpu_temperature_celsius{gpu="0",uuid="U0",sensor="hotspot"}'
        values: '80x3 92x10 87x6 84x20'
      - series: 'fleetd_gpu_temperature_celsius{gpu="1",uuid="U1",sensor="hotspot"}'
        values: '92x40'
      - series: 'fleetd_gpu_pcie_link_width_lanes{gpu="1",uuid="U1"}'
        values: '16x5 8x35'
      - series: 'fleetd_gpu_pcie_link_max_width_lanes{gpu="1",uuid="U1"}'
        values: '16x40'
      - series: 'fleetd_gpu_xgmi_link_up{gpu="2",uuid="U2",link="0"}'
        values: '1x5 0x10 1x25'
      - series: 'fleetd_gpu_xgmi_link_up{gpu="2",uuid="U2",link="1"}'
        values: '1x5 0x10 1x25'
      - series: 'fleetd_gpu_xgmi_link_up{gpu="2",uuid="U2",link="2"}'
        values: '1x40'
    alert_rule_test:
      - eval_time: 30s
        alertname: Hot
      - eval_time: 40s
        alertname: Hot
        exp_alerts:
          - exp_labels: {gpu: "0", uuid: U0, sensor: hotspot, severity: critical, team: gpu}
            exp_annotations: {summary: "GPU 0 hotspot at 92 °C"}
      - eval_time: 80s
        alertname: Hot
        exp_alerts:
          - exp_labels: {gpu: "0", uuid: U0, sensor: hotspot, severity: critical, team: gpu}
            exp_annotations: {summary: "GPU 0 hotspot at 87 °C"}
      - eval_time: 105s
        alertname: Hot
        exp_alerts:
          - exp_labels: {gpu: "0", uuid: U0, sensor: hotspot, severity: critical, team: gpu}
            exp_annotations: {summary: "GPU 0 hotspot at 87 °C"}
      - eval_time: 110s
        alertname: Hot
      - eval_time: 35s
        alertname: NarrowLink
      - eval_time: 40s
        alertname: NarrowLink
        exp_alerts:
          - exp_labels: {gpu: "1", uuid: U1, severity: warning}
            exp_annotations: {summary: "GPU 1 link at x8"}
      - eval_time: 30s
        alertname: LinksDown
        exp_alerts:
          - exp_labels: {gpu: "2", severity: critical}
      - eval_time: 85s
        alertname: LinksDown
        exp_alerts:
          - exp_labels: {gpu: "2", severity: critical}
      - eval_time: 95s
        alertname: LinksDown
        exp_alerts:
          - exp_labels: {gpu: "2", severity: critical}
      - eval_time: 100s
        alertname: LinksDown
"""


def _to_promtool(test: dict[str, Any], rule_file: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rule_files": [rule_file],
        "evaluation_interval": test["evaluation_interval"],
        "tests": [],
    }
    for case in test["tests"]:
        out["tests"].append(
            {
                "interval": case["interval"],
                "input_series": case["input_series"],
                "alert_rule_test": [
                    {
                        "eval_time": check["eval_time"],
                        "alertname": check["alertname"],
                        "exp_alerts": [
                            {
                                "exp_labels": a["exp_labels"],
                                "exp_annotations": a.get("exp_annotations", {}),
                            }
                            for a in check.get("exp_alerts", [])
                        ],
                    }
                    for check in case["alert_rule_test"]
                ],
            }
        )
    return out


@needs_promtool
def test_prometheus_fires_the_same_alerts_as_fleetd(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    (tmp_path / "test.yaml").write_text(TEST)
    fleetd_results = run_test_file(tmp_path / "test.yaml")
    assert [r.failures for r in fleetd_results] == [[]]

    exported = export_prometheus(load_rule_set([tmp_path / "rules.yaml"]))
    (tmp_path / "prometheus.rules.yaml").write_text(exported.text)
    converted = _to_promtool(yaml.safe_load(TEST), "prometheus.rules.yaml")
    (tmp_path / "promtool_test.yaml").write_text(yaml.safe_dump(converted, allow_unicode=True))
    result = promtool("test", "rules", str(tmp_path / "promtool_test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_the_comparison_is_not_vacuous(tmp_path: Path) -> None:
    """A wrong expectation fails under promtool too, so the test above can fail."""
    (tmp_path / "rules.yaml").write_text(RULES)
    broken = TEST.replace("GPU 0 hotspot at 87 °C", "GPU 0 hotspot at 86 °C")
    exported = export_prometheus(load_rule_set([tmp_path / "rules.yaml"]))
    (tmp_path / "prometheus.rules.yaml").write_text(exported.text)
    converted = _to_promtool(yaml.safe_load(broken), "prometheus.rules.yaml")
    (tmp_path / "promtool_test.yaml").write_text(yaml.safe_dump(converted, allow_unicode=True))
    assert promtool("test", "rules", str(tmp_path / "promtool_test.yaml")).returncode != 0
