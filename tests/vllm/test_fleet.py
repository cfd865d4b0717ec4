"""Gray failure against the fleet's hives, the pure part: the hive aggregate, the robust test,
the attribution, too few peer hives and a cut-off registry (each says so), a quiet healthy day
with fleet peers on. ``now`` is passed in everywhere."""

from __future__ import annotations

import dataclasses
import random

import pytest

from fleetd.store.memory import MemoryWindow
from fleetd.vllm.config import PeersConfig, VllmWorkerConfig
from fleetd.vllm.fleet import FleetView, ServingFigure, hive_units, judge_fleet
from fleetd.vllm.peers import COMPARED, SLOWDOWN, PeerComparison
from tests.vllm.test_peers import feed_day

NOW = 1_767_225_600.0
SETTINGS = PeersConfig()


def hive(node: str, per_token: float, *, at: float = NOW, hive_id: str = "0", n: int = 8,
         clock: float = 2.0e9, throttle: float = 0.0, batch: float = 8.0,
         seed: int = 0) -> list[ServingFigure]:  # fmt: skip
    rng = random.Random(hash((node, hive_id, seed)))
    return [
        ServingFigure(node, hive_id, f"w{i}", "m", "MI355X", (i,), at,
                      per_token * rng.uniform(0.98, 1.02), 3.0, clock, throttle, batch)
        for i in range(n)
    ]  # fmt: skip


def fleet(*nodes: tuple[str, float], at: float = NOW) -> FleetView:
    return FleetView(tuple(f for name, pt in nodes for f in hive(name, pt)), read_at=at)


PEERS = fleet(("n1", 0.030), ("n2", 0.031), ("n3", 0.029), ("n4", 0.030))


def test_a_hive_aggregate_is_the_median_of_its_workers() -> None:
    figures = hive("me", 0.030)
    figures[3] = ServingFigure("me", "0", "w3", "m", "MI355X", (3,), NOW, 0.3)  # one slow GPU
    (unit,) = hive_units(figures)
    assert unit.per_token_s == pytest.approx(0.030, rel=0.03) and unit.gpus == tuple(range(8))


@pytest.mark.parametrize(
    ("change", "attribution", "evidence"),
    [
        ({"clock": 1.2e9}, "hardware", "clock 40 % below"),
        ({"throttle": 0.35}, "hardware", "throttled 35 %"),
        ({"batch": 16.0}, "workload", "running requests"),
        ({}, "engine", "restart the hive's workers"),
    ],
)
def test_a_node_whose_gpus_are_all_slow_is_found_against_the_fleet(
    change: dict[str, float], attribution: str, evidence: str
) -> None:
    mine = hive("me", 0.039, **change)  # every GPU 30 % slower: the node-local test sees nothing
    (v,) = judge_fleet(mine, PEERS, SETTINGS, NOW, max_age=60)
    assert v.compared and v.outlier and v.peers == 4
    assert v.slowdown == pytest.approx(0.30, abs=0.03)
    assert v.attribution == attribution and evidence in v.why, v.why


def test_a_healthy_hive_or_a_small_difference_is_no_verdict() -> None:
    for per_token in (0.030, 0.033):  # 10 %: below min_slowdown
        (v,) = judge_fleet(hive("me", per_token), PEERS, SETTINGS, NOW, max_age=60)
        assert v.compared and not v.outlier


def test_too_few_fresh_peer_hives_give_no_verdict_and_say_so() -> None:
    stale = FleetView(
        (*fleet(("n1", 0.03), ("n2", 0.03)).peers, *hive("n3", 0.03, at=NOW - 61)), read_at=NOW
    )
    (v,) = judge_fleet(hive("me", 0.06), stale, SETTINGS, NOW, max_age=60)
    assert not v.compared and not v.outlier and v.peers == 2
    assert v.why == "2 peer hive(s) with data, 3 needed"
    big = [dataclasses.replace(f, model="big") for f in PEERS.peers]  # other model: no peers
    other_model = FleetView(tuple(big), read_at=NOW)
    (v,) = judge_fleet(hive("me", 0.06), other_model, SETTINGS, NOW, max_age=60)
    assert not v.compared and v.peers == 0


def test_the_nodes_other_hives_are_peers_too() -> None:
    mine = [*hive("me", 0.045, hive_id="a"), *hive("me", 0.030, hive_id="b")]
    verdicts = {v.hive: v for v in judge_fleet(mine, fleet(("n1", 0.03), ("n2", 0.03)), SETTINGS,
                                                NOW, max_age=60)}  # fmt: skip
    assert verdicts["a"].outlier and verdicts["a"].peers == 3
    assert verdicts["b"].compared and not verdicts["b"].outlier


def test_cut_off_from_the_registry_the_verdict_is_node_local_only() -> None:
    failed = FleetView(PEERS.peers, read_at=NOW - 30, error="OperationalError: refused")
    (v,) = judge_fleet(hive("me", 0.06), failed, SETTINGS, NOW, max_age=60)
    assert not v.compared and "node-local comparison only" in v.why and "refused" in v.why
    (v,) = judge_fleet(hive("me", 0.06), PEERS, SETTINGS, NOW + 61, max_age=60)  # read too old
    assert not v.compared and "last read too old" in v.why
    (v,) = judge_fleet(hive("me", 0.06), FleetView(), SETTINGS, NOW, max_age=60)
    assert not v.compared and "never read" in v.why
    assert judge_fleet(hive("me", 0.06), None, SETTINGS, NOW, max_age=60) == []  # no registry


def test_a_simulated_healthy_day_with_fleet_peers_raises_no_verdict() -> None:
    """Four healthy nodes through the same diurnal day (different noise); each compares its
    hive with the other three every 5 minutes, as the heartbeat would hand them over."""
    start = 1_767_225_600.0
    workers = [VllmWorkerConfig(name=f"w{i}", url="http://127.0.0.1:1", gpus=[i]) for i in range(8)]
    nodes = []
    for seed in range(4):
        window = MemoryWindow(retention=2 * 86400)
        feed_day(window, start, hours=24, step=60.0, seed=seed + 20)
        comparison = PeerComparison(workers, SETTINGS)
        comparison.enable_fleet(f"n{seed}", "MI355X", {}, max_age=60)
        nodes.append((window, comparison))
    outliers, compared = [], 0
    for k in range(1, 24 * 12):
        now = start + k * 300
        for window, comparison in nodes:
            comparison.assess(window, now)
        shared = tuple(f for _, c in nodes for f in c.publishable(now))
        for window, comparison in nodes:
            comparison.fleet_read(FleetView(shared, read_at=now))
            readings = comparison.assess(window, now)
            outliers += [r for r in readings if r.metric == SLOWDOWN]
            compared += sum(
                1 for r in readings
                if r.metric == COMPARED and r.value == 1.0 and r.key.label("level") == "hive"
            )  # fmt: skip
    assert outliers == []
    assert compared >= 0.95 * 4 * (24 * 12 - 1)


def test_figures_are_published_with_their_own_time_and_not_once_stale() -> None:
    window = MemoryWindow(retention=7200)
    feed_day(window, NOW - 3600, hours=1, step=60.0)
    workers = [VllmWorkerConfig(name=f"w{i}", url="http://127.0.0.1:1", gpus=[i]) for i in range(8)]
    comparison = PeerComparison(workers, SETTINGS)
    assert comparison.publishable(NOW) == []  # no fleet comparison enabled: nothing to publish
    comparison.enable_fleet("me", "MI355X", {0: "h0", 1: "h0"}, max_age=60)
    comparison.assess(window, NOW - 55)
    figures = comparison.publishable(NOW)
    assert len(figures) == 8 and {f.at for f in figures} == {NOW - 55}
    assert {f.hive for f in figures} == {"h0", "0"}  # GPUs without a hive id: one hive "0"
    assert all(f.per_token_s and f.clock_hz and f.batch for f in figures)
    assert comparison.publishable(NOW + 6) == []  # the scrape job stopped: no stale figures
