"""Reliability KPIs and staged trust end to end through a real daemon on the simulator: a reset
run shows up in ``GET /api/v1/report``, on ``/metrics`` and in ``fleetctl report`` with its
stage breakdown and success; a shipped rule switched to ``mode: shadow`` fires, is counted and
explained, and neither pages nor starts a run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from fleetd.rules.config import shipped_rules_dir
from tests.api.agent import Agent, start_agent
from tests.fleetctl.conftest import Fleet, acting_fleet, run_after_fault, single_agent_fleet

ECC = "GpuEccUncorrectableError"


@pytest.fixture
def acting(tmp_path: Path) -> Iterator[Fleet]:
    with acting_fleet(tmp_path, {"mode": "on"}) as fleet:
        yield fleet


def _metrics(agent: Agent) -> dict[str, float]:
    text = requests.get(agent.url + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line.startswith(("fleetd_kpi_", "fleetd_rule_")) and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_a_reset_run_is_in_the_report_the_metrics_and_fleetctl(acting: Fleet) -> None:
    agent = acting.agents[0]
    run_id = run_after_fault(agent, "done")
    agent.tick(1)  # the next publication sees the concluded run

    result, _ = acting.run("report", agent.name, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    [node] = data["nodes"]
    report = node["report"]
    assert report["success"] == {"succeeded": 1, "failed": 0, "ratio": 1.0}
    auto = report["time_to_repair"]["automatic"]
    assert auto["count"] == 1 and auto["mean_s"] > 0
    stages = report["readmission"]["stages"]
    assert {"drain", "capture", "reset", "verify"} <= set(stages), stages
    assert "validate" not in stages  # no validation ladder in this journal
    assert all(v >= 0 for v in stages.values())
    [run] = [r for r in report["runs"] if r["run_id"] == run_id]
    # an uncorrectable error the reset recovered: a fault found, not a healthy GPU reset
    assert run["repair"] == "automatic" and run["verdict"] == "fault_found"
    assert sum(run["stages"].values()) == pytest.approx(run["repair_s"], abs=1e-6)
    assert report["readmission"]["mean_s"] == pytest.approx(run["repair_s"])
    gpu3 = next(g for g in report["incidents"]["gpus"] if g["gpu"] == 3)
    assert gpu3["incidents"] == 1 and gpu3["serial"]
    assert report["gpu_hours_out_of_service"] > 0
    [ecc] = [r for r in report["rules"] if r["rule"] == run["rule"]]
    assert ecc["mode"] == "remediate" and ecc["runs"] == 1 and ecc["fault_found"] == 1
    assert ecc["nothing_found"] == 0 and ecc["precision"] == 1.0
    assert data["fleet"]["success"]["succeeded"] == 1

    metrics = _metrics(agent)
    assert metrics["fleetd_kpi_remediation_success_ratio"] == 1.0
    assert metrics['fleetd_kpi_remediation_runs{result="succeeded"}'] == 1.0
    assert metrics['fleetd_kpi_readmission_stage_seconds{stage="reset"}'] == pytest.approx(
        stages["reset"]
    )
    assert metrics['fleetd_kpi_repairs{repair="automatic"}'] == 1.0
    assert metrics[f'fleetd_rule_mode{{mode="remediate",rule="{run["rule"]}"}}'] == 1.0

    text, _ = acting.run("report", agent.name)
    assert text.exit_code == 0, text.output
    out = text.output
    assert "runs: 1 succeeded, 0 failed (success 100%)" in out
    assert "re-admission by stage (mean of 1 successful runs): queued" in out
    assert f"{run_id} reset done repair automatic" in out
    assert run["rule"] in out and "remediate" in out

    api = requests.get(agent.url + "/api/v1/report", params={"window": "1h"}, timeout=10)
    assert api.status_code == 200 and api.json()["window_s"] == 3600
    bad = requests.get(agent.url + "/api/v1/report", params={"window": "-1"}, timeout=10)
    assert bad.status_code == 400


@pytest.fixture
def shadowed(tmp_path: Path) -> Iterator[Fleet]:
    """The shipped ECC rule, word for word, in the site directory with ``mode: shadow``."""
    shipped = yaml.safe_load((shipped_rules_dir() / "gpu.yaml").read_text())
    [rule] = [r for r in shipped["rules"] if r["name"] == ECC]
    local = tmp_path / "rules.d"
    local.mkdir()
    (local / "trial.yaml").write_text(yaml.safe_dump({"rules": [{**rule, "mode": "shadow"}]}))
    agent = start_agent(
        tmp_path / "shadow",
        name="gpu-node-shadow",
        remediation={"mode": "on"},
        rules={"local_dir": str(local)},
    )
    fleet = single_agent_fleet(tmp_path, agent)
    try:
        yield fleet
    finally:
        fleet.stop()


def test_a_shadow_rule_that_fires_pages_no_one_starts_no_run_and_is_counted(
    shadowed: Fleet,
) -> None:
    agent = shadowed.agents[0]
    assert agent.engine.rules.get(ECC) is not None
    assert agent.engine.rules.get(ECC).mode == "shadow"  # type: ignore[union-attr]
    agent.sim.inject(3, "ecc_uncorrectable")
    agent.tick(12)

    assert [a.key.rule for a in agent.engine.shadow_alerts()] == [ECC]
    now = agent.clock.now()
    assert all(h.alert.rule != ECC for h in agent.dispatcher.alerts(now))  # no page
    remedy = agent.remedy
    assert remedy is not None and remedy.runs() == []  # no run
    logged = agent.store.query_events(kinds=["shadow_alert"])
    assert [e.data["rule"] for e in logged] == [ECC] and logged[0].gpu == 3
    assert logged[0].data["would"] == "notify and remediate (reset)"
    assert not agent.store.query_events(kinds=["alert"])  # nothing else fired for it

    agent.daemon.refresh_kpi()  # the daemon's kpi job (the harness runs no jobs)
    agent.tick(1)
    metrics = _metrics(agent)
    assert metrics[f'fleetd_rule_shadow_firings{{rule="{ECC}"}}'] == 1.0
    assert metrics[f'fleetd_rule_mode{{mode="shadow",rule="{ECC}"}}'] == 1.0

    result, _ = shadowed.run("report", agent.name, "--json")
    [trust] = [r for r in json.loads(result.output)["fleet"]["rules"] if r["rule"] == ECC]
    assert trust["mode"] == "shadow" and trust["shadow_fired"] == 1 and trust["runs"] == 0

    explained, _ = shadowed.run("explain", agent.name, "3")
    assert explained.exit_code == 0, explained.output
    out = explained.output
    assert "shadow rules (never notified, never remediated)" in out
    assert f"{ECC} firing" in out and "would notify and remediate (reset)" in out
    assert f"{ECC} [shadow]: 0 runs" in out and "1 shadow firings" in out
