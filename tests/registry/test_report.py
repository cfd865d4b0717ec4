"""``fleetctl report --db`` on the local PostgreSQL: three real agents publish their KPI summary
with their heartbeat, and fleetctl combines the fleet's figures from one query of the
registry; a node whose summary is old is named stale (exit 2)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fleetd.clock import FakeClock
from fleetd.registry.config import RegistryConfig
from fleetd.registry.heartbeat import RegistryHeartbeat
from fleetd.registry.reader import RegistryReader
from fleetd.registry.report_reader import read_reports
from tests.api.agent import Agent, start_agent
from tests.fleetctl.conftest import run_after_fault, run_fleetctl

pytestmark = pytest.mark.postgres

NODES = ("gpu-node-001", "gpu-node-002", "gpu-node-003")


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[list[tuple[Agent, RegistryHeartbeat]]]:
    start = time.time()  # fleetctl judges staleness on the real clock
    config = RegistryConfig.model_validate({"url": pg_url, "timeout": 10})
    members = []
    try:
        for name in NODES:
            agent = start_agent(
                tmp_path / name, name=name, clock=FakeClock(start), remediation={"mode": "on"}
            )
            agent.tick(3)
            beat = RegistryHeartbeat(config, agent.services, address=agent.url)
            members.append((agent, beat))
        yield members
    finally:
        for agent, beat in members:
            beat.close()
            agent.stop()


def test_fleetctl_report_db_combines_every_agents_summary(
    fleet: list[tuple[Agent, RegistryHeartbeat]], pg_url: str
) -> None:
    # before any agent published: an empty report, not an error
    empty, _ = run_fleetctl("report", "--db", pg_url, "--json")
    assert empty.exit_code == 0, empty.output
    assert json.loads(empty.output)["nodes"] == []
    # two nodes remediate a fault each; the third has nothing to report
    runs = [run_after_fault(agent, "done") for agent, _ in fleet[:2]]
    for agent, beat in fleet:
        agent.tick(1)
        assert beat.beat(agent.clock.now()), beat.last_error

    reader = RegistryReader(pg_url)
    try:
        rows = read_reports(reader)
    finally:
        reader.close()
    assert [r.node for r in rows] == list(NODES)
    assert [r.summary["success"]["succeeded"] for r in rows] == [1, 1, 0]

    result, _ = run_fleetctl("report", "--db", pg_url, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"] == "registry" and [n["node"] for n in data["nodes"]] == list(NODES)
    figures = data["fleet"]
    assert figures["nodes"] == 3
    assert figures["success"] == {"succeeded": 2, "failed": 0, "ratio": 1.0}
    per_node = [n["report"]["readmission"]["mean_s"] for n in data["nodes"][:2]]
    assert figures["readmission"]["runs"] == 2
    assert figures["readmission"]["mean_s"] == pytest.approx(sum(per_node) / 2)
    assert {"drain", "reset", "verify"} <= set(figures["readmission"]["stages"])
    hours = sum(n["report"]["gpu_hours_out_of_service"] for n in data["nodes"])
    assert figures["gpu_hours_out_of_service"] == pytest.approx(hours) and hours > 0
    assert figures["time_to_repair"]["automatic"]["count"] == 2
    [ecc] = [r for r in figures["rules"] if r["runs"]]
    assert ecc["runs"] == 2 and ecc["fault_found"] == 2 and ecc["mode"] == "remediate"
    assert ecc["nothing_found"] == 0 and ecc["precision"] == 1.0
    assert "runs" not in data["nodes"][0]["report"]  # the registry holds summaries only
    assert {g["node"] for g in figures["incidents"]["gpus"]} == set(NODES[:2])

    shown, _ = run_fleetctl("report", "--db", pg_url)
    assert shown.exit_code == 0, shown.output
    assert "reliability of 3 of 3 nodes" in shown.output and "from the registry" in shown.output
    assert "runs: 2 succeeded, 0 failed (success 100%)" in shown.output
    for name in NODES:
        assert name in shown.output
    one, _ = run_fleetctl("report", "--db", pg_url, NODES[0], "--json")
    assert [n["node"] for n in json.loads(one.output)["nodes"]] == [NODES[0]]
    assert runs  # each run concluded before the beat

    # a node whose last summary is older than the staleness limit is named, exit 2
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE fleet_reports SET at = at - 3600 WHERE node = :n"), {"n": NODES[2]}
        )
    engine.dispose()
    stale, _ = run_fleetctl("report", "--db", pg_url)
    assert stale.exit_code == 2, stale.output
    assert "stale: published" in stale.output
    missing, _ = run_fleetctl("report", "--db", pg_url, "gpu-node-404")
    assert missing.exit_code == 2 and "no KPI report in the registry" in missing.output
