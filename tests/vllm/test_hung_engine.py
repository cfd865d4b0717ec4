"""A hung vLLM engine (vllm-project/vllm#39863): /health and /v1/models answer 200 while the
engine makes no progress. The stand-in shows it, the scrape sees "Running 0, Waiting N" with
no tokens, and re-admission (health, models, then the 1-token completion — on by default)
refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.remedy.config import ReadmitConfig
from fleetd.sim.scenario import load_scenario
from fleetd.sim.vllm_worker import StandInFleet, StandInVllm
from fleetd.vllm.client import check_ready, fetch_values
from fleetd.vllm.config import VllmWorkerConfig


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[StandInFleet]:
    f = StandInFleet(tmp_path, clock=FakeClock())
    try:
        yield f
    finally:
        f.close()


def config(worker: StandInVllm) -> VllmWorkerConfig:
    return VllmWorkerConfig(name=worker.name, url=worker.url, gpus=list(worker.gpus))


def test_a_hung_engine_queues_everything_and_generates_nothing(fleet: StandInFleet) -> None:
    clock = fleet._clock
    assert isinstance(clock, FakeClock)
    w = fleet.add("w", [0], max_running=2, tokens_per_s=10.0)
    w.add_requests(3, duration_s=10.0)
    clock.advance(4)
    w.hang_engine()
    clock.advance(60)
    assert w.load() == (0, 3) and w.engine_mode() == "hung"
    assert w.generation_tokens() == pytest.approx(80.0)  # what ran before the hang
    with requests.Session() as session:
        up, values, reason = fetch_values(session, config(w), timeout=2)
    assert up and reason is None  # /health still answers 200
    assert (values.running, values.waiting, values.kv_cache_usage) == (0.0, 3.0, 0.0)
    w.add_requests(1, duration_s=10.0)  # new requests only queue
    assert w.load() == (0, 4)
    w.resume_engine()
    clock.advance(6)  # the two at the head finish their remaining 6 s
    assert w.load() == (2, 0) and w.completed == 2


def test_engine_steps_take_effect_at_their_own_time(fleet: StandInFleet) -> None:
    clock = fleet._clock
    assert isinstance(clock, FakeClock)
    w = fleet.add("gpu3", [3], max_running=4, tokens_per_s=10.0)
    w.add_requests(2, duration_s=100.0)
    scenario = load_scenario("vllm_hung_engine")
    assert fleet.follow(scenario.workers, start=clock.now()) == []
    assert fleet.follow(
        [*scenario.workers, scenario.workers[0].model_copy(update={"worker": "nobody"})],
        start=clock.now() + 1000,
    ) == ["nobody"]
    clock.advance(100)  # the hang came at 30 s, not when the clock was next read
    assert w.generation_tokens() == pytest.approx(2 * 10.0 * 30)
    assert w.load() == (0, 2)


def test_readmission_checks_health_models_then_a_completion_by_default(
    fleet: StandInFleet,
) -> None:
    assert ReadmitConfig().completion_check is True
    w = fleet.add("w", [0])
    cfg = config(w)
    with requests.Session() as session:
        ready = check_ready(session, cfg, timeout=2, completion=True)
        assert ready.ready, ready.detail
        w.hang_engine()
        hung = check_ready(session, cfg, timeout=0.3, completion=True)
        assert not hung.ready and "1-token completion" in hung.detail, hung.detail
        # without the probe, health and models would have let it back into rotation
        assert check_ready(session, cfg, timeout=2, completion=False).ready
        # the held probe counts as waiting while the connection is open
        assert "vllm:num_requests_waiting" in session.get(w.url + "/metrics", timeout=2).text
