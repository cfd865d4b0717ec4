"""Firmware drift end to end: three real agents on the simulator publish the firmware blocks
amdsmi_get_fw_info gives at discovery; one node flashed ahead is the minority that
``fleetctl drift`` (a real process) lists, block by block, and FleetdVersionDrift holds for."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from tests.api.agent import Agent, start_agent

pytestmark = pytest.mark.postgres

PSP_SOSDRV = 30
FLEETCTL = Path(sys.executable).parent / "fleetctl"


@pytest.fixture
def agents(tmp_path: Path, pg_url: str) -> Iterator[list[Agent]]:
    start = time.time()
    registry = {"url": pg_url, "timeout": 1, "drift_check_interval": 0}
    out = []
    try:
        for i in range(1, 4):
            name = f"gpu-node-00{i}"
            out.append(
                start_agent(tmp_path / name, name=name, clock=FakeClock(start), registry=registry)
            )
        yield out
    finally:
        for agent in out:
            agent.stop()


def test_a_node_flashed_ahead_is_firmware_drift(agents: list[Agent], pg_url: str) -> None:
    odd = agents[2]
    odd.sim.set_firmware(None, PSP_SOSDRV, 0x00400144)  # the PSP flashed on every GPU…
    odd.daemon.backend.rediscover()  # …and seen at the next discovery (a driver reload)
    for _ in range(2):  # the second beat reads back every row the first one wrote
        for agent in agents:
            beat = agent.daemon.heartbeat
            assert beat is not None and beat.beat(agent.clock.now()), beat and beat.last_error
    drift = odd.daemon.heartbeat.readings(odd.clock.now())  # type: ignore[union-attr]
    firmware = [r for r in drift if dict(r.labels).get("item") == "firmware"]
    assert [r.value for r in firmware] == [1.0]
    assert "PSP_SOSDRV=00.40.01.44" in dict(firmware[0].labels)["version"]

    report = subprocess.run(
        [str(FLEETCTL), "drift", "--db", pg_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert report.returncode == 1, report
    (row,) = [line.split() for line in report.stdout.splitlines() if line.startswith("MI355X")]
    assert row == [
        "MI355X", "3", "firmware", "PSP_SOSDRV=00.40.01.43", "PSP_SOSDRV=00.40.01.44", "1",
        "gpu-node-003",
    ]  # fmt: skip
    document = subprocess.run(
        [str(FLEETCTL), "drift", "--db", pg_url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    (entry,) = json.loads(document.stdout)["drift"]
    assert entry["component"] == "firmware" and entry["nodes"] == ["gpu-node-003"]
    assert entry["version"].startswith("CP_ME=40 CP_MEC1=30 CP_PFP=40 PM=00.85.100.00 ")


def test_a_registry_of_the_previous_fleetd_takes_every_firmware_block(pg_url: str) -> None:
    """The previous fleetd created ``firmware_version`` as VARCHAR(255); a real board lists
    some twenty blocks (several hundred characters): the column becomes TEXT."""
    from sqlalchemy import MetaData, String, Table, create_engine, inspect

    from fleetd.registry.drift import NodeVersions
    from fleetd.registry.store import RegistryPublisher, nodes_table
    from tests.registry.test_registry import fake_status

    old = MetaData()
    columns = [c._copy() for c in nodes_table.columns]
    for column in columns:
        if column.name == "firmware_version":
            column.type = String(255)
    Table(nodes_table.name, old, *columns)
    engine = create_engine(pg_url)
    publisher = RegistryPublisher(pg_url)
    try:
        old.create_all(engine)
        blocks = " ".join(f"BLOCK_{i:02d}=00.36.02.{i:02d}" for i in range(24))
        assert len(blocks) > 255
        publisher.publish(
            fake_status("gpu-node-001"), 1.0, versions=NodeVersions("MI300X", firmware=blocks)
        )
        kinds = {c["name"]: c["type"] for c in inspect(engine).get_columns(nodes_table.name)}
        assert getattr(kinds["firmware_version"], "length", None) is None  # TEXT now
        with engine.connect() as conn:
            stored = conn.exec_driver_sql(
                "SELECT firmware_version FROM fleet_nodes WHERE node = 'gpu-node-001'"
            ).scalar_one()
        assert stored == blocks
    finally:
        publisher.close()
        engine.dispose()
