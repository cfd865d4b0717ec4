"""Serving SLOs per model (docs/examples/vllm-slo.yaml): off unless installed, levels keyed by
the served model's name (``threshold_by: model``), ``for``, hysteresis through ``clear``, a
traffic guard — and Prometheus fires the same alerts on the export."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetd.errors import ConfigError
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.export import export_prometheus
from fleetd.rules.loader import load_rule_set
from fleetd.rules.ruletest import run_test_file
from tests.rules.test_rule_export import _to_promtool

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "vllm-slo.yaml"
BOUNDS = ("0.25", "0.5", "1.0", "2.5", "5.0", "+Inf")
STEP_S = 30


def bucket_values(phases: list[tuple[int, int, str]]) -> dict[str, str]:
    """Cumulative bucket series: per phase (steps, requests per step, le they fall in)."""
    counts = dict.fromkeys(BOUNDS, 0)
    out: dict[str, list[int]] = {le: [0] for le in BOUNDS}
    for steps, per_step, le in phases:
        for _ in range(steps):
            for bound in BOUNDS[BOUNDS.index(le) :]:
                counts[bound] += per_step
            for bound in BOUNDS:
                out[bound].append(counts[bound])
    return {le: " ".join(map(str, values)) for le, values in out.items()}


def worker(name: str, model: str, phases: list[tuple[int, int, str]]) -> list[dict[str, str]]:
    series = []
    values = bucket_values(phases)
    metric = "fleetd_vllm_time_to_first_token_seconds"
    for le in BOUNDS:
        labels = f'worker="{name}",model="{model}",le="{le}"'
        series.append({"series": f"{metric}_bucket{{{labels}}}", "values": values[le]})
    labels = f'worker="{name}",model="{model}"'
    series.append({"series": f"{metric}_count{{{labels}}}", "values": values["+Inf"]})
    return series


LLAMA = "meta-llama/Llama-3.3-70B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
RULE = "VllmTimeToFirstTokenSlo"


def expected(labels: dict[str, str], value: str) -> dict[str, object]:
    worker, model = labels["worker"], labels["model"]
    summary = f"vLLM worker {worker} ({model}): p99 time to first token {value} s over its SLO"
    description = (
        f"p99 time to first token of {model} on worker {worker} has been above its SLO for "
        "10 minutes (queue time and preemptions usually explain it)."
    )
    return {
        "exp_labels": labels,
        "exp_annotations": {"summary": summary, "description": description},
    }


def slo_test() -> dict[str, object]:
    # w0 (Llama, 2 s) and w1 (Qwen, 0.5 s) see the same latencies; w2 (Qwen) has too little
    # traffic to judge. w1 then speeds up into the hysteresis band, then below `clear`.
    fired = {"worker": "w1", "model": QWEN, "severity": "warning", "component": "vllm",
             "slo": "ttft"}  # fmt: skip
    return {
        "rule_files": ["slo.yaml"],
        "evaluation_interval": f"{STEP_S}s",
        "tests": [
            {
                "name": "per-model levels, for, hysteresis and the traffic guard",
                "interval": f"{STEP_S}s",
                "input_series": [
                    *worker("w0", LLAMA, [(80, 60, "1.0")]),
                    *worker("w1", QWEN, [(30, 60, "1.0"), (24, 60, "0.5"), (26, 60, "0.25")]),
                    *worker("w2", QWEN, [(80, 1, "1.0")]),
                ],
                "alert_rule_test": [
                    {"eval_time": "9m", "alertname": RULE},  # pending: for 10m
                    {
                        "eval_time": "14m",
                        "alertname": RULE,
                        "exp_alerts": [expected(fired, "0.995")],
                    },
                    # p99 ~0.4975: under the 0.5 threshold, above the 0.4 clear: still firing
                    {
                        "eval_time": "26m",
                        "alertname": RULE,
                        "exp_alerts": [expected(fired, "0.4975")],
                    },
                    {"eval_time": "39m", "alertname": RULE},  # p99 ~0.25: resolved
                ],
            }
        ],
    }


def test_no_slo_rule_is_shipped() -> None:
    shipped = {rule.name for rule in load_rule_set([shipped_rules_dir()]).rules}
    example = {rule.name for rule in load_rule_set([EXAMPLE]).rules}
    assert len(example) == 3 and not shipped & example


def test_fleetd_fires_per_model_with_hysteresis(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "slo.yaml")
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(slo_test()))
    results = run_test_file(tmp_path / "test.yaml")
    assert [r.failures for r in results] == [[]]


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
def test_prometheus_fires_the_same_on_the_export(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    exported = export_prometheus(load_rule_set([EXAMPLE]))
    assert exported.skipped == ()
    (tmp_path / "prometheus.rules.yaml").write_text(exported.text)
    converted = _to_promtool(slo_test(), "prometheus.rules.yaml")
    (tmp_path / "promtool_test.yaml").write_text(yaml.safe_dump(converted))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", str(tmp_path / "promtool_test.yaml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("threshold", "message"),
    [
        ("threshold_by: model\n    threshold: 2", "threshold per value"),
        ("threshold_by: model\n    threshold: {m: 2}", "needs a 'default'"),
        ("threshold: {m: 2, default: 3}", "unknown product"),
        (
            "threshold_by: model\n    threshold: {m: 2, default: 3}\n"
            "    clear: {m: 2.5, default: 3}",
            "clear (2.5) must be at or below",
        ),
    ],
)
def test_bad_model_thresholds_are_refused(tmp_path: Path, threshold: str, message: str) -> None:
    (tmp_path / "r.yaml").write_text(
        f"rules:\n  - name: X\n    expr: up\n    op: '>'\n    {threshold}\n    severity: info\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_rule_set([tmp_path / "r.yaml"])
    assert message in str(caught.value)
