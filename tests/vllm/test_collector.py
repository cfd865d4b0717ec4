"""vLLM scraping against real HTTP servers on loopback, and tokens per joule."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import requests
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from fleetd.collect.catalog import CATALOG
from fleetd.collect.exporter import _family_name
from fleetd.model import GpuIdentity, GpuStatus, Reading, Snapshot, label_value
from fleetd.vllm.collector import (
    TokensPerJouleTracker,
    VllmScraper,
    tokens_per_joule,
    tokens_per_second,
)
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import parse_vllm_metrics

NOW = 1_767_225_600.0

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama-70b"} 3.0
vllm:num_requests_running{engine="1",model_name="llama-70b"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama-70b"} 1.0
vllm:num_requests_waiting{engine="1",model_name="llama-70b"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama-70b"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="llama-70b"} 0.61
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama-70b"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="llama-70b"} 800.0
vllm:generation_tokens_created{engine="0",model_name="llama-70b"} 1.7672256e+09
# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="llama-70b"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama-70b"} 9.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="llama-70b"} 9.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="llama-70b"} 21.5
"""

OLD_VLLM_METRICS = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 4.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
"""


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _by(readings: list[Reading], metric: str, worker: str, gpu: str) -> Reading:
    for r in readings:
        if (
            r.metric == metric
            and label_value(r.labels, "worker") == worker
            and label_value(r.labels, "gpu") == gpu
        ):
            return r
    raise AssertionError(f"no {metric} for {worker}/{gpu}")


def test_parse_vllm_metrics_sums_engines_and_takes_fullest_kv_cache():
    values = parse_vllm_metrics(VLLM_METRICS)
    assert values.running == 5.0
    assert values.waiting == 1.0
    assert values.kv_cache_usage == pytest.approx(0.61)
    assert values.generation_tokens == 2000.0


def test_parse_vllm_metrics_falls_back_to_deprecated_cache_gauge():
    values = parse_vllm_metrics(OLD_VLLM_METRICS)
    assert values.kv_cache_usage == pytest.approx(0.25)
    assert values.generation_tokens is None  # absent, not zero


def test_parse_rejects_non_prometheus_text():
    with pytest.raises(ValueError):
        parse_vllm_metrics("<html>this is not metrics{{{</html>\n")


def test_scrape_healthy_worker_maps_readings_to_each_gpu(httpserver: HTTPServer, session):
    httpserver.expect_request("/health").respond_with_data("", status=200)
    httpserver.expect_request("/metrics").respond_with_data(VLLM_METRICS)
    worker = VllmWorkerConfig(name="llama", url=httpserver.url_for("/"), gpus=[2, 3])
    scrape = VllmScraper([worker], session, timeout=2.0).scrape(NOW)

    assert scrape.failed_workers == ()
    for gpu in ("2", "3"):
        assert _by(list(scrape.readings), "fleetd_vllm_up", "llama", gpu).value == 1.0
        assert _by(list(scrape.readings), "fleetd_vllm_requests_running", "llama", gpu).value == 5
        assert _by(list(scrape.readings), "fleetd_vllm_requests_waiting", "llama", gpu).value == 1
        kv = _by(list(scrape.readings), "fleetd_vllm_kv_cache_usage_ratio", "llama", gpu)
        assert kv.value == pytest.approx(0.61)
        tokens = _by(list(scrape.readings), "fleetd_vllm_generation_tokens_total", "llama", gpu)
        assert tokens.value == 2000
    assert {_family_name(r.metric, CATALOG) for r in scrape.readings} <= CATALOG.keys()
    assert all(r.ts == NOW for r in scrape.readings)


def test_dead_worker_is_down_with_missing_readings_and_never_raises(httpserver, session):
    httpserver.expect_request("/health").respond_with_data("", status=200)
    httpserver.expect_request("/metrics").respond_with_data(VLLM_METRICS)
    alive = VllmWorkerConfig(name="alive", url=httpserver.url_for("/"), gpus=[0])
    dead = VllmWorkerConfig(name="dead", url=f"http://127.0.0.1:{_free_port()}", gpus=[1])
    scrape = VllmScraper([dead, alive], session, timeout=2.0).scrape(NOW)

    assert scrape.failed_workers == ("dead",)
    readings = list(scrape.readings)
    assert _by(readings, "fleetd_vllm_up", "dead", "1").value == 0.0
    running = _by(readings, "fleetd_vllm_requests_running", "dead", "1")
    assert running.value is None and running.reason == "unreachable"
    assert _by(readings, "fleetd_vllm_up", "alive", "0").value == 1.0
    assert _by(readings, "fleetd_vllm_requests_running", "alive", "0").value == 5


def test_engine_dead_health_503_is_down_but_metrics_still_read(httpserver, session):
    httpserver.expect_request("/health").respond_with_data("", status=503)
    httpserver.expect_request("/metrics").respond_with_data(VLLM_METRICS)
    worker = VllmWorkerConfig(name="w", url=httpserver.url_for("/"), gpus=[0])
    scrape = VllmScraper([worker], session).scrape(NOW)
    readings = list(scrape.readings)
    assert _by(readings, "fleetd_vllm_up", "w", "0").value == 0.0
    assert _by(readings, "fleetd_vllm_requests_running", "w", "0").value == 5
    assert scrape.failed_workers == ("w",)


def test_slow_worker_times_out(httpserver, session):
    release = threading.Event()

    def stall(_request: Request) -> Response:
        release.wait(5.0)
        return Response("", status=200)

    httpserver.expect_request("/health").respond_with_handler(stall)
    worker = VllmWorkerConfig(name="slow", url=httpserver.url_for("/"), gpus=[4])
    try:
        scrape = VllmScraper([worker], session, timeout=0.2).scrape(NOW)
    finally:
        release.set()
    readings = list(scrape.readings)
    assert _by(readings, "fleetd_vllm_up", "slow", "4").value == 0.0
    waiting = _by(readings, "fleetd_vllm_requests_waiting", "slow", "4")
    assert waiting.value is None and waiting.reason == "timeout"


def test_garbage_metrics_are_missing_not_zero(httpserver, session):
    httpserver.expect_request("/health").respond_with_data("", status=200)
    httpserver.expect_request("/metrics").respond_with_data("not{{ prometheus", status=200)
    worker = VllmWorkerConfig(name="w", url=httpserver.url_for("/"), gpus=[0])
    readings = list(VllmScraper([worker], session).scrape(NOW).readings)
    assert _by(readings, "fleetd_vllm_up", "w", "0").value == 1.0
    kv = _by(readings, "fleetd_vllm_kv_cache_usage_ratio", "w", "0")
    assert kv.value is None and kv.reason == "bad_metrics"


def _gpu(index: int) -> GpuIdentity:
    return GpuIdentity(index=index, uuid=f"uuid-{index}", bdf=f"0000:{index:02x}:00.0")


GPUS = {i: _gpu(i) for i in range(4)}


def _value(readings: list[Reading], gpu: int) -> Reading:
    (match,) = [r for r in readings if label_value(r.labels, "gpu") == str(gpu)]
    assert match.metric == "fleetd_gpu_tokens_per_joule"
    return match


def test_tokens_per_joule_splits_multi_gpu_workers_evenly():
    workers = [
        VllmWorkerConfig(name="tp2", url="http://127.0.0.1:1", gpus=[0, 1]),
        VllmWorkerConfig(name="solo", url="http://127.0.0.1:2", gpus=[2]),
    ]
    readings = tokens_per_joule(
        workers,
        tokens_before={"tp2": 1000.0, "solo": 0.0},
        tokens_after={"tp2": 3000.0, "solo": 500.0},
        energy_before={0: 100.0, 1: 200.0, 2: 0.0},
        energy_after={0: 600.0, 1: 2200.0, 2: 250.0},
        gpus=GPUS,
        now=NOW,
    )
    assert _value(readings, 0).value == pytest.approx(1000 / 500)
    assert _value(readings, 1).value == pytest.approx(1000 / 2000)
    assert _value(readings, 2).value == pytest.approx(2.0)
    assert all(label_value(r.labels, "uuid") for r in readings)
    assert [label_value(r.labels, "gpu") for r in readings] == ["0", "1", "2"]  # 3 serves none


def test_tokens_per_joule_missing_energy_is_missing_not_zero():
    workers = [VllmWorkerConfig(name="w", url="http://127.0.0.1:1", gpus=[0, 1, 2, 3])]
    readings = tokens_per_joule(
        workers,
        tokens_before={"w": 0.0},
        tokens_after={"w": 400.0},
        energy_before={0: 10.0, 1: None, 2: 50.0, 3: 10.0},
        energy_after={0: 110.0, 1: 90.0, 2: 40.0, 3: 10.0},
        gpus=GPUS,
        now=NOW,
    )
    assert _value(readings, 0).value == pytest.approx(1.0)
    assert _value(readings, 1).value is None and _value(readings, 1).reason == "no_energy"
    assert _value(readings, 2).value is None and _value(readings, 2).reason == "counter_reset"
    assert _value(readings, 3).value is None and _value(readings, 3).reason == "no_energy_spent"


def test_tokens_per_joule_token_counter_reset_or_missing():
    workers = [
        VllmWorkerConfig(name="restarted", url="http://127.0.0.1:1", gpus=[0]),
        VllmWorkerConfig(name="down", url="http://127.0.0.1:2", gpus=[1]),
    ]
    readings = tokens_per_joule(
        workers,
        tokens_before={"restarted": 9000.0, "down": 10.0},
        tokens_after={"restarted": 50.0, "down": None},
        energy_before={0: 0.0, 1: 0.0},
        energy_after={0: 10.0, 1: 10.0},
        gpus=GPUS,
        now=NOW,
    )
    assert _value(readings, 0).reason == "counter_reset"
    assert _value(readings, 1).value is None


def _snapshot(energy: dict[int, float | None], ts: float) -> Snapshot:
    readings = tuple(
        Reading("fleetd_gpu_energy_joules_total", GPUS[i].labels, value, ts)
        for i, value in energy.items()
    )
    statuses = tuple(GpuStatus(gpu=GPUS[i], present=True, responsive=True) for i in energy)
    return Snapshot(node="n", ts=ts, gpus=statuses, readings=readings)


def test_tracker_uses_previous_scrape_as_interval_start():
    worker = VllmWorkerConfig(name="w", url="http://127.0.0.1:1", gpus=[0])
    tracker = TokensPerJouleTracker([worker])

    def scrape(tokens: float, ts: float) -> list[Reading]:
        labels = (("gpu", "0"), ("worker", "w"))
        return [Reading("fleetd_vllm_generation_tokens_total", labels, tokens, ts)]

    first = tracker.update(scrape(100.0, NOW), _snapshot({0: 1000.0}, NOW), NOW)
    assert first[0].value is None and first[0].reason == "no_previous_sample"
    second = tracker.update(scrape(700.0, NOW + 5), _snapshot({0: 1300.0}, NOW + 5), NOW + 5)
    assert second[0].value == pytest.approx(600 / 300)
    assert second[0].ts == NOW + 5


def test_tracker_divides_tokens_and_energy_over_the_same_interval():
    """Polls every 10 s, scrapes every 5 s: a scrape without a new poll has no new energy
    reading, so the tokens of that scrape wait for it instead of being divided by energy
    measured over another interval."""
    worker = VllmWorkerConfig(name="w", url="http://127.0.0.1:1", gpus=[0])
    tracker = TokensPerJouleTracker([worker])
    labels = (("gpu", "0"), ("worker", "w"))

    def scrape(tokens: float, ts: float) -> list[Reading]:
        return [Reading("fleetd_vllm_generation_tokens_total", labels, tokens, ts)]

    tracker.update(scrape(0.0, NOW), _snapshot({0: 0.0}, NOW), NOW)
    between = tracker.update(scrape(500.0, NOW + 5), _snapshot({0: 0.0}, NOW), NOW + 5)
    assert all(r.reason != "no_energy_spent" for r in between)
    later = tracker.update(scrape(1000.0, NOW + 10), _snapshot({0: 1000.0}, NOW + 10), NOW + 10)
    assert later[0].value == pytest.approx(1000 / 1000)  # 10 s of tokens over 10 s of energy


def test_tokens_per_second_is_per_worker_and_missing_without_a_previous_or_after_a_reset() -> None:
    workers = [
        VllmWorkerConfig(name=n, url="http://127.0.0.1:1", gpus=[i])
        for i, n in enumerate(("a", "b", "c", "d"))
    ]
    before = {"a": 1000.0, "b": 5000.0, "d": 10.0}
    after = {"a": 1600.0, "b": 100.0, "c": 50.0}
    out = {r.key.label("worker"): r for r in tokens_per_second(workers, before, after, 5.0, 9.0)}
    assert out["a"].value == 120.0
    assert out["b"].value is None and out["b"].reason == "counter_reset"
    assert out["c"].value is None and out["d"].value is None  # no previous / no total now
    first = tokens_per_second(workers, {}, after, None, 9.0)
    assert all(r.value is None for r in first)
