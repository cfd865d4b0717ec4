"""``fleetctl explain`` after a real reset run: the run's milestones (planned, reset,
verification, outcome) come first, however many step events followed them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleetctl.conftest import Fleet, acting_fleet, run_after_fault


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with acting_fleet(tmp_path, {"mode": "on"}) as built:
        yield built


def test_milestones_come_before_a_flood_of_worker_steps(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    run_id = run_after_fault(agent, "done")
    for worker in range(8):  # what an 8-worker hive logs last: each worker coming back
        for step in ("started", "healthy", "back in rotation"):
            agent.store.append_event(
                "remediation", now=agent.clock.now(), gpu=3, message=f"gpu{worker} {step}"
            )
    result, _ = fleet.run("explain", agent.name, "3")
    assert result.exit_code == 0, result.output
    out = result.output
    lines = out[out.index(f"  milestones of run {run_id} (reset):") :].splitlines()
    kinds = [line.split()[2].rstrip(":") for line in lines[1:6]]
    assert kinds == ["run_planned", "reset_intent", "reset_done", "verified", "done"], out
    assert lines[6] == "  recent events:"
    assert "GPU 3 reset once; the reset reached GPUs 0-7" in out
    assert out.index("milestones of run") < out.index("  recent events:")
    assert "gpu7 back in rotation" in out  # recent events follow
    data = json.loads(fleet.run("explain", agent.name, "3", "--json")[0].output)
    milestones = data["remediation"]["milestones"]
    assert milestones["run_id"] == run_id and milestones["state"] == "done"
    assert [s["kind"] for s in milestones["steps"]] == [
        "run_planned",
        "reset_intent",
        "reset_done",
        "verified",
        "done",
    ]


def test_a_gpu_no_run_touched_has_no_milestones(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    data = json.loads(fleet.run("explain", agent.name, "2", "--json")[0].output)
    assert data["remediation"]["milestones"] is None
    text, _ = fleet.run("explain", agent.name, "2")
    assert "milestones" not in text.output
