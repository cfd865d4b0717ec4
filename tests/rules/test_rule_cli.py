"""``fleetd rules check|test|export`` as a user runs them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from fleetd.cli.fleetd_main import main

REPO = Path(__file__).resolve().parents[2]


def shipped_counts() -> tuple[int, int]:
    """Rules in the shipped packs and test cases in rules/tests, read as plain YAML: what the
    CLI must report, counted without the code under test."""
    rules = sum(
        len(yaml.safe_load(p.read_text())["rules"]) for p in (REPO / "rules").glob("*.yaml")
    )
    cases = sum(
        len(yaml.safe_load(p.read_text())["tests"])
        for p in (REPO / "rules" / "tests").glob("*.yaml")
    )
    return rules, cases


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


class TestCheck:
    def test_the_shipped_packs_are_ok(self) -> None:
        code, out, err = invoke("rules", "check", str(REPO / "rules"))
        assert (code, err) == (0, "")  # no problem, no warning: every metric read is written
        rules, _ = shipped_counts()
        assert rules >= 27
        assert out.startswith(f"OK: 4 file(s), {rules} rule(s)")

    def test_every_problem_is_printed_as_file_line_col_and_exit_is_1(self, tmp_path: Path) -> None:
        bad = tmp_path / "site.yaml"
        bad.write_text(
            "rules:\n"
            "  - name: GpuMissing\n    expr: fleetd_gpu_up == \n    severity: critical\n"
            "  - name: Mine\n    expr: x > 1\n    severity: loud\n"
            "disable: [NoSuchRule]\n"
        )
        code, _, err = invoke("rules", "check", str(bad))
        assert code == 1
        assert err.splitlines() == [
            f"{bad}:3:27: rules[0].expr: unexpected end of expression",
            f"{bad}:7:5: rules[1].severity: Input should be 'critical', 'warning' or 'info'",
            f"{bad}:8:11: disable[0]: no rule named 'NoSuchRule' to disable",
            "3 problem(s), 0 warning(s) found",
        ]

    def test_a_duplicate_name_does_not_hide_a_misspelled_disable_in_the_same_file(
        self, tmp_path: Path
    ) -> None:
        bad = tmp_path / "site.yaml"
        bad.write_text(
            "rules:\n"
            "  - name: Mine\n    expr: fleetd_gpu_up == 0\n    severity: info\n"
            "  - name: Mine\n    expr: fleetd_gpu_up == 0\n    severity: info\n"
            "disable: [GpuPowerThrotling]\n"
        )
        code, out, err = invoke("rules", "check", str(bad))
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            f"{bad}:5:5: rules[1].name: rule 'Mine' is already defined in rules[0]",
            f"{bad}:8:11: disable[0]: no rule named 'GpuPowerThrotling' to disable; "
            "did you mean 'GpuPowerThrottling'?",
            "2 problem(s), 0 warning(s) found",
        ]

    def test_a_selector_on_a_metric_fleetd_never_writes_is_a_warning_and_exit_is_1(
        self, tmp_path: Path
    ) -> None:
        """The rule loads but can never fire: each such selector, where it is written, the
        rule, and the closest name fleetd writes when one is close."""
        site = tmp_path / "site.yaml"
        site.write_text(
            "rules:\n"
            "  - name: HotspotTooHot\n"
            '    expr: fleetd_gpu_temprature_celsius{sensor="hotspot"} > 90\n'
            "    severity: warning\n"
            "  - name: Fine\n    expr: fleetd_gpu_up == 0\n    severity: info\n"
            "  - name: Foreign\n"
            "    expr: >-\n"
            "      fleetd_gpu_up == 0\n"
            "      and on() node_load1 > 4\n"
            "    severity: info\n"
        )
        code, out, err = invoke("rules", "check", str(site))
        assert (code, out) == (1, "")
        assert err.splitlines() == [
            f"{site}:3:11: rules[0].expr: warning: rule 'HotspotTooHot' reads "
            "'fleetd_gpu_temprature_celsius', a metric fleetd never writes: the rule can never "
            "fire; did you mean 'fleetd_gpu_temperature_celsius'?",
            f"{site}:11:16: rules[2].expr: warning: rule 'Foreign' reads 'node_load1', a "
            "metric fleetd never writes: the rule can never fire",
            "0 problem(s), 2 warning(s) found",
        ]

    def test_a_histogram_is_read_as_its_three_series_not_by_its_family_name(
        self, tmp_path: Path
    ) -> None:
        site = tmp_path / "site.yaml"
        family = "fleetd_vllm_time_to_first_token_seconds"
        site.write_text(
            "rules:\n"
            "  - name: SlowFirstToken\n"
            f"    expr: histogram_quantile(0.9, rate({family}_bucket[5m])) > 2\n"
            "    severity: info\n"
            "  - name: Requests\n"
            f"    expr: rate({family}_count[5m]) / rate({family}_sum[5m]) > 0\n"
            "    severity: info\n"
        )
        code, out, err = invoke("rules", "check", str(site))
        assert (code, out.strip(), err) == (0, "OK: 1 file(s), 2 rule(s)", "")
        site.write_text(f"rules:\n  - name: Bare\n    expr: {family} > 2\n    severity: info\n")
        code, _, err = invoke("rules", "check", str(site))
        assert code == 1
        assert f"{site}:3:11: rules[0].expr: warning: rule 'Bare' reads '{family}'" in err

    def test_a_disabled_rule_on_an_unwritten_metric_is_not_warned_of(self, tmp_path: Path) -> None:
        site = tmp_path / "site.yaml"
        site.write_text(
            "rules:\n  - name: Old\n    expr: node_load1 > 4\n    severity: info\ndisable: [Old]\n"
        )
        code, out, err = invoke("rules", "check", str(site))
        assert (code, out.strip(), err) == (0, "OK: 1 file(s), 0 rule(s)", "")

    def test_local_rules_override_shipped_ones(self, tmp_path: Path) -> None:
        local = tmp_path / "site.yaml"
        local.write_text(
            "rules:\n  - name: GpuMissing\n    expr: fleetd_gpu_up == 0\n    for: 2m\n"
            "    severity: critical\n"
            "disable: [GpuPowerThrottling]\n"
        )
        code, out, _ = invoke("rules", "check", str(local))
        assert (code, out.strip()) == (0, "OK: 1 file(s), 1 rule(s)")

    def test_disable_of_an_unknown_name_is_checked_against_the_shipped_packs(
        self, tmp_path: Path
    ) -> None:
        local = tmp_path / "site.yaml"
        local.write_text("disable: [GpuMisssing]\n")
        code, _, err = invoke("rules", "check", str(local))
        assert code == 1
        assert f"{local}:1:11: disable[0]: no rule named 'GpuMisssing' to disable" in err
        code, _, _ = invoke("rules", "check", "--no-shipped", str(REPO / "rules"))
        assert code == 0


class TestTest:
    def test_the_shipped_unit_tests_pass(self) -> None:
        code, out, _ = invoke("rules", "test", str(REPO / "rules" / "tests"))
        assert code == 0, out
        _, cases = shipped_counts()
        assert cases >= 31
        assert out.rstrip().endswith(f"{cases} passed, 0 failed")

    def test_a_failing_expectation_exits_1_and_shows_expected_and_got(self, tmp_path: Path) -> None:
        (tmp_path / "r.yaml").write_text(
            "rules:\n  - name: Hot\n    expr: t > 90\n    severity: info\n"
        )
        (tmp_path / "t.yaml").write_text(
            "rule_files: [r.yaml]\n"
            "tests:\n"
            "  - name: fires\n"
            "    input_series:\n      - {series: 't{gpu=\"0\"}', values: '95x3'}\n"
            "    alert_rule_test:\n"
            "      - eval_time: 10s\n        alertname: Hot\n"
            "        exp_alerts: [{exp_labels: {gpu: '1', severity: info}}]\n"
        )
        code, out, _ = invoke("rules", "test", str(tmp_path / "t.yaml"))
        assert code == 1
        assert "FAIL" in out and "alertname: Hot, time: 10s" in out
        assert "got: [{'labels': {'gpu': '0', 'severity': 'info'}" in out
        assert out.rstrip().endswith("0 passed, 1 failed")

    def test_bad_series_notation_is_reported_with_its_position(self, tmp_path: Path) -> None:
        (tmp_path / "r.yaml").write_text(
            "rules:\n  - name: Hot\n    expr: t > 90\n    severity: info\n"
        )
        test = tmp_path / "t.yaml"
        test.write_text(
            "rule_files: [r.yaml]\n"
            "tests:\n"
            "  - input_series:\n"
            "      - series: 't{gpu=\"0\"}'\n"
            "        values: '1 2 3x'\n"
            "    alert_rule_test: [{eval_time: 10s, alertname: Hot}]\n"
        )
        code, _, err = invoke("rules", "test", str(test))
        assert code == 1
        assert f"{test}:5:22: tests[0].input_series[0].values: cannot read '3x'" in err


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
def test_export_writes_rules_promtool_accepts(tmp_path: Path) -> None:
    out = tmp_path / "fleetd.rules.yaml"
    code, _, err = invoke("rules", "export", "--format", "prometheus", "-o", str(out))
    assert code == 0
    assert "not exported: GpuTelemetryStale" in err
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(out)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_export_to_stdout() -> None:
    code, out, _ = invoke("rules", "export")
    assert code == 0
    assert out.startswith("# Prometheus alerting rules generated by")
    assert "- alert: GpuEccUncorrectableError" in out
