"""``fleetctl rma list|show`` against a real agent whose reset run failed a validator: the
GPU's RMA record (by serial) says physical action is needed, with the validator's verdict and
the bundle to fetch; exit 3 while it is open."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import POLL_INTERVAL, Agent, start_agent
from tests.fleetctl.conftest import Fleet, build_fleet, write_inventory

FIXTURES = Path(__file__).parents[1] / "remedy" / "fixtures" / "validators"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    tool = tmp_path / "rvs"
    tool.write_text(f"#!/bin/sh\ncat {FIXTURES / 'rvs_gst_gpu5_below_target.txt'}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    built = build_fleet(tmp_path, healthy=0, with_slow=False)
    remediation = {
        "mode": "on",
        "validation": {
            "validators": [
                {"name": "rvs_gst", "kind": "rvs", "command": [str(tool)], "timeout": "30s"}
            ],
            "plans": {"reset": ["rvs_gst"]},
        },
    }
    acting = start_agent(tmp_path / "acting", name="gpu-node-acting", remediation=remediation)
    acting.tick(3)
    built.agents.append(acting)
    inventory = write_inventory(tmp_path / "one.yaml", [(acting.name, acting.address)])
    built.env["FLEETCTL_INVENTORY"] = str(inventory)
    try:
        yield built
    finally:
        built.stop()


def quarantined_by_the_ladder(agent: Agent) -> str:
    agent.sim.inject(3, "ecc_uncorrectable")
    for _ in range(12):
        agent.clock.advance(POLL_INTERVAL)
        agent.tick()
    remedy = agent.remedy
    assert remedy is not None
    (run,) = remedy.runs()
    assert run.state.value == "quarantined", run.outcome
    return run.run_id


def test_rma_list_and_show_the_gpu_that_needs_physical_action(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    run_id = quarantined_by_the_ladder(agent)
    remedy = agent.remedy
    assert remedy is not None
    [record] = remedy.rma_records()
    serial = record.serial
    assert record.gpu == 3 and not serial.startswith("unknown:")

    listed, _ = fleet.run("rma", "list", agent.name)
    assert listed.exit_code == 3, listed.output
    assert serial in listed.output and "NEEDED (ladder: validation:rvs_gst)" in listed.output
    assert "failed: rvs_gst" in listed.output

    shown, _ = fleet.run("rma", "show", agent.name, serial)
    assert shown.exit_code == 3, shown.output
    out = shown.output
    assert "PHYSICAL ACTION NEEDED (ladder)" in out
    assert "decided" in out and run_id in out
    assert "Validator rvs_gst (rvs) failed after remediation" in out
    assert f"(fleetctl evidence {agent.name} {run_id})" in out
    assert "FAIL  rvs_gst" in out and "met: FALSE" in out

    data = json.loads(fleet.run("rma", "list", agent.name, "--physical", "--json")[0].output)
    [record] = data["records"]
    assert record["serial"] == serial and record["physical_action_needed"]
    assert record["open_decision"]["bundle_path"].endswith(f"{run_id}.quarantine.1.json.gz")

    run_shown, _ = fleet.run("remediation", "show", agent.name, run_id)
    assert "validator rvs_gst: FAIL: 1 failed result(s)" in run_shown.output

    missing, _ = fleet.run("rma", "show", agent.name, "no-such-serial")
    assert missing.exit_code == 1 and "no RMA record for serial 'no-such-serial'" in missing.output
