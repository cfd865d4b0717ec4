"""Remediation waves through the registry: the mode per label group, taken at each heartbeat."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetd.alert.matchers import parse_matcher
from fleetd.clock import FakeClock
from fleetd.registry.config import RegistryConfig
from fleetd.registry.heartbeat import RegistryHeartbeat
from fleetd.registry.modes import FleetMode, effective_mode, mode_for
from tests.api.agent import Agent, start_agent
from tests.fleetctl.conftest import run_fleetctl

LABELS = {
    "gpu-node-001": {"cluster": "eu1", "rack": "r1"},
    "gpu-node-002": {"cluster": "eu1", "rack": "r2"},
    "gpu-node-003": {"cluster": "us2", "rack": "r1"},
}


def wave(at: float, mode: str, *matchers: str) -> FleetMode:
    return FleetMode(f"w{at}", tuple(parse_matcher(m) for m in matchers), mode, "a", "", at)


def test_the_newest_wave_naming_a_node_sets_its_mode() -> None:
    waves = [wave(1, "dry-run", 'rack="r2"'), wave(2, "on", 'cluster="eu1"'), wave(3, "local")]
    labels = {"cluster": "eu1", "rack": "r2"}
    assert mode_for(waves[:1], "n2", labels) == "dry-run"
    assert mode_for(waves[:2], "n2", labels) == "on"
    assert mode_for(waves, "n2", labels) is None  # local: back to fleetd.yaml
    assert mode_for(waves[:2], "n3", {"cluster": "us2"}) is None
    assert effective_mode("dry-run", "on") == "on" and effective_mode("dry-run", None) == "dry-run"
    assert effective_mode("off", "on") == "off"  # fleetd.yaml's off is the node's veto


@pytest.fixture
def nodes(tmp_path: Path, pg_url: str) -> Iterator[list[tuple[Agent, RegistryHeartbeat]]]:
    start = time.time()
    out = []
    try:
        for name, labels in LABELS.items():
            agent = start_agent(tmp_path / name, name=name, clock=FakeClock(start), labels=labels)
            assert agent.remedy is not None
            beat = RegistryHeartbeat(
                RegistryConfig.model_validate({"url": pg_url, "timeout": 10}),
                agent.services,
                address=agent.url,
                remediation_mode=agent.remedy.set_fleet_mode,  # type: ignore[union-attr]
            )
            out.append((agent, beat))
        yield out
    finally:
        for agent, beat in out:
            beat.close()
            agent.stop()


def modes(nodes: list[tuple[Agent, RegistryHeartbeat]]) -> list[str]:
    for agent, beat in nodes:
        assert beat.beat(agent.clock.now())
    return [agent.remedy.status().mode for agent, _ in nodes]  # type: ignore[union-attr]


@pytest.mark.postgres
def test_a_rollout_in_two_waves(nodes: list[tuple[Agent, RegistryHeartbeat]], pg_url: str) -> None:
    assert modes(nodes) == ["dry-run", "dry-run", "dry-run"]
    first, _ = run_fleetctl(
        "remediation", "mode", "on", "-n", 'rack="r2"', "--db", pg_url, "-r", "wave 1: one rack"
    )
    assert first.exit_code == 0, first.output
    assert 'mode on for rack="r2" (1 of 3 registered nodes)' in first.output
    assert modes(nodes) == ["dry-run", "on", "dry-run"]
    second, _ = run_fleetctl(
        "remediation", "mode", "on", "-n", 'cluster="eu1"', "--db", pg_url, "-r", "wave 2: eu1"
    )
    assert "(2 of 3 registered nodes)" in second.output
    assert modes(nodes) == ["on", "on", "dry-run"]
    listed, _ = run_fleetctl("remediation", "waves", "--db", pg_url, "--json")
    document = json.loads(listed.output)
    assert [w["mode"] for w in document["waves"]] == ["on", "on"]
    assert document["nodes_by_mode"] == {"on": 2, "local": 1}

    # cut off from the registry: the node keeps the mode it last read
    with create_engine(pg_url).begin() as conn:
        conn.execute(text("ALTER TABLE fleet_remediation_modes RENAME TO gone"))
    agent, beat = nodes[0]
    assert beat.beat(agent.clock.now()) is False
    assert agent.remedy.status().mode == "on"  # type: ignore[union-attr]
    with create_engine(pg_url).begin() as conn:
        conn.execute(text("ALTER TABLE gone RENAME TO fleet_remediation_modes"))
    back, _ = run_fleetctl(
        "remediation", "mode", "local", "--db", pg_url, "-n", 'node="gpu-node-001"', "-r", "back"
    )
    assert back.exit_code == 0, back.output
    assert modes(nodes) == ["dry-run", "on", "dry-run"]
    bad, _ = run_fleetctl("remediation", "mode", "on", "-n", "rack", "--db", pg_url, "-r", "x")
    assert bad.exit_code == 1 and "node matcher 1 ('rack')" in bad.output


@pytest.mark.postgres
def test_a_node_off_in_its_own_config_stays_off(tmp_path: Path, pg_url: str) -> None:
    agent = start_agent(tmp_path / "n", name="gpu-node-009", with_remediation=False)
    beat = RegistryHeartbeat(
        RegistryConfig.model_validate({"url": pg_url}),
        agent.services,
        address=agent.url,
        remediation_mode=agent.remedy.set_fleet_mode,  # type: ignore[union-attr]
    )
    try:
        done, _ = run_fleetctl("remediation", "mode", "on", "--db", pg_url, "-r", "everyone")
        assert done.exit_code == 0, done.output
        assert beat.beat(agent.clock.now()) and beat.fleet_mode == "on"
        assert agent.remedy.status().mode == "off"  # type: ignore[union-attr]
    finally:
        beat.close()
        agent.stop()
