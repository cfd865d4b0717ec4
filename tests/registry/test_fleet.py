"""Fleet operations on the local PostgreSQL with three real agents (fake clocks): a fleet
silence added by fleetctl and applied by each heartbeat, kept through a registry outage and a
restart, dropped when expired; version drift seen by fleetctl and raised on the odd node."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from fleetd.clock import FakeClock
from fleetd.registry.config import RegistryConfig
from fleetd.registry.drift import NodeVersions
from fleetd.registry.heartbeat import RegistryHeartbeat
from fleetd.registry.reader import RegistryReader
from fleetd.registry.silences import FleetSilenceBook, parse_matchers
from tests.api.agent import Agent, start_agent
from tests.fleetctl.conftest import run_fleetctl

pytestmark = pytest.mark.postgres

ECC = "GpuEccUncorrectableError"
LABELS = {
    "gpu-node-001": {"cluster": "eu1", "rack": "r1"},
    "gpu-node-002": {"cluster": "eu1", "rack": "r2"},
    "gpu-node-003": {"cluster": "us2", "rack": "r1"},
}


@dataclass
class Member:
    agent: Agent
    heartbeat: RegistryHeartbeat
    versions: NodeVersions

    def beat(self) -> bool:
        return self.heartbeat.beat(self.agent.clock.now())

    def silenced(self) -> set[str]:
        """Rules of the firing alerts some silence mutes on this node."""
        held = self.agent.dispatcher.alerts(self.agent.clock.now())
        return {h.alert.rule for h in held if h.silenced_by and h.alert.firing}


def versions(driver: str) -> NodeVersions:
    return NodeVersions(
        "MI355X", driver=driver, amdsmi="7.0.2/26.1.0", vbios="022.050", fleetd="0.1.0"
    )


def heartbeat(
    member_agent: Agent, url: str, tmp: Path, drivers: dict[str, str]
) -> RegistryHeartbeat:
    # the drift check at every beat (by default every 5 minutes)
    config = RegistryConfig.model_validate({"url": url, "timeout": 1, "drift_check_interval": 0})
    name = member_agent.name
    return RegistryHeartbeat(
        config,
        member_agent.services,
        address=member_agent.url,
        versions=lambda: versions(drivers[name]),
        cache_path=tmp / f"{name}-fleet-silences.json",
    )


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[list[Member]]:
    # fleetctl stamps silences and acknowledgements with the real clock: the agents' clocks
    # run a little ahead of it, as a fleet's do of each other, so a silence added during the
    # test is never in the future for them, however slowly a loaded machine runs the setup
    start = time.time() + 30
    drivers = {"gpu-node-001": "6.14.14", "gpu-node-002": "6.14.14", "gpu-node-003": "6.12.1"}
    members = []
    try:
        for name, labels in LABELS.items():
            agent = start_agent(  # no remediation: its dry-run runs are not the subject here
                tmp_path / name,
                name=name,
                clock=FakeClock(start),
                labels=labels,
                with_remediation=False,
            )
            members.append(
                Member(agent, heartbeat(agent, pg_url, tmp_path, drivers), versions(drivers[name]))
            )
        for m in members:
            m.agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
            m.agent.tick(3)
        yield members
    finally:
        for m in members:
            m.heartbeat.close()
            m.agent.stop()


def test_a_fleet_silence_reaches_the_nodes_it_names_within_one_heartbeat(
    fleet: list[Member], pg_url: str
) -> None:
    assert all(m.beat() for m in fleet)
    assert all(m.silenced() == set() for m in fleet)
    added, _ = run_fleetctl(
        "silence", "add", "--fleet", "--db", pg_url, "-n", 'cluster="eu1"',
        f'alertname="{ECC}"', "--duration", "2h", "-r", "rack swap", "--author", "alice",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    silence_id = added.output.split()[2]
    assert 'on cluster="eu1"' in added.output
    assert all(m.beat() for m in fleet)
    state = [
        (
            m.agent.clock.now(),
            [(h.alert.rule, h.alert.firing, h.silenced_by) for h in m.agent.dispatcher.alerts(0)],
            [(s.starts_at, s.ends_at) for s in m.agent.dispatcher.fleet_silences()],
        )
        for m in fleet
    ]
    assert [m.silenced() for m in fleet] == [{ECC}, {ECC}, set()], state
    (local,) = fleet[0].agent.dispatcher.fleet_silences()
    assert local.id == f"fleet:{silence_id}" and local.created_by == "alice"
    # the node lists it with its own silences (fleetctl silence list NODE, the API)
    listed_on_node = requests.get(fleet[0].agent.url + "/api/v1/silences", timeout=10).json()
    assert [s["id"] for s in listed_on_node["silences"]] == [f"fleet:{silence_id}"]

    listed, _ = run_fleetctl("silence", "list", "--fleet", "--db", pg_url)
    assert silence_id in listed.output and 'cluster="eu1"' in listed.output
    # the firing alerts each agent published, from the registry in one query
    alerts, _ = run_fleetctl("alerts", "--db", pg_url)
    assert alerts.exit_code == 0, alerts.output
    rows = [line.split() for line in alerts.output.splitlines() if ECC in line]
    assert sorted((r[0], "silenced" in r) for r in rows) == [
        ("gpu-node-001", True),
        ("gpu-node-002", True),
        ("gpu-node-003", False),
    ]

    expired, _ = run_fleetctl(
        "silence", "expire", "--fleet", silence_id, "--db", pg_url, "-r", "swap done"
    )
    assert expired.exit_code == 0, expired.output
    assert all(m.beat() for m in fleet)
    assert all(m.silenced() == set() for m in fleet)
    audit, _ = run_fleetctl("silence", "audit", "--db", pg_url, "--json")
    entries = json.loads(audit.output)["audit"]
    assert [(e["action"], e["subject"]) for e in entries] == [
        ("expire", silence_id),
        ("add", silence_id),
    ]
    assert "@" in entries[0]["actor"] and entries[0]["detail"]["comment"] == "swap done"


def test_a_fleet_acknowledgement_covers_the_episodes_firing_when_it_was_made(
    fleet: list[Member], pg_url: str
) -> None:
    acked, _ = run_fleetctl(
        "ack", "--fleet", "--db", pg_url, "-n", 'cluster="us2"', f'alertname="{ECC}"',
        "-r", "on it, ticket 77",
    )  # fmt: skip
    assert acked.exit_code == 0, acked.output
    assert all(m.beat() for m in fleet)
    now = fleet[2].agent.clock.now()
    states = [
        {h.alert.rule: h.acknowledged for h in m.agent.dispatcher.alerts(now) if h.alert.firing}
        for m in fleet
    ]
    assert [s[ECC] for s in states] == [False, False, True]
    (ack,) = fleet[2].agent.dispatcher.acknowledgements()
    assert ack.comment == "on it, ticket 77" and "(fleet " in ack.author
    assert fleet[2].heartbeat.acknowledged_total == 1
    assert all(m.beat() for m in fleet) and fleet[2].heartbeat.acknowledged_total == 1  # once
    alerts, _ = run_fleetctl("alerts", "--db", pg_url, "--json")
    by_node = {a["node"]: a["acknowledged"] for a in json.loads(alerts.output)["alerts"]}
    assert by_node == {"gpu-node-001": False, "gpu-node-002": False, "gpu-node-003": True}
    audit, _ = run_fleetctl("silence", "audit", "--db", pg_url, "--json")
    (entry,) = json.loads(audit.output)["audit"]
    assert entry["action"] == "ack" and entry["detail"]["node_matchers"] == ['cluster="us2"']
    refused, _ = run_fleetctl("ack", "--fleet", "--db", pg_url, 'gpu=~".*"', "-r", "x")
    assert refused.exit_code == 1 and "every alert of the fleet" in refused.output


def test_an_invalid_matcher_is_refused_with_its_position(pg_url: str) -> None:
    bad, _ = run_fleetctl(
        "silence", "add", "--fleet", "--db", pg_url, "-n", 'cluster="eu1"', "-n", "rack",
        f'alertname="{ECC}"', "-r", "x",
    )  # fmt: skip
    assert bad.exit_code == 1
    assert "refused: node matcher 2 ('rack')" in bad.output
    regex, _ = run_fleetctl(
        "silence", "add", "--fleet", "--db", pg_url, 'gpu="3"', 'alertname=~"Gpu(Ecc"', "-r", "x"
    )
    assert regex.exit_code == 1 and "alert matcher 2" in regex.output
    everything, _ = run_fleetctl("silence", "add", "--fleet", "--db", pg_url, "-r", "x")
    assert everything.exit_code == 1 and "at least one" in everything.output
    nodb, _ = run_fleetctl("silence", "add", "--fleet", 'gpu="3"', "-r", "x")
    assert nodb.exit_code == 2 and "--db" in nodb.output


def test_cut_off_from_the_registry_an_agent_keeps_its_fleet_silences_until_they_end(
    fleet: list[Member], pg_url: str, tmp_path: Path
) -> None:
    member = fleet[0]
    now = member.agent.clock.now()
    book = FleetSilenceBook(pg_url)
    try:
        silence = book.add(
            parse_matchers(['rack="r1"'], "node"),
            parse_matchers([f'alertname="{ECC}"'], "alert"),
            starts_at=now,
            ends_at=now + 600,
            created_by="alice",
            comment="maintenance",
            actor="alice@host",
            now=now,
        )
        assert member.beat() and member.silenced() == {ECC}
        # the registry goes away (the table cannot be read): the silence stays, and an
        # expiry the agent cannot see does not end it early
        with create_engine(pg_url).begin() as conn:
            conn.execute(text("ALTER TABLE fleet_silences RENAME TO fleet_silences_gone"))
        assert member.beat() is False and member.silenced() == {ECC}
        # a restart during the outage keeps it too (the cache file), never past its end
        member.heartbeat.close()
        down = RegistryConfig.model_validate({"url": "postgresql://x@127.0.0.1:1/x", "timeout": 1})
        member.agent.dispatcher.set_fleet_silences(())  # what a restarted dispatcher has
        member.heartbeat = RegistryHeartbeat(
            down,
            member.agent.services,
            address=member.agent.url,
            cache_path=tmp_path / "gpu-node-001-fleet-silences.json",
        )
        assert member.beat() is False and member.silenced() == {ECC}
        labels = (("alertname", ECC), ("gpu", "3"))

        def muted(at: float) -> bool:
            return any(s.mutes(labels, at) for s in member.agent.dispatcher.fleet_silences())

        assert muted(now + 599) and not muted(now + 600)  # ends when it said, not later
        member.agent.clock.advance(600)
        assert member.beat() is False and not muted(member.agent.clock.now())
        assert member.heartbeat.failures_total == 2
        assert silence.silence.ends_at == now + 600
    finally:
        book.close()


def test_drift_is_listed_by_fleetctl_and_raised_on_the_odd_node(
    fleet: list[Member], pg_url: str
) -> None:
    for _ in range(2):  # the first beats publish; the second ones read the group back
        assert all(m.beat() for m in fleet)
    every_5m = RegistryConfig.model_validate({"url": pg_url})
    assert every_5m.drift_check_interval == 300
    odd = fleet[2]
    drift = {
        dict(r.labels)["item"]: r.value
        for r in odd.heartbeat.readings(odd.agent.clock.now())
        if r.metric == "fleetd_version_drift"
    }
    assert drift == {"driver": 1.0, "amdsmi": 0.0, "vbios": 0.0, "fleetd": 0.0}
    assert all(
        r.value == 0.0
        for r in fleet[0].heartbeat.readings(0.0)
        if r.metric == "fleetd_version_drift"
    )
    # the daemon puts them in the window the rules read: the rule holds (it fires after its
    # 10 minutes: rules/tests/fleetd_test.yaml) and /metrics exports them
    odd.agent.daemon.heartbeat = odd.heartbeat
    try:
        odd.agent.tick(2)
        (alert,) = [a for a in odd.agent.engine.alerts() if a.key.rule == "FleetdVersionDrift"]
        assert alert.state.value == "pending" and alert.severity.value == "info"
        assert dict(alert.key.labels)["version"] == "6.12.1"
        metrics = odd.agent.daemon.exporter.render().decode()
        assert 'fleetd_version_drift{item="driver",majority="6.14.14",version="6.12.1"} 1.0' in (
            metrics
        )
    finally:
        odd.agent.daemon.heartbeat = None

    report, _ = run_fleetctl("drift", "--db", pg_url)
    assert report.exit_code == 1, report.output
    assert "3 nodes by SKU (MI355X: 3)" in report.output
    (row,) = [line.split() for line in report.output.splitlines() if line.startswith("MI355X")]
    assert row == ["MI355X", "3", "driver", "6.14.14", "6.12.1", "1", "gpu-node-003"]
    tolerant, _ = run_fleetctl("drift", "--db", pg_url, "--tolerance", "0.3")
    assert tolerant.exit_code == 0 and "no drift" in tolerant.output


def test_the_daemon_wires_versions_and_the_silence_cache(tmp_path: Path, pg_url: str) -> None:
    registry = {"url": pg_url, "timeout": 10}
    agent = start_agent(tmp_path / "n", name="gpu-node-101", registry=registry)
    try:
        agent.tick()
        assert agent.daemon.heartbeat is not None
        agent.daemon.beat()
        reader = RegistryReader(pg_url)
        (node,) = reader.fleet(agent.clock.now(), stale_after=60)
        assert node.versions is not None and node.versions.sku == "MI355X"
        assert node.versions.driver and node.versions.amdsmi == "7.0.2/26.1.0"
        firmware = node.versions.firmware or ""  # amdsmi_get_fw_info, read at discovery
        assert "PSP_SOSDRV=00.40.01.43" in firmware and "PM=00.85.100.00" in firmware
        assert node.versions.partition == "SPX/NPS1"
        reader.close()
        assert (tmp_path / "n" / "fleet-silences.json").read_text() == "[]"
    finally:
        agent.stop()


def test_an_unreachable_registry_never_stops_local_alerting(tmp_path: Path) -> None:
    dead = {"url": "postgresql://fleetd:pw@127.0.0.1:1/fleet", "timeout": 1}
    agent = start_agent(tmp_path / "n", name="gpu-node-102", registry=dead)
    try:
        agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
        agent.tick(3)
        agent.daemon.beat()
        agent.tick()
        heartbeat = agent.daemon.heartbeat
        assert heartbeat is not None and heartbeat.failures_total == 1
        firing = {a.key.rule for a in agent.engine.alerts() if a.state.value == "firing"}
        assert ECC in firing
        delivered = agent.dispatcher.status(agent.clock.now())
        assert delivered["alerts"]["firing"] >= 1  # type: ignore[index]
    finally:
        agent.stop()
