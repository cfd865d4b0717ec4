"""``fleetctl explain`` after a real reset run: the run's milestones (planned, reset,
verification, outcome) come first, however many step events followed them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import POLL_INTERVAL, Agent, start_agent
from tests.fleetctl.conftest import Fleet, build_fleet, write_inventory


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, healthy=0, with_slow=False)
    acting = start_agent(tmp_path / "acting", name="gpu-node-acting", remediation={"mode": "on"})
    acting.tick(3)
    built.agents.append(acting)
    inventory = write_inventory(tmp_path / "one.yaml", [(acting.name, acting.address)])
    built.env["FLEETCTL_INVENTORY"] = str(inventory)
    try:
        yield built
    finally:
        built.stop()


def reset_run_done(agent: Agent) -> str:
    agent.sim.inject(3, "ecc_uncorrectable")
    for _ in range(12):
        agent.clock.advance(POLL_INTERVAL)
        agent.tick()
    remedy = agent.remedy
    assert remedy is not None
    (run,) = remedy.runs()
    assert run.state.value == "done", run.state
    return run.run_id


def test_milestones_come_before_a_flood_of_worker_steps(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    run_id = reset_run_done(agent)
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
