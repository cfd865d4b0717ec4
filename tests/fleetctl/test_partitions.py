"""``fleetctl status NODE`` against a real CPX agent: physical GPUs with their partitions
folded underneath, listed with ``--partitions``; the first run is fleetctl as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.agent import POLL_INTERVAL, Agent, start_agent
from tests.fleetctl.conftest import run_fleetctl, write_inventory

NODE = "gpu-node-cpx"


@pytest.fixture(scope="module")
def cpx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    tmp = tmp_path_factory.mktemp("cpx")
    agent = start_agent(tmp / "agent", name=NODE, model="MI300X", compute_partition="CPX")
    agent.tick()
    inventory = write_inventory(tmp / "inventory.yaml", [(NODE, agent.address)])
    try:
        yield agent, inventory
    finally:
        agent.stop()


def rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["GPU", "HEALTH"])
    return [line.split() for line in lines[header + 1 :] if line.strip()]


def test_a_cpx_node_shows_a_row_per_physical_gpu_as_a_real_process(
    cpx: tuple[Agent, Path],
) -> None:
    _, inventory = cpx
    env = {**os.environ, "NO_COLOR": "1", "FLEETCTL_INVENTORY": str(inventory)}
    done = subprocess.run(
        [sys.executable, "-m", "fleetd.cli.fleetctl_main", "status", NODE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{NODE}: healthy · 64/64 GPUs healthy")
    assert lines[1] == "8 physical GPUs in CPX+NPS1: 64 partitions (--partitions lists them)"
    table = rows(done.stdout)
    assert [r[:3] for r in table] == [
        [str(p), f"[{8 * p}-{8 * p + 7}]", "healthy"] for p in range(8)
    ]


def test_partitions_are_listed_under_their_physical_gpu_and_a_fault_rolls_up(
    cpx: tuple[Agent, Path],
) -> None:
    agent, inventory = cpx
    env = {"FLEETCTL_INVENTORY": str(inventory)}
    result, _ = run_fleetctl("status", NODE, "--partitions", env=env)
    table = rows(result.output)
    assert len(table) == 8 + 64
    assert table[0][:3] == ["0", "[0-7]", "healthy"]
    assert [r[:4] for r in table[1:9]] == [["└", str(i), f"p{i}", "healthy"] for i in range(8)]

    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    result, _ = run_fleetctl("status", NODE, env=env)
    assert result.exit_code == 1, result.output
    folded = rows(result.output)
    states = [r[2] for r in folded[:8]]
    assert states == ["healthy"] * 3 + ["unhealthy"] + ["healthy"] * 4
    assert "gpu 24: GpuEccUncorrectableError" in " ".join(folded[3])
    result, _ = run_fleetctl("status", NODE, "-p", env=env)
    expanded = rows(result.output)
    third = expanded[3 * 9 : 4 * 9]
    assert third[0][:3] == ["3", "[24-31]", "unhealthy"]
    assert all(r[3] == "unhealthy" for r in third[1:]), third
    as_json = json.loads(run_fleetctl("status", NODE, "--json", env=env)[0].output)
    assert as_json["physical_gpus"][3]["partitions"] == list(range(24, 32))
