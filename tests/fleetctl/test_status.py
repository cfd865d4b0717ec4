"""``fleetctl status`` against real agents on loopback: one dead, one slow."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import POLL_INTERVAL
from tests.fleetctl.conftest import TIMEOUT, Fleet, build_fleet, write_inventory


def test_the_fleet_table_shows_dead_and_slow_nodes_within_the_timeout(fleet: Fleet) -> None:
    result, wall = fleet.run("status")
    assert result.exit_code == 2, result.output
    assert wall < TIMEOUT + 2.0  # the slow node costs its timeout, never its 30 s
    lines = {line.split()[0]: line for line in result.output.splitlines()[1:] if line}
    for agent in fleet.agents:
        assert lines[agent.name].split()[1:3] == ["healthy", "8/8"]
    assert "unreachable" in lines["gpu-node-dead"]
    assert "connection refused" in lines["gpu-node-dead"]
    assert "unreachable" in lines["gpu-node-slow"]
    assert f"timed out after {TIMEOUT:g}s" in lines["gpu-node-slow"]
    assert "5 nodes: 3 healthy, 2 unreachable · 24/24 GPUs healthy" in result.output


def test_status_json_for_scripts(fleet: Fleet) -> None:
    result, _ = fleet.run("status", "--json")
    assert result.exit_code == 2
    document = json.loads(result.output)
    assert document["exit_code"] == 2
    by_name = {n["node"]: n for n in document["nodes"]}
    assert by_name["gpu-node-001"]["summary"]["gpus_total"] == 8
    assert by_name["gpu-node-001"]["health"] == "healthy"
    assert by_name["gpu-node-dead"]["reachable"] is False
    assert by_name["gpu-node-slow"]["error"].startswith("timed out")
    assert document["summary"] == {"nodes": 5, "healthy": 3, "unreachable": 2}


def test_one_node_shows_a_row_per_gpu(fleet: Fleet) -> None:
    result, _ = fleet.run("status", "gpu-node-002")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("gpu-node-002: healthy · 8/8 GPUs healthy")
    assert lines[1].split()[:3] == ["GPU", "HEALTH", "HOT°C"]
    assert [line.split()[0] for line in lines[2:10]] == [str(i) for i in range(8)]
    assert all("x16 32GT/s" in line for line in lines[2:10])
    as_json = json.loads(fleet.run("status", "gpu-node-002", "--json")[0].output)
    assert as_json["node"] == "gpu-node-002" and len(as_json["gpus"]) == 8


def test_one_unreachable_or_unknown_node_exits_2(fleet: Fleet) -> None:
    slow, wall = fleet.run("status", "gpu-node-slow")
    assert slow.exit_code == 2 and "timed out" in slow.output and wall < TIMEOUT + 2.0
    dead, _ = fleet.run("status", "gpu-node-dead")
    assert dead.exit_code == 2 and "connection refused" in dead.output
    unknown, _ = fleet.run("status", "gpu-node-404")
    assert unknown.exit_code == 2 and "unknown node 'gpu-node-404'" in unknown.output


def test_an_agent_at_the_wrong_address_is_not_shown_as_that_node(fleet: Fleet) -> None:
    inventory = write_inventory(
        fleet.tmp / "swapped.yaml", [("gpu-node-777", fleet.agents[0].address)]
    )
    result, _ = fleet.run("status", "--inventory", str(inventory))
    assert result.exit_code == 2
    assert "wrong node" in result.output and "this agent is 'gpu-node-001'" in result.output


def test_alerts_skip_dead_and_slow_nodes_within_the_timeout(fleet: Fleet) -> None:
    result, wall = fleet.run("alerts")
    assert result.exit_code == 2 and wall < TIMEOUT + 2.0
    assert "gpu-node-dead: connection refused" in result.output
    assert f"gpu-node-slow: timed out after {TIMEOUT:g}s" in result.output


def test_watch_redraws(fleet: Fleet) -> None:
    inventory = write_inventory(
        fleet.tmp / "two.yaml", [(a.name, a.address) for a in fleet.agents[:2]]
    )
    result, _ = fleet.run(
        "status", "--inventory", str(inventory), "--watch", "--interval", "0", "--count", "3"
    )
    assert result.exit_code == 0
    assert result.output.count("2 nodes: 2 healthy") == 3
    assert result.output.count("(every 0s, ") == 3


def test_colour_on_request_only(fleet: Fleet) -> None:
    plain, _ = fleet.run("status", "gpu-node-001")
    assert "\x1b[" not in plain.output
    coloured, _ = fleet.run("status", "gpu-node-001", "--color")
    assert "\x1b[32mhealthy" in coloured.output


def test_no_fleet_configured_is_a_clear_error(fleet: Fleet, tmp_path: Path) -> None:
    result, _ = fleet.run("status", env={"FLEETCTL_INVENTORY": "", "HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "no fleet: give --inventory FILE or --db URL" in result.output
    # where it looked, so the engineer knows where to put one
    assert "~/.config/fleetctl/inventory.yaml or /etc/fleetd/inventory.yaml" in result.output


def test_a_bad_inventory_names_file_and_line(fleet: Fleet) -> None:
    bad = fleet.tmp / "bad.yaml"
    bad.write_text("- gpu-node-[001-004]:9477\n- gpu-node-[9-1]\n- {name: x}\n")
    result, _ = fleet.run("status", "--inventory", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:2:3: [1]: bad range [9-1]" in result.output
    assert f"{bad}:3:3: [2]:" in result.output


@pytest.fixture
def sick_fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, healthy=2, with_slow=False)
    try:
        yield built
    finally:
        built.stop()


def test_exit_codes_0_all_healthy_then_1_one_unhealthy(sick_fleet: Fleet) -> None:
    inventory = write_inventory(
        sick_fleet.tmp / "reachable.yaml", [(a.name, a.address) for a in sick_fleet.agents]
    )
    ok, _ = sick_fleet.run("status", "--inventory", str(inventory))
    assert ok.exit_code == 0, ok.output
    agent = sick_fleet.agents[1]
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    sick, _ = sick_fleet.run("status", "--inventory", str(inventory))
    assert sick.exit_code == 1
    row = next(line for line in sick.output.splitlines() if line.startswith(agent.name))
    assert row.split()[1:3] == ["unhealthy", "7/8"]
    assert "1/0/0" in row and "gpu 3: unhealthy" in row
    one, _ = sick_fleet.run("status", agent.name, "--inventory", str(inventory))
    assert one.exit_code == 1
    assert "critical GpuEccUncorrectableError [gpu 3]" in one.output
