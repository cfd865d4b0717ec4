"""A rollout in two waves under a percentage cap, with three real agents on the local
PostgreSQL and fleetctl as a real process: a wave that would newly enable more GPUs of a
cluster than its cap is refused with the numbers; two smaller waves go through."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetd.clock import FakeClock
from tests.api.agent import Agent, start_agent

pytestmark = pytest.mark.postgres

LABELS = {
    "gpu-node-001": {"cluster": "eu1", "rack": "r1"},
    "gpu-node-002": {"cluster": "eu1", "rack": "r2"},
    "gpu-node-003": {"cluster": "us2", "rack": "r1"},
}
FLEETCTL = Path(sys.executable).parent / "fleetctl"


def fleetctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FLEETCTL), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
        check=False,
    )


@pytest.fixture
def agents(tmp_path: Path, pg_url: str) -> Iterator[list[Agent]]:
    start = time.time()
    out = []
    remediation = {
        "mode": "dry-run",
        "fleet": {"max_gpus_out": 64, "caps": [{"group_by": ["cluster"], "max": "50%"}]},
    }
    try:
        for name, labels in LABELS.items():
            out.append(
                start_agent(
                    tmp_path / name,
                    name=name,
                    clock=FakeClock(start),
                    labels=labels,
                    remediation=remediation,
                    registry={"url": pg_url, "timeout": 10},
                )
            )
        yield out
    finally:
        for agent in out:
            agent.stop()


def modes(agents: list[Agent]) -> list[str]:
    for agent in agents:
        beat = agent.daemon.heartbeat
        assert beat is not None and beat.beat(agent.clock.now()), beat and beat.last_error
    return [agent.remedy.status().mode for agent in agents]  # type: ignore[union-attr]


def test_two_waves_under_a_percentage_cap(agents: list[Agent], pg_url: str) -> None:
    assert modes(agents) == ["dry-run", "dry-run", "dry-run"]
    whole = fleetctl("remediation", "mode", "on", "-n", 'cluster="eu1"', "--db", pg_url, "-r", "x")
    assert whole.returncode == 1, whole
    assert whole.stderr.splitlines() == [
        'Error: refused: wave cluster="eu1": 2 of 2 named nodes newly on, 16 GPUs, more than '
        "a cap allows:",
        "  EXCEEDS cluster=eu1: 2 nodes, 16 GPUs newly on; cap 50% of cluster=eu1 (8 of 16 GPUs) "
        "(fleetd.yaml of gpu-node-001)",
        "  ok      the fleet: 2 nodes, 16 GPUs newly on; cap 64 GPUs in the fleet "
        "(fleetd.yaml of gpu-node-001)",  # max_gpus_out
        "a smaller wave, or --force to set it all the same",
    ]
    assert modes(agents) == ["dry-run", "dry-run", "dry-run"]  # nothing was stored

    first = fleetctl(
        "remediation", "mode", "on", "-n", 'rack="r2"', "--db", pg_url, "-r", "wave 1: rack r2"
    )
    assert first.returncode == 0, first
    assert first.stdout.splitlines()[:2] == [
        'wave rack="r2": 1 of 1 named nodes newly on, 8 GPUs',
        "  ok      cluster=eu1: 1 node, 8 GPUs newly on; cap 50% of cluster=eu1 (8 of 16 GPUs) "
        "(fleetd.yaml of gpu-node-002)",
    ]
    assert modes(agents) == ["dry-run", "on", "dry-run"]

    second = fleetctl(
        "remediation", "mode", "on", "-n", 'cluster="eu1"', "--db", pg_url, "-r", "wave 2: eu1"
    )
    assert second.returncode == 0, second  # gpu-node-002 is on already: 8 more GPUs
    assert second.stdout.startswith('wave cluster="eu1": 1 of 2 named nodes newly on, 8 GPUs')
    assert modes(agents) == ["on", "on", "dry-run"]

    # us2 has 8 GPUs: 50% is 4, less than one node; refused, then forced past it
    everyone = fleetctl("remediation", "mode", "on", "--db", pg_url, "-r", "the rest")
    assert everyone.returncode == 1
    assert "cap 50% of cluster=us2 (4 of 8 GPUs)" in everyone.stderr
    forced = fleetctl("remediation", "mode", "on", "--db", pg_url, "-r", "the rest", "--force")
    assert forced.returncode == 0, forced
    assert "(forced past a cap)" in forced.stdout.splitlines()[0]
    assert modes(agents) == ["on", "on", "on"]
    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            comments = [
                json.loads(d)["comment"]
                for d in conn.execute(
                    text("SELECT detail FROM fleet_audit WHERE action = 'mode' ORDER BY seq")
                ).scalars()
            ]
    finally:
        engine.dispose()
    assert comments[:2] == ["wave 1: rack r2", "wave 2: eu1"]
    assert comments[2].startswith("the rest [forced past a cap: wave every node")
    assert "EXCEEDS cluster=us2: 1 node, 8 GPUs newly on" in comments[2]
    # dry-run and off are never refused: they take nothing out of service
    back = fleetctl("remediation", "mode", "dry-run", "--db", pg_url, "-r", "pause the rollout")
    assert back.returncode == 0, back
    assert modes(agents) == ["dry-run", "dry-run", "dry-run"]
