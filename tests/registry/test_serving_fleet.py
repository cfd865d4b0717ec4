"""Gray failure against the fleet through the local PostgreSQL with three real agents (fake
clocks): each heartbeat publishes its workers' serving figures and reads its peers'; a node
whose 8 GPUs are all equally slow — invisible on the node — is found against the fleet; too
few peers, or a registry that cannot be reached, give no fleet verdict and say so."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from fleetd.clock import FakeClock
from fleetd.model import Reading
from fleetd.registry.config import RegistryConfig
from fleetd.registry.heartbeat import RegistryHeartbeat
from fleetd.registry.serving import serving_table
from fleetd.store.memory import MemoryWindow
from fleetd.vllm.config import PeersConfig, VllmWorkerConfig
from fleetd.vllm.peers import COMPARED, SLOWDOWN, PeerComparison
from tests.api.agent import Agent, start_agent
from tests.vllm.test_peers import feed_day

pytestmark = pytest.mark.postgres

START = 1_767_225_600.0
WORKERS = [VllmWorkerConfig(name=f"w{i}", url="http://127.0.0.1:1", gpus=[i]) for i in range(8)]
SETTINGS = PeersConfig(fleet_min_peers=2)  # three nodes: each has two peer hives


@dataclass
class Node:
    agent: Agent
    heartbeat: RegistryHeartbeat
    peers: PeerComparison
    window: MemoryWindow

    def assess(self) -> list[Reading]:
        return self.peers.assess(self.window, self.agent.clock.now())

    def beat(self) -> bool:
        return self.heartbeat.beat(self.agent.clock.now())


def node(tmp: Path, name: str, url: str, *, slow: float = 1.0, seed: int = 0) -> Node:
    agent = start_agent(tmp / name, name=name, clock=FakeClock(START + 3550),
                        with_remediation=False)  # fmt: skip
    window = MemoryWindow(retention=7200)
    feed_day(window, START, hours=1, step=60.0, slow=slow, seed=seed)
    peers = PeerComparison(WORKERS, SETTINGS)
    config = RegistryConfig.model_validate({"url": url, "timeout": 10})
    peers.enable_fleet(name, "MI355X", {}, max_age=config.stale_after)
    heartbeat = RegistryHeartbeat(config, agent.services, address=agent.url, serving=peers)
    return Node(agent, heartbeat, peers, window)


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str) -> Iterator[list[Node]]:
    nodes: list[Node] = []
    try:
        for i, slow in enumerate((1.0, 1.0, 1.3)):  # gpu-node-003: all 8 GPUs 30 % slower
            nodes.append(node(tmp_path, f"gpu-node-00{i + 1}", pg_url, slow=slow, seed=i))
        yield nodes
    finally:
        for n in nodes:
            n.heartbeat.close()
            n.agent.stop()


def fleet_verdicts(readings: list[Reading]) -> dict[str, Reading]:
    return {r.metric: r for r in readings if r.key.label("level") == "hive"}


def test_a_node_all_of_whose_gpus_are_slow_is_found_against_the_fleet(
    fleet: list[Node], pg_url: str
) -> None:
    for n in fleet:
        n.assess()
    first = fleet[0]
    assert first.beat()  # alone in the registry so far: too few peers, and it says so
    hive = fleet_verdicts(first.assess())[COMPARED]
    assert hive.value == 0.0 and hive.reason == "0 peer hive(s) with data, 2 needed"
    for n in fleet:
        assert n.beat()
    for n in fleet:
        n.beat()  # everyone has read everyone
    slow = fleet[2].assess()
    node_local = [r for r in slow if r.metric == SLOWDOWN and r.key.label("level") == "gpu"]
    assert node_local == []  # the node-local comparison cannot see it
    verdict = fleet_verdicts(slow)
    assert verdict[COMPARED].value == 1.0
    outlier = verdict[SLOWDOWN]
    assert outlier.value is not None and 0.2 < outlier.value < 0.4
    assert outlier.key.label("attribution") == "engine" and outlier.key.label("peers") == "2"
    assert outlier.key.label("worker") == ",".join(f"w{i}" for i in range(8))
    for healthy in fleet[:2]:
        verdict = fleet_verdicts(healthy.assess())
        assert verdict[COMPARED].value == 1.0 and SLOWDOWN not in verdict
    # bounded: one row per worker and model per node
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(serving_table)).scalar() == 24
    engine.dispose()


def test_a_stale_peer_is_no_peer(fleet: list[Node]) -> None:
    for n in fleet:
        n.assess()
        assert n.beat()
    fleet[2].agent.clock.advance(61)  # the others' rows are now older than stale_after
    assert fleet[2].beat()
    verdict = fleet_verdicts(fleet[2].peers.assess(fleet[2].window, START + 3550))
    assert verdict[COMPARED].value == 0.0  # judged at its old time, with no fresh peers read
    assert verdict[COMPARED].reason == "0 peer hive(s) with data, 2 needed"


def test_cut_off_from_the_registry_the_comparison_is_node_local_and_says_so(
    tmp_path: Path,
) -> None:
    dead = "postgresql://fleetd:pw@127.0.0.1:1/fleet"
    n = node(tmp_path, "gpu-node-102", dead, slow=1.3)
    try:
        n.assess()
        assert not n.beat()
        readings = n.assess()
        hive = fleet_verdicts(readings)[COMPARED]
        assert hive.value == 0.0 and hive.reason is not None
        assert "node-local comparison only" in hive.reason
        local = [r for r in readings if r.metric == COMPARED and r.key.label("level") == "gpu"]
        assert len(local) == 8 and all(r.value == 1.0 for r in local)  # node-local goes on
    finally:
        n.heartbeat.close()
        n.agent.stop()


def test_the_daemon_publishes_its_workers_figures_with_the_heartbeat(
    tmp_path: Path, pg_url: str
) -> None:
    from fleetd.sim.vllm_worker import StandInFleet

    clock = FakeClock(START)
    standins = StandInFleet(tmp_path / "standin", clock=clock)
    workers = [standins.add(f"gpu{i}", [i], model="m") for i in range(4)]
    vllm = {"workers": [{"name": w.name, "url": w.url, "gpus": list(w.gpus), "model": "m"}
                        for w in workers]}  # fmt: skip
    agent = start_agent(tmp_path / "n", name="gpu-node-201", clock=clock, vllm=vllm,
                        registry={"url": pg_url, "timeout": 10})  # fmt: skip
    try:
        wiring = agent.daemon.vllm
        assert wiring is not None and wiring.peers.fleet_target == ("gpu-node-201", "MI355X")
        for w in workers:
            w.add_requests(8, 600.0)
        for _ in range(24):  # two minutes of polls and scrapes
            agent.tick()
            agent.daemon.scrape_vllm()
            clock.advance(5.0)
        (before,) = wiring.peers.last_fleet  # no heartbeat yet: node-local only, and it says so
        assert not before.compared and "never read" in before.why
        agent.daemon.beat()
        engine = create_engine(pg_url)
        with engine.connect() as conn:
            rows = conn.execute(select(serving_table)).mappings().all()
        engine.dispose()
        assert sorted(r["worker"] for r in rows) == ["gpu0", "gpu1", "gpu2", "gpu3"]
        assert all(r["node"] == "gpu-node-201" and r["sku"] == "MI355X" for r in rows)
        assert all(r["per_token_s"] is not None and r["per_token_s"] > 0 for r in rows)
        assert {r["hive"] for r in rows} == {before.hive}  # the GPUs' XGMI hive id
        agent.daemon.scrape_vllm()
        (after,) = wiring.peers.last_fleet  # read the fleet: alone in it, too few peers
        assert not after.compared and after.why == "0 peer hive(s) with data, 3 needed"
    finally:
        agent.stop()
        standins.close()
