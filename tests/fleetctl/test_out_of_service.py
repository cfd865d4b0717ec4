"""GPUs out of service are never healthy: ``fleetctl status`` and ``explain`` against real
agents with a quarantined hive, a reset run under way, and a drain that is undrained."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.fleetctl_context import (
    EXIT_OK,
    EXIT_OUT_OF_SERVICE,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
)
from tests.api.agent import POLL_INTERVAL, Agent, start_agent
from tests.fleetctl.conftest import Fleet, build_fleet, write_inventory

ACTING = {"mode": "on", "drain": {"release_timeout": "10s"}}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """gpu-node-001 in dry-run, and gpu-node-acting with remediation on."""
    built = build_fleet(tmp_path, healthy=1, with_slow=False)
    acting = start_agent(tmp_path / "acting", name="gpu-node-acting", remediation=ACTING)
    acting.tick(3)
    built.agents.append(acting)
    inventory = write_inventory(tmp_path / "both.yaml", [(a.name, a.address) for a in built.agents])
    built.env["FLEETCTL_INVENTORY"] = str(inventory)
    try:
        yield built
    finally:
        built.stop()


def tick_until(agent: Agent, done: str, *, most: int = 20) -> None:
    """Poll (and run remediation) until the agent's remediation is in state ``done``."""
    for _ in range(most):
        agent.clock.advance(POLL_INTERVAL)
        agent.tick()
        remedy = agent.remedy
        assert remedy is not None
        status = remedy.status()
        states = {h.state for h in status.held} | {r.state.value for r in status.active}
        if done in states:
            return
    raise AssertionError(f"remediation never reached {done}")


def test_a_quarantined_hive_is_out_of_service_and_exits_3(fleet: Fleet) -> None:
    ok, _ = fleet.run("status")
    assert ok.exit_code == EXIT_OK, ok.output
    agent = fleet.agents[1]
    agent.sim.add_process(0, 4242, "stray", 1 << 30)  # the reset is refused: quarantine
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    tick_until(agent, "quarantined")
    remedy = agent.remedy
    assert remedy is not None
    (held,) = remedy.status().held
    assert held.gpus == tuple(range(8))

    table, _ = fleet.run("status")
    assert table.exit_code == EXIT_OUT_OF_SERVICE, table.output
    row = next(line for line in table.output.splitlines() if line.startswith(agent.name))
    assert row.split()[1:3] == ["out_of_service", "0/8"]
    assert "0/8 GPUs in service" in row and f"gpus 0-7: quarantined (run {held.run_id})" in row
    assert "2 nodes: 1 healthy, 1 out_of_service · 8/16 GPUs healthy" in table.output
    assert "· 8/16 GPUs in service" in table.output
    document = json.loads(fleet.run("status", "--json")[0].output)
    assert document["exit_code"] == EXIT_OUT_OF_SERVICE

    one, _ = fleet.run("status", agent.name)
    assert one.exit_code == EXIT_OUT_OF_SERVICE
    lines = one.output.splitlines()
    assert lines[0].startswith(
        f"{agent.name}: out_of_service · 0/8 GPUs healthy · 0/8 GPUs in service"
    )
    rows = lines[2:10]
    assert all(r.split()[1] == "out_of_service" for r in rows), rows
    assert f"quarantined by run {held.run_id} (reset, quarantined): reset refused" in rows[3]
    assert "rules say unhealthy" in rows[3]

    explained, _ = fleet.run("explain", agent.name, "3")
    assert explained.exit_code == 0, explained.output
    assert explained.output.startswith(
        f"GPU 3 is out of service: quarantined by run {held.run_id} (reset, quarantined: "
        "reset refused, still on the GPUs: GPU 0: pid 4242 (stray)); its readings say unhealthy"
    )
    assert f"`fleetctl undrain {agent.name} 3 -r REASON`" in explained.output  # runs as shown
    # asked by address, the suggestion names the address (the agent's name would not resolve)
    by_address, _ = fleet.run("explain", agent.address, "3")
    assert f"`fleetctl undrain {agent.address} 3 -r REASON`" in by_address.output


def test_a_reset_run_under_way_exits_3(fleet: Fleet) -> None:
    agent = fleet.agents[1]
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    tick_until(agent, "verifying")
    during, _ = fleet.run("status", agent.name)
    assert during.exit_code == EXIT_OUT_OF_SERVICE, during.output
    assert "0/8 GPUs in service" in during.output.splitlines()[0]
    assert "remediating by run" in during.output
    explained, _ = fleet.run("explain", agent.name, "5")
    assert explained.output.startswith("GPU 5 is out of service: remediating by run")
    fleet_wide, _ = fleet.run("status")
    assert fleet_wide.exit_code == EXIT_OUT_OF_SERVICE


def test_a_drained_gpu_exits_3_until_it_is_undrained(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    drained, _ = fleet.run("drain", agent.name, "5", "--reason", "fan noise")
    assert drained.exit_code == 0, drained.output
    agent.tick()
    held, _ = fleet.run("status", agent.name)
    assert held.exit_code == EXIT_OUT_OF_SERVICE, held.output
    assert held.output.splitlines()[0].startswith(
        f"{agent.name}: out_of_service · 7/8 GPUs healthy · 7/8 GPUs in service"
    )
    row5 = held.output.splitlines()[2 + 5]
    assert row5.split()[1] == "out_of_service" and "drained by run" in row5
    table, _ = fleet.run("status")
    assert table.exit_code == EXIT_OUT_OF_SERVICE
    row = next(line for line in table.output.splitlines() if line.startswith(agent.name))
    assert "7/8 GPUs in service" in row and "gpu 5: drained (run " in row

    undrained, _ = fleet.run("undrain", agent.name, "5", "--reason", "fan replaced")
    assert undrained.exit_code == 0, undrained.output
    agent.tick()
    back, _ = fleet.run("status", agent.name)
    assert back.exit_code == EXIT_OK, back.output
    assert back.output.splitlines()[0].startswith(
        f"{agent.name}: healthy · 8/8 GPUs healthy · 8/8 GPUs in service"
    )


def test_a_problem_in_service_outranks_gpus_out_of_service(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    fleet.run("drain", agent.name, "5", "--reason", "fan noise")
    agent.sim.inject(2, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    result, _ = fleet.run("status", agent.name)
    assert result.exit_code == EXIT_UNHEALTHY, result.output
    assert result.output.startswith(f"{agent.name}: unhealthy · 6/8 GPUs healthy · 7/8 GPUs")


def test_the_fleet_table_prints_no_stray_lines(fleet: Fleet) -> None:
    agent = fleet.agents[0]
    fleet.run("drain", agent.name, "5", "--reason", "fan noise")
    agent.tick()
    table, _ = fleet.run("status")
    lines = table.output.splitlines()
    assert len(lines) == 4, table.output  # header, two nodes, the summary
    assert lines[-1].endswith("· 15/16 GPUs healthy · 15/16 GPUs in service")


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([("healthy", 8)], EXIT_OK),
        ([("healthy", 8), ("out_of_service", 7)], EXIT_OUT_OF_SERVICE),
        ([("healthy", 7)], EXIT_OUT_OF_SERVICE),  # an older agent's healthy row, GPUs out
        ([("out_of_service", 0), ("degraded", 8)], EXIT_UNHEALTHY),
        ([("out_of_service", 0), ("unknown", 8)], EXIT_UNHEALTHY),
        ([("unhealthy", 8), ("out_of_service", 4), ("unreachable", 0)], EXIT_UNREACHABLE),
    ],
)
def test_exit_code_precedence_is_unreachable_then_unhealthy_then_out_of_service(
    rows: list[tuple[str, int]], code: int
) -> None:
    from fleetd.cli.fleetctl_status import FleetRow, fleet_exit_code
    from fleetd.registry.summary import NodeSummary

    def row(i: int, health: str, serving: int) -> FleetRow:
        if health == "unreachable":
            return FleetRow(f"n{i}", None, "unreachable", error="connection refused")
        summary = NodeSummary(
            f"n{i}", health, 8, 8, None, None, 0, 0, 0, "-", False, 0.0, gpus_in_service=serving
        )
        return FleetRow(f"n{i}", None, "ok", summary)

    assert fleet_exit_code([row(i, h, s) for i, (h, s) in enumerate(rows)]) == code
