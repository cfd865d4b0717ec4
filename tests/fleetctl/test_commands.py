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
    node, severity, alert, gpu = lines[1].split()[:4]
    # GPU 3's uncorrectable error pages once, by the rule of whichever report came first
    assert (node, severity, gpu) == ("gpu-node-002", "critical", "3")
    assert alert in ("GpuEccUncorrectableError", "GpuKernelUncorrectableError",
                     "GpuCperUncorrectedError"), alert  # fmt: skip
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
    assert no_token.exit_code == 2 and "give --token-file FILE" in no_token.output  # usage
    empty = tmp_path / "empty"
    empty.write_text("\n")
    blank, _ = fleet.run("drain", "gpu-node-001", "1", "-r", "x", "--token-file", str(empty))
    assert blank.exit_code == 2 and "is empty" in blank.output
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


def test_a_node_can_be_addressed_directly(fleet: Fleet, tmp_path: Path) -> None:
    """HOST:PORT and http(s)://… work wherever a node is named, with or without an
    inventory (explicit, default, or a registry that cannot be read)."""
    agent = fleet.agents[0]
    no_inventory = {"FLEETCTL_INVENTORY": "", "HOME": str(tmp_path)}
    result, _ = fleet.run("status", agent.address, env=no_inventory)
    assert result.exit_code == 0, result.output  # the agent answers as itself
    assert result.output.startswith(f"{agent.name}: healthy · 8/8 GPUs healthy")
    member, _ = fleet.run("status", agent.address)  # the inventory's member at that address
    assert member.exit_code == 0, member.output
    assert fleet.run("status", agent.url)[0].exit_code == 0
    assert fleet.run("status", agent.name)[0].exit_code == 0

    default = tmp_path / ".config" / "fleetctl" / "inventory.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("- {name: elsewhere, address: '127.0.0.1:1'}\n")
    with_default, _ = fleet.run("status", agent.address, env=no_inventory)
    assert with_default.exit_code == 0, with_default.output
    broken_registry = f"sqlite:///{tmp_path / 'missing' / 'registry.db'}"
    with_db, _ = fleet.run("status", agent.address, "--db", broken_registry, env=no_inventory)
    assert with_db.exit_code == 0, with_db.output

    sick = fleet.agents[1]
    explained, _ = fleet.run("explain", sick.address, "3", env=no_inventory)
    assert explained.exit_code == 0 and "GpuEccUncorrectableError" in explained.output
    alerts, _ = fleet.run("alerts", sick.address, env=no_inventory)
    assert alerts.exit_code == 0 and "GpuEccUncorrectableError" in alerts.output
    # the NODE column is the name the agent answered with, as on its pages, not the address
    [row] = [line for line in alerts.output.splitlines() if "GpuEccUncorrectableError" in line]
    assert row.split()[0] == sick.name and sick.address not in row, alerts.output
    drained, _ = fleet.run("drain", agent.address, "2", "-r", "by address", env=no_inventory)
    assert drained.exit_code == 0, drained.output
    history, _ = fleet.run("history", agent.address, "2", env=no_inventory)
    assert "drain GPU 2 requested; reason: by address" in history.output
    table, _ = fleet.run("status", env={"FLEETCTL_INVENTORY": str(default)})
    assert "elsewhere" in table.output
    unknown, _ = fleet.run("status", "gpu-node-404", env=no_inventory)
    assert unknown.exit_code == 2 and "unknown node 'gpu-node-404'" in unknown.output
    ranged, _ = fleet.run("status", "gpu-node-[1-2]:9477", env=no_inventory)
    assert ranged.exit_code == 2 and "give one address" in ranged.output


def test_history_and_explain_show_alert_transitions(fleet: Fleet) -> None:
    sick = fleet.agents[1]
    history, _ = fleet.run("history", sick.name, "3")
    assert history.exit_code == 0, history.output
    row = next(line for line in history.output.splitlines()[1:] if line.split()[3] == "alert")
    assert "GpuEccUncorrectableError firing (critical) on GPU 3 (value 1)" in row
    assert "fleetd" in row
    node_wide, _ = fleet.run("history", sick.name, "--json")
    kinds = [e["kind"] for e in json.loads(node_wide.output)["events"]]
    assert "alert" in kinds
    explained, _ = fleet.run("explain", sick.name, "3")
    assert "alert: GpuEccUncorrectableError firing (critical) on GPU 3" in explained.output


def test_history_shows_a_spike_the_stepped_points_miss(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    agent.sim.inject(1, "ecc_uncorrectable")
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    agent.sim.reset_hive(1)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(5)
    result, _ = fleet.run("history", agent.name, "1", "--since", "1h")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "ecc_uncorrectable_total" in line)
    last, low, _, high, samples = row.split()[1:]
    assert (last, low, high, samples) == ("0.00", "0.00", "1.00", "10")


def test_drain_help_says_it_drains_one_gpu() -> None:
    from tests.fleetctl.conftest import run_fleetctl

    drain, _ = run_fleetctl("drain", "--help")
    assert drain.exit_code == 0
    assert "reset unit" not in drain.output
    text = " ".join(drain.output.split())
    assert "Take the vLLM workers on GPU of NODE out of service and hold the GPU out." in text
    assert "Only that GPU, not its XGMI hive" in text
    undrain, _ = run_fleetctl("undrain", "--help")
    assert "reset unit" not in undrain.output and "every GPU held by the same run" in undrain.output
