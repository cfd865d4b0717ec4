"""The readmission benchmark: the comparison against a baseline, the probe against the
stand-in (its speed follows the simulated GPU), the node's baseline file and the gate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.errors import ConfigError
from fleetd.sim.vllm_worker import StandInFleet, StandInVllm
from fleetd.vllm.benchmark import (
    Baseline,
    BaselineStore,
    BenchmarkGate,
    ProbeResult,
    compare,
    p99,
    run_probe,
)
from fleetd.vllm.config import BenchmarkConfig, VllmConfig, VllmWorkerConfig

FAST = BenchmarkConfig(requests=3, max_tokens=6, warmup=0, latency_factor=1.5, timeout=5.0)
# against the live stand-in only tokens/s decides: a p99 of 3 requests is their worst, which
# scheduling on a loaded test machine moves a lot
LIVE = FAST.model_copy(update={"latency_factor": None})
MODEL = "stand-in/llama-70b"


def result(tps: float = 100.0, ttft: float = 0.02, tpot: float = 0.004) -> ProbeResult:
    return ProbeResult(MODEL, tps, ttft, tpot, requests=3, tokens=18)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[StandInFleet]:
    f = StandInFleet(tmp_path, clock=FakeClock())
    try:
        yield f
    finally:
        f.close()


def config(worker: StandInVllm) -> VllmWorkerConfig:
    return VllmWorkerConfig(name=worker.name, url=worker.url, gpus=list(worker.gpus), model=MODEL)


def test_p99_is_the_nearest_rank() -> None:
    assert p99([0.1]) == 0.1
    assert p99([0.3, 0.1, 0.2]) == 0.3
    assert p99([float(i) for i in range(1, 201)]) == 198.0


def test_compare_passes_within_tolerance_and_names_each_figure_that_falls_short() -> None:
    base = result()
    ok = compare(result(tps=85.0, ttft=0.025, tpot=0.005), base, FAST)
    assert ok.ok and "baseline 100.0 tok/s" in ok.detail
    slow = compare(result(tps=50.0, ttft=0.02, tpot=0.008), base, FAST)
    assert not slow.ok
    assert "50.0 tok/s < 80.0 (baseline 100.0 × 0.8)" in slow.detail
    assert "TPOT p99 8.0 ms > 6.0 ms (baseline 4.0 ms × 1.5)" in slow.detail
    assert "TTFT" not in slow.detail
    late = compare(result(ttft=0.05), base, FAST)
    assert not late.ok and late.detail.startswith("below baseline: TTFT p99 50.0 ms")
    loose = FAST.model_copy(update={"latency_factor": None})
    assert compare(result(ttft=0.5, tpot=0.1), base, loose).ok  # tokens/s alone decides
    strict = compare(result(tps=85.0), base, FAST.model_copy(update={"tolerance": 0.9}))
    assert not strict.ok


def test_config_defaults_and_errors() -> None:
    cfg = VllmConfig().benchmark
    assert cfg.enabled and cfg.requests == 8 and cfg.tolerance == 0.8 and len(cfg.prompts) == 3
    with pytest.raises((ConfigError, ValueError)):
        VllmConfig.model_validate({"benchmark": {"tolerance": 1.5}})


def test_probe_speed_follows_the_simulated_gpu(fleet: StandInFleet) -> None:
    w = fleet.add("w", [0], model=MODEL)
    with requests.Session() as session:
        healthy = run_probe(session, config(w), LIVE)
        w.speed = lambda: 0.3  # clocks latched at about a third
        slow = run_probe(session, config(w), LIVE)
    assert healthy.tokens == 18 and healthy.requests == 3 and healthy.model == MODEL
    assert slow.tokens_per_s < 0.6 * healthy.tokens_per_s
    assert slow.tpot_p99_s > healthy.tpot_p99_s
    assert not compare(slow, healthy, LIVE).ok
    assert compare(healthy, healthy, LIVE).ok


def test_store_round_trip_replaces_per_worker_and_ignores_other_models(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "b.json")
    assert store.load() == {} and store.get("w", MODEL) is None
    store.save([Baseline("w", 10.0, result()), Baseline("v", 10.0, result(tps=5))])
    store.save([Baseline("w", 20.0, result(tps=7))])
    got = store.get("w", MODEL)
    assert got is not None and got.captured_at == 20.0 and got.result.tokens_per_s == 7
    assert store.get("v", MODEL) is not None and store.get("v", "other/model") is None
    (tmp_path / "b.json").write_text("{not json")
    assert store.load() == {}  # unreadable: as if none


def test_gate_skips_without_baseline_captures_and_then_compares(
    fleet: StandInFleet, tmp_path: Path
) -> None:
    w = fleet.add("w", [0], model=MODEL)
    gate = BenchmarkGate(LIVE, BaselineStore(tmp_path / "b.json"))
    skipped = gate.check(config(w), MODEL)
    assert skipped is not None and skipped.ok
    assert skipped.detail == f"benchmark skipped: no baseline for w ({MODEL})"
    [taken] = gate.capture([config(w)], now=5.0)
    assert taken.worker == "w" and taken.captured_at == 5.0
    passed = gate.check(config(w), MODEL)
    assert passed is not None and passed.ok
    w.engine_speed = 0.3
    failed = gate.check(config(w), MODEL)
    assert failed is not None and not failed.ok and "tok/s <" in failed.detail
    off = BenchmarkGate(LIVE.model_copy(update={"enabled": False}), gate.store)
    assert off.check(config(w), MODEL) is None


def test_a_probe_that_cannot_run_is_a_failure_with_why(fleet: StandInFleet, tmp_path: Path) -> None:
    w = fleet.add("w", [0], model=MODEL)
    gate = BenchmarkGate(FAST, BaselineStore(tmp_path / "b.json"))
    gate.capture([config(w)], now=1.0)
    w.refuse_completions_while = lambda: True
    failed = gate.check(config(w), MODEL)
    assert failed is not None and not failed.ok
    assert failed.detail == "benchmark probe failed: HTTP 503"
