"""Fleet caps per label group and breakers per group: the arithmetic, the lease on the local
PostgreSQL (physical GPUs, a percentage of a cluster, caps set through fleetctl), the schema
upgrade of a registry and of a node database written by the previous fleetd."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy import create_engine, inspect, text

from fleetd.registry.drift import NodeVersions
from fleetd.registry.store import RegistryPublisher
from fleetd.remedy.caps import Cap, Held, Member, cap_refusal, parse_max, wave_loads
from fleetd.remedy.config import FleetConfig
from fleetd.remedy.lease import SqlFleetLease
from fleetd.store import schema
from fleetd.store.db import Database, sqlite_url
from tests.fleetctl.conftest import run_fleetctl
from tests.registry.test_registry import fake_status

NOW = 1_767_225_600.0
EU1 = {"cluster": "eu1", "rack": "r1"}


# ---- the arithmetic ------------------------------------------------------------------------
def test_a_cap_is_a_count_or_a_share_of_its_group() -> None:
    assert parse_max(16) == (16, None) and parse_max("16") == (16, None)
    assert parse_max("10%") == (None, 10.0) and parse_max(" 12.5 % ") == (None, 12.5)
    for bad, why in [
        ("0%", "above 0%"),
        ("101%", "at most 100%"),
        ("1.5", "whole"),
        ("ten", "a GPU count or a percentage"),
        (-1, "negative"),
        (True, "a GPU count"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_max(bad)
    cap = Cap.of(["cluster"], "10%")
    assert cap.limit(400) == 40 and cap.limit(79) == 7 and cap.limit(None) is None
    assert cap.group({"cluster": "eu1", "rack": "r2"}) == (("cluster", "eu1"),)
    assert cap.group({}) == (("cluster", ""),)  # no label: the group of the empty value
    assert cap.describe((("cluster", "eu1"),), 400) == "cap 10% of cluster=eu1 (40 of 400 GPUs)"
    assert Cap.of([], 16).describe((), None) == "cap 16 GPUs in the fleet"
    with pytest.raises(ValueError, match="not a label name"):
        Cap.of(["rack-id"], 4)


def test_bad_caps_in_fleetd_yaml_are_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="at most 100%"):
        FleetConfig.model_validate({"caps": [{"group_by": ["cluster"], "max": "150%"}]})
    with pytest.raises(ValidationError, match="label twice"):
        FleetConfig.model_validate({"caps": [{"group_by": ["rack", "rack"], "max": 4}]})
    with pytest.raises(ValidationError, match="group_by"):
        FleetConfig.model_validate({"breaker": {"groups": [{"group_by": [], "max_failures": 2}]}})
    fleet = FleetConfig.model_validate(
        {"max_gpus_out": 32, "caps": [{"group_by": ["cluster"], "max": "25%"}]}
    )
    assert [c.to_json() for c in fleet.all_caps()] == [
        {"group_by": [], "max": "32"},
        {"group_by": ["cluster"], "max": "25%"},
    ]


def test_a_lease_counts_against_its_own_group_and_an_old_lease_against_every_group() -> None:
    cap = Cap.of(["cluster"], "25%")
    members = [
        Member("a", {"cluster": "eu1", "node": "a"}, 8),
        Member("b", {"cluster": "eu1", "node": "b"}, 8),
        Member("c", {"cluster": "eu1", "node": "c"}, 8),
        Member("d", {"cluster": "eu1", "node": "d"}, 8),
        Member("e", {"cluster": "us2", "node": "e"}, 8),
    ]
    eu1, us2 = {"cluster": "eu1"}, {"cluster": "us2"}
    assert cap_refusal([cap], eu1, 8, [], members) is None  # 25% of 32 = 8
    held = [Held({"cluster": "eu1", "node": "a"}, 8)]
    assert cap_refusal([cap], eu1, 8, held, members) == (
        "cap 25% of cluster=eu1 (8 of 32 GPUs): 8 out, 8 more would exceed 8"
    )
    assert cap_refusal([cap], us2, 2, held, members) is None  # 25% of 8 = 2: another group
    old = [Held(None, 1)]  # written by a fleetd without labels: it could be anywhere
    assert cap_refusal([cap], us2, 2, old, members) is not None
    # a percentage with the registry unreadable cannot be judged: refused, never waved through
    assert "size unknown" in (cap_refusal([cap], eu1, 1, [], None) or "")


def test_a_wave_is_weighed_per_group_against_each_nodes_caps() -> None:
    mine = (Cap.of(["cluster"], "10%", "fleetd.yaml of n"),)
    fleet = [Member(f"n{i}", {"cluster": "eu1", "node": f"n{i}"}, 8, mine) for i in range(50)]
    rack = fleet[:12]  # 12 nodes, 96 GPUs of a 400-GPU cluster
    [load] = wave_loads(rack, fleet, [])
    assert load.exceeds and (load.nodes, load.gpus, load.total, load.limit) == (12, 96, 400, 40)
    assert load.text() == (
        "cluster=eu1: 12 nodes, 96 GPUs newly on; cap 10% of cluster=eu1 (40 of 400 GPUs) "
        "(fleetd.yaml of n)"
    )
    loads = wave_loads(fleet[:5], fleet, [Cap.of(["rack"], 16, "registry x")])
    assert [(w.cap.max_text, w.gpus, w.limit, w.exceeds) for w in loads] == [
        ("16", 40, 16, True),  # no rack label: one group of the empty rack
        ("10%", 40, 40, False),
    ]


# ---- the lease on PostgreSQL -------------------------------------------------------------
def publish(url: str, rows: dict[str, tuple[dict[str, str], int, int]], now: float) -> None:
    """Registry rows: node → (labels, devices, physical GPUs)."""
    publisher = RegistryPublisher(url)
    try:
        for node, (labels, devices, physical) in rows.items():
            status = {**fake_status(node), "gpus_total": devices, "labels": labels}
            versions = NodeVersions("MI300X", gpus_physical=physical)
            publisher.publish(status, now, versions=versions)
    finally:
        publisher.close()


@pytest.mark.postgres
def test_a_percentage_of_a_cluster_counts_physical_gpus(pg_url: str) -> None:
    now = time.time()
    publish(
        pg_url,
        {
            "cpx-1": ({"cluster": "eu1"}, 64, 8),  # a CPX node: 64 devices, 8 GPUs
            "spx-2": ({"cluster": "eu1"}, 8, 8),
            "spx-3": ({"cluster": "eu1"}, 8, 8),
            "spx-4": ({"cluster": "eu1"}, 8, 8),
            "spx-5": ({"cluster": "us2"}, 8, 8),
            "gone-6": ({"cluster": "eu1"}, 8, 8),
        },
        now,
    )
    publish(pg_url, {"gone-6": ({"cluster": "eu1"}, 8, 8)}, now - 600)  # stale: not counted
    config = FleetConfig.model_validate(
        {"max_gpus_out": 64, "caps": [{"group_by": ["cluster"], "max": "25%"}]}
    )
    leases = {
        node: SqlFleetLease.shared(pg_url, config, node=node, labels={"cluster": c})
        for node, c in (("cpx-1", "eu1"), ("spx-2", "eu1"), ("spx-5", "us2"))
    }
    try:
        first = leases["cpx-1"].acquire(
            node="cpx-1", run_id="r1", gpus=range(8), manual=False, now=now
        )
        assert first.granted  # its 8 physical GPUs: 25% of eu1's 32
        second = leases["spx-2"].acquire(
            node="spx-2", run_id="r2", gpus=range(8), manual=False, now=now
        )
        assert not second.granted
        assert second.reason == (
            "cap on GPUs out of service (fleet): cap 25% of cluster=eu1 (8 of 32 GPUs): "
            "8 out, 8 more would exceed 8"
        )  # counted by device, eu1 would be 88 "GPUs" and the second run would go
        other = leases["spx-5"].acquire(
            node="spx-5", run_id="r3", gpus=range(2), manual=False, now=now
        )
        assert other.granted  # us2 is its own group: 25% of 8
        manual = leases["spx-2"].acquire(
            node="spx-2", run_id="r4", gpus=range(8), manual=True, now=now
        )
        assert manual.granted  # a person's drain is counted, never refused
        leases["cpx-1"].release("r1")
        leases["spx-2"].release("r4")
        assert (
            leases["spx-2"]
            .acquire(node="spx-2", run_id="r2", gpus=range(8), manual=False, now=now)
            .granted
        )
    finally:
        for lease in leases.values():
            lease.dispose()


@pytest.mark.postgres
def test_a_cap_set_through_fleetctl_applies_at_the_next_lease(pg_url: str) -> None:
    now = time.time()
    publish(pg_url, {"a": (EU1, 8, 8), "b": ({"cluster": "eu1", "rack": "r2"}, 8, 8)}, now)
    lease = SqlFleetLease.shared(pg_url, FleetConfig(max_gpus_out=64), node="a", labels=EU1)
    try:
        bad, _ = run_fleetctl(
            "remediation", "cap", "add", "-g", "rack", "--max", "200%", "--db", pg_url, "-r", "x"
        )
        assert bad.exit_code == 1 and "at most 100%" in bad.output
        added, _ = run_fleetctl(
            "remediation", "cap", "add", "-g", "rack", "--max", "4", "--db", pg_url,
            "-r", "one reset per rack at a time",
        )  # fmt: skip
        assert added.exit_code == 0, added.output
        assert "at most 4 GPUs out per rack" in added.output
        cap_id = added.output.split()[1].rstrip(":")
        denied = lease.acquire(node="a", run_id="r1", gpus=range(8), manual=False, now=now)
        assert not denied.granted
        assert "cap 4 GPUs in rack=r1: 0 out, 8 more would exceed 4" in denied.reason
        listed, _ = run_fleetctl("remediation", "cap", "list", "--db", pg_url, "--json")
        [row] = json.loads(listed.output)["caps"]
        assert row["group_by"] == ["rack"] and row["max"] == "4" and row["id"] == cap_id
        removed, _ = run_fleetctl(
            "remediation", "cap", "remove", cap_id[:8], "--db", pg_url, "-r", "done"
        )
        assert removed.exit_code == 0, removed.output
        assert lease.acquire(node="a", run_id="r1", gpus=range(8), manual=False, now=now).granted
        audit, _ = run_fleetctl("silence", "audit", "--db", pg_url, "--json")
        assert audit.exit_code == 0, audit.output
        actions = [e["action"] for e in json.loads(audit.output)["audit"]]
        assert actions.count("cap") == 1 and actions.count("uncap") == 1
    finally:
        lease.dispose()


@pytest.mark.postgres
def test_a_breaker_per_rack_stops_that_rack_only(pg_url: str) -> None:
    config = FleetConfig.model_validate(
        {
            "max_gpus_out": 64,
            "breaker": {
                "max_failures": 4,
                "window": 300,
                "groups": [{"group_by": ["rack"], "max_failures": 2}],
            },
        }
    )
    racks = {"a": "r2", "b": "r2", "c": "r1"}
    leases = {
        n: SqlFleetLease.shared(pg_url, config, node=n, labels={"rack": r})
        for n, r in racks.items()
    }
    a, b, c = leases["a"], leases["b"], leases["c"]
    try:
        assert not a.record_failure(node="a", gpu=0, run_id=None, now=NOW).tripped
        assert not c.record_failure(node="c", gpu=0, run_id=None, now=NOW + 1).tripped
        status = b.record_failure(node="b", gpu=3, run_id=None, now=NOW + 2)
        assert status.tripped and status.just_tripped and status.scope == "fleet/rack=r2"
        assert status.reason == "2 GPUs of rack=r2 failed within 300s (limit 2)"
        denied = a.acquire(node="a", run_id="x", gpus=[0], manual=False, now=NOW + 3)
        assert not denied.granted and "circuit breaker open (fleet/rack=r2)" in denied.reason
        assert c.acquire(node="c", run_id="y", gpus=[0], manual=False, now=NOW + 3).granted
        assert not c.breaker().tripped and a.breaker().tripped
        publish(pg_url, {"a": ({"rack": "r2"}, 8, 8)}, time.time())
        view, _ = run_fleetctl("status", "--db", pg_url)
        assert (
            "circuit breaker OPEN for rack=r2: 2 GPUs of rack=r2 failed within 300s (limit 2)"
            in view.output
        )
        # the fleet-wide breaker still counts every rack: the 4th distinct GPU opens it
        fleet = c.record_failure(node="c", gpu=1, run_id=None, now=NOW + 4)
        assert fleet.tripped and fleet.scope == "fleet" and "4 GPUs failed" in (fleet.reason or "")
        assert c.breaker().scope == "fleet"
        c.reset_breaker(who="oncall", now=NOW + 6)  # c: the fleet's and rack r1's
        assert not c.breaker().tripped
        assert a.breaker().scope == "fleet/rack=r2"  # r2's stays open until reset from r2
        a.reset_breaker(who="oncall", now=NOW + 7)
        assert not a.breaker().tripped
        assert not a.record_failure(node="a", gpu=5, run_id=None, now=NOW + 8).tripped
    finally:
        for lease in leases.values():
            lease.dispose()


# ---- the schema written by the previous fleetd -------------------------------------------
OLD_LEASES = """
CREATE TABLE remedy_fleet_leases (
    run_id VARCHAR(64) PRIMARY KEY, node VARCHAR(255) NOT NULL, gpus INTEGER NOT NULL,
    gpu_list VARCHAR(255) NOT NULL, manual BOOLEAN NOT NULL, acquired_at FLOAT NOT NULL);
CREATE TABLE remedy_fleet_failures (
    id SERIAL PRIMARY KEY, node VARCHAR(255) NOT NULL, gpu INTEGER, run_id VARCHAR(64),
    at FLOAT NOT NULL);
CREATE INDEX ix_remedy_fleet_failures_at ON remedy_fleet_failures (at);
CREATE TABLE remedy_fleet_breaker (
    scope VARCHAR(255) PRIMARY KEY, tripped BOOLEAN NOT NULL, tripped_at FLOAT, reason TEXT,
    reset_by VARCHAR(255), reset_at FLOAT);
INSERT INTO remedy_fleet_leases VALUES ('old-run', 'old-node', 8, '0,1,2,3,4,5,6,7', false, 1.0);
INSERT INTO remedy_fleet_failures (node, gpu, run_id, at) VALUES ('old-node', 3, 'old-run', 1.0);
"""


@pytest.mark.postgres
def test_a_registry_written_by_the_previous_fleetd_upgrades_in_place(pg_url: str) -> None:
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            for statement in OLD_LEASES.split(";"):
                if statement.strip():
                    conn.execute(text(statement))
        now = time.time()
        publish(pg_url, {"a": ({"cluster": "eu1"}, 8, 8), "b": ({"cluster": "us2"}, 8, 8)}, now)
        config = FleetConfig.model_validate(
            {"max_gpus_out": 64, "caps": [{"group_by": ["cluster"], "max": 8}]}
        )
        a = SqlFleetLease.shared(pg_url, config, node="a", labels={"cluster": "eu1"})
        b = SqlFleetLease.shared(pg_url, config, node="b", labels={"cluster": "us2"})
        try:
            for table in ("remedy_fleet_leases", "remedy_fleet_failures"):
                assert "labels" in {c["name"] for c in inspect(engine).get_columns(table)}
            assert a.leases("old-node") == ["old-run"] and a.out_of_service() == 8
            # the old lease's group is unknown: it holds every cluster's 8
            for lease, node in ((a, "a"), (b, "b")):
                denied = lease.acquire(node=node, run_id=node, gpus=[0], manual=False, now=now)
                assert not denied.granted and "8 out, 1 more would exceed 8" in denied.reason
            a.release("old-run")
            assert a.acquire(node="a", run_id="a", gpus=[0], manual=False, now=now).granted
            assert b.acquire(node="b", run_id="b", gpus=[0], manual=False, now=now).granted
            with engine.connect() as conn:
                stored = conn.execute(
                    text("SELECT labels FROM remedy_fleet_leases WHERE run_id = 'a'")
                ).scalar_one()
            assert json.loads(stored) == {"cluster": "eu1", "node": "a"}
        finally:
            a.dispose()
            b.dispose()
    finally:
        engine.dispose()


def test_a_node_database_of_schema_3_upgrades_to_4(tmp_path: Path) -> None:
    """A node's own database written by the previous fleetd (schema 3: lease tables without
    ``labels``) gains the columns in place and keeps its rows."""
    path = tmp_path / "fleetd.db"
    db = Database.open(sqlite_url(path))
    db.dispose()
    engine = create_engine(sqlite_url(path))
    with engine.begin() as conn:  # back to what schema 3 had
        conn.execute(text("ALTER TABLE remedy_fleet_leases DROP COLUMN labels"))
        conn.execute(text("ALTER TABLE remedy_fleet_failures DROP COLUMN labels"))
        conn.execute(text("UPDATE fleetd_schema_version SET version = 3"))
        conn.execute(
            text(
                "INSERT INTO remedy_fleet_leases VALUES ('old', 'n1', 8, '0,1,2,3,4,5,6,7', 0, 1.0)"
            )
        )
    engine.dispose()
    db = Database.open(sqlite_url(path))
    try:
        assert db.schema_version() == schema.SCHEMA_VERSION == 4
        lease = SqlFleetLease.local(db, "n1", FleetConfig(max_gpus_out=8), {"rack": "r1"})
        assert lease.leases("n1") == ["old"] and lease.out_of_service() == 8
        assert not lease.acquire(node="n1", run_id="new", gpus=[0], manual=False, now=2.0).granted
        lease.release("old")
        assert lease.acquire(node="n1", run_id="new", gpus=[0], manual=False, now=2.0).granted
        status = lease.record_failure(node="n1", gpu=0, run_id="new", now=3.0)
        assert not status.tripped and status.scope == "node:n1"
    finally:
        db.dispose()


def test_an_unreachable_registry_stops_neither_alerting_nor_the_caps(tmp_path: Path) -> None:
    """An agent in mode ``on`` with group caps and a per-rack breaker whose registry is down:
    the uncorrectable error still fires and is served by the API, the heartbeat fails
    quietly, and no GPU is reset (no lease: never a cap skipped because its group could not
    be read)."""
    from fleetd.api.status import node_status
    from fleetd.clock import FakeClock
    from tests.api.agent import start_agent

    agent = start_agent(
        tmp_path / "agent",
        name="gpu-node-009",
        clock=FakeClock(NOW),
        labels=EU1,
        remediation={
            "mode": "on",
            "fleet": {
                "caps": [{"group_by": ["cluster"], "max": "50%"}],
                "breaker": {"groups": [{"group_by": ["rack"], "max_failures": 1}]},
            },
        },
        registry={"url": "postgresql://fleet:pw@127.0.0.1:1/fleet", "timeout": 1},
    )
    try:
        agent.tick(2)
        agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
        agent.tick(4)
        beat = agent.daemon.heartbeat
        assert beat is not None and beat.beat(agent.clock.now()) is False
        held = agent.dispatcher.alerts(agent.clock.now())
        assert "GpuEccUncorrectableError" in {h.alert.rule for h in held if h.alert.firing}
        assert agent.sim.reset_count() == 0
        status = agent.remedy.status()  # type: ignore[union-attr]
        assert status.mode == "on" and status.gpus_out_of_service == 0
        assert "the registry is unreachable" in (status.breaker.reason or "")
        document = node_status(agent.services, agent.clock.now())  # the API's status page
        assert document["alerts"]["critical"] >= 1
    finally:
        agent.stop()
