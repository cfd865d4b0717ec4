"""``fleetctl rma list|show`` against a real agent whose reset run failed a validator: the
GPU's RMA record (by serial) says physical action is needed, with the validator's verdict and
the bundle to fetch; exit 3 while it is open."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleetctl.conftest import Fleet, acting_fleet, run_after_fault

FIXTURES = Path(__file__).parents[1] / "remedy" / "fixtures" / "validators"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    tool = tmp_path / "rvs"
    tool.write_text(f"#!/bin/sh\ncat {FIXTURES / 'rvs_gst_gpu5_below_target.txt'}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    remediation = {
        "mode": "on",
        "validation": {
            "validators": [
                {"name": "rvs_gst", "kind": "rvs", "command": [str(tool)], "timeout": "30s"}
            ],
            "plans": {"reset": ["rvs_gst"]},
        },
    }
    with acting_fleet(tmp_path, remediation) as built:
        yield built


def test_rma_list_and_show_the_gpu_that_needs_physical_action(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    run_id = run_after_fault(agent, "quarantined")
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
