"""The fleet registry on the local PostgreSQL: agents publish, fleetctl reads the fleet."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetd.api.status import node_status
from fleetd.registry.config import RegistryConfig
from fleetd.registry.heartbeat import RegistryHeartbeat
from fleetd.registry.reader import RegistryError, RegistryReader
from fleetd.registry.store import RegistryPublisher
from fleetd.registry.summary import summarize
from fleetd.remedy.config import FleetConfig
from fleetd.remedy.lease import SqlFleetLease
from tests.api.agent import POLL_INTERVAL, Agent, start_agent
from tests.fleetctl.conftest import run_fleetctl

pytestmark = pytest.mark.postgres


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    running = start_agent(tmp_path / "agent", name="gpu-node-101")
    running.tick(3)
    try:
        yield running
    finally:
        running.stop()


def status_of(agent: Agent) -> dict[str, object]:
    return node_status(agent.services, agent.clock.now())


def fake_status(name: str, health: str = "healthy", *, healthy: int = 8) -> dict[str, object]:
    """A status document as an agent serves it (the fields the registry reads)."""
    return {
        "node": name,
        "version": "0.1.0",
        "health": {
            "state": health,
            "data_age_s": 1.0,
            "reasons": [] if health == "healthy" else ["gpu 3: " + health],
        },
        "data_age_s": 1.0,
        "gpus_total": 8,
        "gpus_healthy": healthy,
        "hottest_junction_c": 71.0,
        "power_w": 5600.0,
        "alerts": {"critical": 0 if health == "healthy" else 1, "warning": 0, "info": 0},
        "remediation": {"available": True, "in_progress": False, "active": [], "held": []},
    }  # fmt: skip


def test_an_agent_publishes_its_row_and_fleetctl_reads_it_back(pg_url: str, agent: Agent) -> None:
    publisher = RegistryPublisher(pg_url, address=agent.url)
    try:
        status = status_of(agent)
        row = publisher.publish(status, agent.clock.now())
    finally:
        publisher.close()
    assert row == summarize(status)
    reader = RegistryReader(pg_url)
    try:
        (node,) = reader.fleet(agent.clock.now() + 5, stale_after=60)
    finally:
        reader.close()
    assert node.summary == summarize(status)
    assert node.summary.health == "healthy" and node.summary.gpus_total == 8
    assert node.address == agent.url
    assert node.heartbeat_age_s == 5 and node.stale is False


def test_publishing_again_updates_the_one_row(pg_url: str, agent: Agent) -> None:
    publisher = RegistryPublisher(pg_url, address=agent.url)
    reader = RegistryReader(pg_url)
    try:
        publisher.publish(status_of(agent), agent.clock.now())
        agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
        agent.clock.advance(POLL_INTERVAL)
        agent.tick(2)
        publisher.publish(status_of(agent), agent.clock.now())
        (node,) = reader.fleet(agent.clock.now(), stale_after=60)
        assert node.summary.health == "unhealthy" and node.summary.alerts_critical == 1
        assert node.heartbeat_at == agent.clock.now()
        (late,) = reader.fleet(agent.clock.now() + 61, stale_after=60)
        assert late.stale is True
        assert reader.address_of("gpu-node-101") == agent.url
        assert reader.address_of("nobody") is None
    finally:
        publisher.close()
        reader.close()


def test_fleetctl_status_from_the_registry(pg_url: str) -> None:
    now = time.time()  # fleetctl judges staleness against the real clock
    publisher = RegistryPublisher(pg_url)
    try:
        for i in range(1, 4):
            publisher.publish(fake_status(f"gpu-node-{i:03d}"), now)
        ok, _ = run_fleetctl("status", "--db", pg_url)
        assert ok.exit_code == 0, ok.output
        assert "3 nodes: 3 healthy · 24/24 GPUs healthy" in ok.output
        assert "5600W" in ok.output
        publisher.publish(fake_status("gpu-node-002", "unhealthy", healthy=7), now)
        sick, _ = run_fleetctl("status", "--db", pg_url)
        assert sick.exit_code == 1
        row = next(line for line in sick.output.splitlines() if line.startswith("gpu-node-002"))
        assert row.split()[1:3] == ["unhealthy", "7/8"]
        publisher.publish(fake_status("gpu-node-004"), now - 600)
        stale, _ = run_fleetctl("status", "--db", pg_url, "--stale-after", "60")
        assert stale.exit_code == 2
        row = next(line for line in stale.output.splitlines() if line.startswith("gpu-node-004"))
        assert row.split()[1] == "stale"
        assert "stale" in row and "last heartbeat 10m ago" in row
        document, _ = run_fleetctl("status", "--db", pg_url, "--json")
        assert '"stale"' in document.output
    finally:
        publisher.close()


def test_the_fleet_wide_cap_and_breaker_show_in_the_registry_view(pg_url: str) -> None:
    publisher = RegistryPublisher(pg_url)
    lease = SqlFleetLease.shared(
        pg_url, FleetConfig.model_validate({"breaker": {"max_failures": 2}})
    )
    try:
        publisher.publish(fake_status("gpu-node-001"), time.time())
        assert lease.acquire(
            node="gpu-node-001", run_id="r1", gpus=range(8), manual=False, now=1.0
        ).granted
        lease.record_failure(node="gpu-node-001", gpu=3, run_id="r1", now=2.0)
        lease.record_failure(node="gpu-node-002", gpu=5, run_id="r2", now=3.0)
        result, _ = run_fleetctl("status", "--db", pg_url)
        assert "fleet remediation: 8 GPUs out of service" in result.output
        assert "circuit breaker OPEN: 2 GPUs failed" in result.output
    finally:
        lease.dispose()
        publisher.close()


def test_commands_find_agents_through_the_registry(pg_url: str, agent: Agent) -> None:
    publisher = RegistryPublisher(pg_url, address=agent.url)
    try:
        publisher.publish(status_of(agent), time.time())
    finally:
        publisher.close()
    result, _ = run_fleetctl("explain", "gpu-node-101", "2", "--db", pg_url)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("GPU 2 is healthy")
    unknown, _ = run_fleetctl("explain", "gpu-node-999", "2", "--db", pg_url)
    assert unknown.exit_code == 2 and "not in the registry" in unknown.output


def test_the_daemons_heartbeat_job(pg_url: str, agent: Agent) -> None:
    config = RegistryConfig.model_validate({"url": pg_url})
    heartbeat = RegistryHeartbeat(config, agent.services, address=agent.url)
    try:
        assert heartbeat.beat(agent.clock.now()) is True
    finally:
        heartbeat.close()
    reader = RegistryReader(pg_url)
    try:
        (node,) = reader.fleet(agent.clock.now(), stale_after=60)
    finally:
        reader.close()
    assert node.summary.node == "gpu-node-101" and node.address == agent.url

    down = RegistryConfig.model_validate({"url": "postgresql://x:pw@127.0.0.1:1/x", "timeout": 1})
    failing = RegistryHeartbeat(down, agent.services, address=agent.url)
    try:
        assert failing.beat(agent.clock.now()) is False
        assert failing.beat(agent.clock.now()) is False
        assert failing.failures_total == 2 and "pw" not in (failing.last_error or "")
    finally:
        failing.close()


def test_the_fleet_limit_tables_are_the_ones_remediation_writes() -> None:
    from fleetd.registry.reader import BREAKER_TABLE, LEASES_TABLE, NODE_COLUMNS, NODES_TABLE
    from fleetd.registry.store import nodes_table
    from fleetd.remedy.journal import breaker_table, leases_table

    assert (leases_table.name, breaker_table.name) == (LEASES_TABLE, BREAKER_TABLE)
    assert nodes_table.name == NODES_TABLE
    assert {c.name for c in nodes_table.columns} == set(NODE_COLUMNS)


def test_an_unreachable_registry_is_a_clear_error_without_the_password() -> None:
    url = "postgresql+psycopg2://fleet:hunter2secret@127.0.0.1:1/fleet"
    with pytest.raises(RegistryError) as caught:
        RegistryPublisher(url, timeout=1).publish(fake_status("x"), 1.0)
    assert "hunter2secret" not in str(caught.value)
    result, _ = run_fleetctl("status", "--db", url)
    assert result.exit_code == 2
    assert "cannot read the registry" in result.output and "hunter2secret" not in result.output


def test_a_sqlite_registry_for_a_single_host(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    publisher = RegistryPublisher(url, address="http://a:9477")
    reader = RegistryReader(url)
    try:
        publisher.publish(fake_status("a"), 100.0)
        publisher.publish(fake_status("b", "degraded", healthy=7), 100.0)
        nodes = reader.fleet(130.0, stale_after=60)
        assert [(n.summary.node, n.summary.health, n.stale) for n in nodes] == [
            ("a", "healthy", False),
            ("b", "degraded", False),
        ]
        assert reader.address_of("a") == "http://a:9477"
        assert reader.limits() is None
    finally:
        publisher.close()
        reader.close()


def test_a_malformed_url_is_reported_without_its_password() -> None:
    with pytest.raises(RegistryError) as caught:
        RegistryPublisher("postgresql+nosuchdriver://fleet:s3cr3t-pw@db/fleet")
    assert "s3cr3t-pw" not in str(caught.value) and "cannot use the registry URL" in str(
        caught.value
    )


def test_two_publishers_creating_the_table_at_once(pg_url: str) -> None:
    first, second = RegistryPublisher(pg_url), RegistryPublisher(pg_url)
    try:
        first.ensure_schema()
        second.ensure_schema()
        first.publish(fake_status("a"), 1.0)
        second.publish(fake_status("b"), 1.0)
    finally:
        first.close()
        second.close()
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        assert conn.execute(text("select count(*) from fleet_nodes")).scalar() == 2
    engine.dispose()


def test_a_registry_table_from_before_out_of_service_reads_and_is_upgraded(
    tmp_path: Path,
) -> None:
    """An older fleetd created the table without gpus_in_service: fleetctl still reads it,
    and the first newer agent adds the column."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    old = create_engine(url)
    with old.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE fleet_nodes (node VARCHAR(255) PRIMARY KEY, address VARCHAR(512),"
                " heartbeat_at FLOAT NOT NULL, health VARCHAR(16) NOT NULL, gpus_total INTEGER"
                " NOT NULL, gpus_healthy INTEGER NOT NULL, hottest_junction_c FLOAT, power_w"
                " FLOAT, alerts_critical INTEGER NOT NULL, alerts_warning INTEGER NOT NULL,"
                " alerts_info INTEGER NOT NULL, remediation VARCHAR(512) NOT NULL,"
                " remediation_active BOOLEAN NOT NULL, data_age_s FLOAT, reasons TEXT NOT NULL,"
                " version VARCHAR(64) NOT NULL)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO fleet_nodes VALUES ('old', NULL, 100.0, 'healthy', 8, 8, NULL,"
                " NULL, 0, 0, 0, '-', 0, 1.0, '[]', '0.0.9')"
            )
        )
    old.dispose()
    reader = RegistryReader(url)
    publisher = RegistryPublisher(url, address="http://new:9477")
    try:
        (node,) = reader.fleet(110.0, stale_after=60)
        assert node.summary.gpus_in_service is None and node.summary.serving == 8
        drained = {**fake_status("new", "out_of_service", healthy=7), "gpus_in_service": 7}
        publisher.publish(drained, 110.0)
        reader.close()
        by_name = {n.summary.node: n.summary for n in reader.fleet(110.0, stale_after=60)}
        assert by_name["new"].health == "out_of_service"
        assert by_name["new"].gpus_in_service == 7 and by_name["old"].serving == 8
    finally:
        publisher.close()
        reader.close()
