"""fleetctl's other commands against real agents: alerts, silences, drain/undrain,
remediation, history, explain, reload, ack — and what happens without a token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import POLL_INTERVAL
from tests.fleetctl.conftest import Fleet, build_fleet


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """Two agents (gpu-node-002 with an uncorrectable ECC error on GPU 3) and a dead address;
    rebuilt per test because these tests change things."""
    built = build_fleet(tmp_path, healthy=2, with_slow=False)
    sick = built.agents[1]
    sick.sim.inject(3, "ecc_uncorrectable", persistent=True)
    sick.clock.advance(POLL_INTERVAL)
    sick.tick(2)
    try:
        yield built
    finally:
        built.stop()


def test_alerts_across_the_fleet(fleet: Fleet) -> None:
    result, _ = fleet.run("alerts")
    assert result.exit_code == 2  # the dead node could not be asked
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["NODE", "SEVERITY", "ALERT"]
    assert lines[1].split()[:4] == ["gpu-node-002", "critical", "GpuEccUncorrectableError", "3"]
    assert "gpu-node-dead: connection refused" in result.output
    only, _ = fleet.run("alerts", "gpu-node-001", "--json")
    assert only.exit_code == 0 and json.loads(only.output)["alerts"] == []
    document = json.loads(fleet.run("alerts", "gpu-node-002", "--json")[0].output)
    assert document["alerts"][0]["node"] == "gpu-node-002"


def test_silence_add_list_expire(fleet: Fleet) -> None:
    added, _ = fleet.run(
        "silence", "add", "gpu-node-002", 'gpu="3"', "--duration", "30m", "--reason", "swap"
    )
    assert added.exit_code == 0, added.output
    silence_id = added.output.split("silence ")[1].split()[0]
    listed, _ = fleet.run("silence", "list", "gpu-node-002")
    assert listed.exit_code == 0
    assert silence_id in listed.output and 'gpu="3"' in listed.output and "swap" in listed.output
    alerts, _ = fleet.run("alerts", "gpu-node-002")
    assert "silenced" in alerts.output
    expired, _ = fleet.run("silence", "expire", "gpu-node-002", silence_id, "-r", "done")
    assert expired.exit_code == 0
    assert fleet.run("silence", "list", "gpu-node-002")[0].output.count(silence_id) == 0
    assert silence_id in fleet.run("silence", "list", "gpu-node-002", "--all")[0].output
    bad, _ = fleet.run("silence", "add", "gpu-node-002", "gpu=~[", "-r", "x")
    assert bad.exit_code == 1 and "regular expression" in bad.output
    missing, _ = fleet.run("silence", "expire", "gpu-node-002", "nope", "-r", "x")
    assert missing.exit_code == 1 and "no silence 'nope'" in missing.output


def test_drain_shows_in_status_and_remediation_then_undrain(fleet: Fleet) -> None:
    drained, _ = fleet.run("drain", "gpu-node-001", "5", "--reason", "fan noise")
    assert drained.exit_code == 0, drained.output
    assert "drain gpu 5: planned" in drained.output  # the agent's next tick carries it out
    run_id = drained.output.split("run ")[1].split()[0]
    fleet.agents[0].tick()
    status, _ = fleet.run("status", "gpu-node-001")
    row5 = status.output.splitlines()[2 + 5]
    assert "drain drained" in row5
    fleet_rows, _ = fleet.run("status")
    assert "drained gpu 5" in fleet_rows.output
    listed, _ = fleet.run("remediation", "list")
    assert f"gpu 5 held (drained) by run {run_id}" in listed.output
    shown, _ = fleet.run("remediation", "show", "gpu-node-001", run_id)
    assert shown.exit_code == 0 and "run_planned" in shown.output and "fan noise" in shown.output
    again, _ = fleet.run("drain", "gpu-node-001", "5", "--reason", "twice")
    assert again.exit_code == 1 and "already in run" in again.output
    undrained, _ = fleet.run("undrain", "gpu-node-001", "5", "--reason", "fan replaced")
    assert undrained.exit_code == 0 and "undrain" in undrained.output
    history, _ = fleet.run("history", "gpu-node-001", "5")
    assert "drain GPU 5 requested; reason: fan noise" in history.output
    assert "undrain GPU 5 requested; reason: fan replaced" in history.output
    assert "readings over the last 1d" in history.output


def test_remediation_pause_resume_and_cancel(fleet: Fleet) -> None:
    paused, _ = fleet.run("remediation", "pause", "gpu-node-002", "-r", "maintenance window")
    assert paused.exit_code == 0 and "remediation paused" in paused.output
    status, _ = fleet.run("status", "gpu-node-002")
    assert "remediation dry-run (paused)" in status.output
    explained, _ = fleet.run("explain", "gpu-node-002", "3")
    assert "remediation is paused" in explained.output
    resumed, _ = fleet.run("remediation", "resume", "gpu-node-002", "-r", "done")
    assert resumed.exit_code == 0
    cancelled, _ = fleet.run("remediation", "cancel", "gpu-node-002", "nope", "-r", "x")
    assert cancelled.exit_code == 1 and "no remediation run 'nope'" in cancelled.output
    reset, _ = fleet.run("remediation", "reset-breaker", "gpu-node-002", "-r", "checked")
    assert reset.exit_code == 0 and "circuit breaker reset" in reset.output


def test_explain_answers_the_four_questions(fleet: Fleet) -> None:
    result, _ = fleet.run("explain", "gpu-node-002", "3")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("GPU 3 is unhealthy: GpuEccUncorrectableError (critical) firing since")
    assert "which rule" in out and "increase(fleetd_gpu_ecc_errors_total" in out
    assert 'which readings\n  fleetd_gpu_ecc_errors_total{type="correctable"} = 0' in out
    assert 'fleetd_gpu_ecc_errors_total{type="uncorrectable"} = 1 (0s old)' in out
    assert "what has been done\n  remediation mode: dry-run" in out
    assert "reset (dry-run)" in out
    assert "what happens next\n  GpuEccUncorrectableError asks for remediation plan 'reset'" in out
    as_json = json.loads(fleet.run("explain", "gpu-node-002", "3", "--json")[0].output)
    assert as_json["alerts"][0]["rule"] == "GpuEccUncorrectableError"
    unknown, _ = fleet.run("explain", "gpu-node-002", "12")
    assert unknown.exit_code == 1 and "unknown GPU 12" in unknown.output


def test_ack_and_reload(fleet: Fleet) -> None:
    alerts = json.loads(fleet.run("alerts", "gpu-node-002", "--json")[0].output)["alerts"]
    fingerprint = alerts[0]["fingerprint"]
    acked, _ = fleet.run("ack", "gpu-node-002", fingerprint, "-r", "looking")
    assert acked.exit_code == 0 and "acknowledged" in acked.output
    assert "acked" in fleet.run("alerts", "gpu-node-002")[0].output
    reload, _ = fleet.run("reload", "gpu-node-002", "-r", "new rules")
    assert reload.exit_code == 1 and "cannot reload" in reload.output  # no reload wired here


def test_changes_need_a_token_and_a_reason(fleet: Fleet, tmp_path: Path) -> None:
    no_token, _ = fleet.run(
        "drain", "gpu-node-001", "1", "-r", "x", env={"FLEETCTL_TOKEN_FILE": ""}
    )
    assert no_token.exit_code == 1 and "give --token-file FILE" in no_token.output
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-at-all")
    denied, _ = fleet.run("drain", "gpu-node-001", "1", "-r", "x", "--token-file", str(wrong))
    assert denied.exit_code == 1 and "invalid token" in denied.output
    no_reason, _ = fleet.run("drain", "gpu-node-001", "1")
    assert no_reason.exit_code == 2 and "--reason" in no_reason.output
    dead, _ = fleet.run("drain", "gpu-node-dead", "1", "-r", "x")
    assert dead.exit_code == 2 and "connection refused" in dead.output
    status = json.loads(fleet.run("status", "gpu-node-001", "--json")[0].output)
    assert status["remediation"]["held"] == []


def test_a_node_can_be_addressed_directly(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    result, _ = fleet.run("status", agent.address, env={"FLEETCTL_INVENTORY": ""})
    assert result.exit_code == 2  # host:port is not the node's name: the agent says so
    assert "unknown node" in result.output
    named, _ = fleet.run("status", agent.name)
    assert named.exit_code == 0
