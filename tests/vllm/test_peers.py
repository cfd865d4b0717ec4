"""Gray failure against node peers: the robust statistics, the attribution, no verdict with
too few peers, a quiet healthy day — and the whole path over real HTTP: stand-in workers on a
simulated node, the poller, the scraper, the memory window and the comparison."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.model import Reading, make_labels
from fleetd.sim.vllm_worker import StandInFleet, StandInVllm
from fleetd.store.memory import MemoryWindow
from fleetd.vllm.collector import VllmScraper
from fleetd.vllm.config import PeersConfig, VllmWorkerConfig
from fleetd.vllm.peers import (
    COMPARED,
    SLOWDOWN,
    GpuSignals,
    PeerComparison,
    WorkerFigures,
    judge,
    robust_z,
)
from tests.collect.conftest import make_rig

SETTINGS = PeersConfig()


def fig(name: str, per_token: float | None, *, model: str = "m", batch: float = 8.0,
        prompt: float = 500.0, **gpu: object) -> WorkerFigures:  # fmt: skip
    index = int(name.removeprefix("w"))
    signals = GpuSignals(**{"clock_hz": 2.0e9, "throttle": 0.0, **gpu})  # type: ignore[arg-type]
    return WorkerFigures(name, model, (index,), per_token, batch, prompt, {index: signals})


def healthy(n: int = 8, **kw: object) -> list[WorkerFigures]:
    rng = random.Random(3)
    return [fig(f"w{i}", 0.030 * rng.uniform(0.97, 1.03), **kw) for i in range(n)]  # type: ignore[arg-type]


def by_name(verdicts: list) -> dict:  # type: ignore[type-arg]
    return {v.worker: v for v in verdicts}


def test_robust_z_uses_the_median_and_a_floored_mad() -> None:
    med, z = robust_z(13.0, [10.0, 10.0, 10.0, 10.0], mad_floor=0.05)
    assert med == 10.0 and z == pytest.approx(3.0 / 0.5)  # MAD 0: floored at 5 % of 10
    med, z = robust_z(13.0, [8.0, 10.0, 12.0, 100.0], mad_floor=0.0)
    assert med == 11.0 and z == pytest.approx(2.0 / (2.0 * 1.4826))  # one wild peer barely counts


@pytest.mark.parametrize(
    ("change", "attribution", "evidence"),
    [
        ({"clock_hz": 1.0e9}, "hardware", "clock 50 % below"),
        ({"throttle": 0.4}, "hardware", "throttled 40 %"),
        ({"narrow_link": True}, "hardware", "PCIe link"),
        ({"replays": 500.0}, "hardware", "PCIe replays"),
        ({"batch": 20.0}, "workload", "running requests"),
        ({"prompt": 4000.0}, "workload", "prompt tokens"),
        ({}, "engine", "restart the worker"),
    ],
)
def test_an_outlier_is_attributed(change: dict, attribution: str, evidence: str) -> None:  # type: ignore[type-arg]
    figures = healthy()
    kw = {k: v for k, v in change.items() if k in ("batch", "prompt")}
    gpu = {k: v for k, v in change.items() if k not in kw}
    figures[5] = fig("w5", 0.030 * 1.22, **kw, **gpu)
    verdicts = by_name(judge(figures, SETTINGS))
    slow = verdicts["w5"]
    assert slow.outlier and slow.peers == 7 and slow.slowdown == pytest.approx(0.22, abs=0.03)
    assert slow.attribution == attribution and evidence in slow.why, slow.why
    assert [v.worker for v in verdicts.values() if v.outlier] == ["w5"]


def test_a_small_or_noisy_difference_is_no_verdict() -> None:
    figures = healthy()
    figures[2] = fig("w2", 0.030 * 1.08, clock_hz=1.0e9)  # 8 % slower: under min_slowdown
    assert not any(v.outlier for v in judge(figures, SETTINGS))
    rng = random.Random(5)  # peers 30 % apart from each other: 20 % slower is not an outlier
    noisy = [fig(f"w{i}", 0.030 * rng.uniform(0.7, 1.3)) for i in range(7)]
    noisy.append(fig("w7", 0.036))
    assert not by_name(judge(noisy, SETTINGS))["w7"].outlier


def test_too_few_peers_or_missing_figures_give_no_verdict_and_say_so() -> None:
    figures = healthy(3)  # each worker has 2 peers, 3 needed
    figures[0] = fig("w0", 0.1)
    verdicts = judge(figures, SETTINGS)
    assert all(not v.compared and not v.outlier for v in verdicts)
    assert "2 peer(s) with data, 3 needed" in verdicts[0].why
    # a worker without a decode figure is neither judged nor a peer
    more = [*healthy(4), fig("w4", None), fig("w5", 0.1)]
    verdicts = by_name(judge(more, SETTINGS))
    assert not verdicts["w4"].compared and verdicts["w5"].peers == 4 and verdicts["w5"].outlier
    # peers are the workers serving the same model
    mixed = [*healthy(4), *[fig(f"w{i}", 0.3, model="big") for i in range(4, 8)]]
    assert not any(v.outlier for v in judge(mixed, SETTINGS))


# ----------------------------------------------------------------------- a healthy day
def feed_day(
    window: MemoryWindow, start: float, hours: float, step: float, *, slow: float = 1.0,
    seed: int = 11,
) -> None:  # fmt: skip
    """8 workers serving one model through a day of diurnal load: each worker's batch, and so
    its decode time, follow the load, with per-worker and per-step noise; the GPUs' clocks and
    throttling follow the load the same way on every GPU. ``slow``: every worker's decode time
    multiplied (a node whose GPUs are all equally slow)."""
    rng = random.Random(seed)
    totals: dict[tuple[str, int], float] = {}
    t = start
    while t < start + hours * 3600:
        load = 0.55 + 0.35 * math.sin(2 * math.pi * (t - start) / 86400 - math.pi / 2)
        readings: list[Reading] = []
        for w in range(8):
            wl = make_labels({"worker": f"w{w}", "model": "m"})
            gl = make_labels({"worker": f"w{w}", "gpu": w})
            batch = max(0.5, 12 * load * rng.uniform(0.85, 1.15))
            itl = slow * 0.02 * (1 + 0.04 * batch) * rng.uniform(0.95, 1.05)
            tokens = batch / itl * step
            for metric, add in (
                ("fleetd_vllm_inter_token_latency_seconds_sum", itl * tokens),
                ("fleetd_vllm_inter_token_latency_seconds_count", tokens),
                ("fleetd_vllm_prompt_tokens_total", 600 * tokens / 300 * rng.uniform(0.8, 1.2)),
                ("fleetd_vllm_e2e_request_latency_seconds_count", tokens / 300),
            ):
                totals[(metric, w)] = totals.get((metric, w), 0.0) + add
                readings.append(Reading(metric, wl, totals[(metric, w)], t))
            totals[("tok", w)] = totals.get(("tok", w), 0.0) + tokens
            readings.append(
                Reading("fleetd_vllm_generation_tokens_total", gl, totals[("tok", w)], t)
            )
            readings.append(Reading("fleetd_vllm_requests_running", gl, round(batch), t))
            readings.append(Reading("fleetd_vllm_up", gl, 1.0, t))
            gd = {"gpu": w, "uuid": f"U{w}"}
            clock = 2.4e9 * (0.55 + 0.45 * load) * rng.uniform(0.98, 1.02)
            readings.append(
                Reading("fleetd_gpu_clock_hertz", make_labels({**gd, "domain": "gfx"}), clock, t)
            )
            throttle = max(0.0, rng.gauss(0.02, 0.02))
            ppt = make_labels({**gd, "reason": "ppt"})
            readings.append(Reading("fleetd_gpu_throttle_ratio", ppt, throttle, t))
        window.append(readings)
        t += step


def test_a_simulated_healthy_day_raises_no_verdict() -> None:
    window = MemoryWindow(retention=2 * 86400)
    start = 1_767_225_600.0
    feed_day(window, start, hours=24, step=60.0)
    workers = [VllmWorkerConfig(name=f"w{i}", url="http://127.0.0.1:1", gpus=[i]) for i in range(8)]
    peers = PeerComparison(workers, SETTINGS)
    outliers = []
    compared = 0
    for k in range(1, 24 * 12):  # every 5 minutes
        now = start + k * 300
        readings = peers.assess(window, now)
        outliers += [r for r in readings if r.metric == SLOWDOWN]
        compared += sum(1 for r in readings if r.metric == COMPARED and r.value == 1.0)
    assert outliers == []
    assert compared >= 0.95 * 8 * (24 * 12 - 1)  # and it did compare, all day


# ----------------------------------------------------------------------- over real HTTP
@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[FakeClock, object, StandInFleet]]:
    clock = FakeClock(1_767_225_600.0)
    rig = make_rig(clock, load=0.6)
    fleet = StandInFleet(tmp_path, clock=clock, processes=rig.node)
    try:
        yield clock, rig, fleet
    finally:
        fleet.close()
        rig.close()


def run_node(clock: FakeClock, rig: object, fleet: StandInFleet, minutes: int) -> list[Reading]:
    workers = [VllmWorkerConfig(name=w.name, url=w.url, gpus=list(w.gpus))
               for w in fleet.workers.values()]  # fmt: skip
    window = MemoryWindow(retention=3600)
    peers = PeerComparison(workers, SETTINGS)
    import requests

    last: list[Reading] = []
    with requests.Session() as session:
        scraper = VllmScraper(workers, session)
        for _ in range(minutes * 2):
            for w in fleet.workers.values():
                running, waiting = w.load()
                if running + waiting < 6:
                    w.add_requests(6 - running - waiting, duration_s=4.0)
            clock.advance(30)
            now = clock.now()
            window.append(rig.poller.poll(now).readings)  # type: ignore[attr-defined]
            window.append(scraper.scrape(now).readings)
            last = peers.assess(window, now)
    return last


def slow_ones(readings: list[Reading]) -> dict[str, str]:
    return {
        dict(r.labels)["worker"]: dict(r.labels)["attribution"]
        for r in readings
        if r.metric == SLOWDOWN
    }


def add_workers(fleet: StandInFleet) -> list[StandInVllm]:
    return [fleet.add(f"gpu{g}", [g], max_running=8, tokens_per_s=40.0) for g in range(8)]


def test_a_throttled_gpu_is_found_and_blamed_on_the_hardware(node) -> None:  # type: ignore[no-untyped-def]
    clock, rig, fleet = node
    add_workers(fleet)
    rig.node.inject(5, "thermal_runaway", delta_c=48, hbm_delta_c=40)
    assert slow_ones(run_node(clock, rig, fleet, minutes=8)) == {"gpu5": "hardware"}


def test_a_slow_engine_on_healthy_gpus_is_blamed_on_the_engine(node) -> None:  # type: ignore[no-untyped-def]
    clock, rig, fleet = node
    workers = add_workers(fleet)
    workers[2].engine_speed = 0.7
    assert slow_ones(run_node(clock, rig, fleet, minutes=7)) == {"gpu2": "engine"}


def test_a_traffic_shift_on_one_worker_is_blamed_on_the_workload(node) -> None:  # type: ignore[no-untyped-def]
    clock, rig, fleet = node
    workers = add_workers(fleet)
    workers[6].prompt_tokens = 4096  # long prompts, and decoding with them is slower
    workers[6].engine_speed = 0.75
    assert slow_ones(run_node(clock, rig, fleet, minutes=7)) == {"gpu6": "workload"}


def test_a_link_trained_down_is_blamed_on_the_hardware(node) -> None:  # type: ignore[no-untyped-def]
    clock, rig, fleet = node
    add_workers(fleet)
    rig.node.inject(4, "pcie_downgrade", width=8, speed_mts=32000)  # x16 -> x8: 25 % slower
    assert slow_ones(run_node(clock, rig, fleet, minutes=7)) == {"gpu4": "hardware"}
