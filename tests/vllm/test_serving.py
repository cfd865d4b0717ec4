"""vLLM's latency histograms and serving counters: real names, renames, bounded labels, and
inconsistent histograms skipped with a reason; the stand-in exports them, its latency
following the simulated GPU's clocks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.collect.catalog import CATALOG
from fleetd.collect.exporter import _family_name
from fleetd.model import label_value
from fleetd.rules.quantile import bucket_quantile
from fleetd.sim import build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.vllm.collector import VllmScraper, serving_readings
from fleetd.vllm.config import VllmWorkerConfig
from fleetd.vllm.metrics import parse_vllm_metrics
from fleetd.vllm.serving import COUNTERS, FINISHED, HISTOGRAMS, MAX_MODELS

TTFT = "fleetd_vllm_time_to_first_token_seconds"
ITL = "fleetd_vllm_inter_token_latency_seconds"


def hist(
    name: str, labels: str, counts: list[tuple[str, float]], total: float | None = None
) -> str:
    lines = [f"# TYPE {name} histogram"]
    for le, n in counts:
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {n}')
    last = counts[-1][1] if total is None else total
    lines.append(f"{name}_sum{{{labels}}} 1.5")
    lines.append(f"{name}_count{{{labels}}} {last}")
    return "\n".join(lines) + "\n"


E0 = 'engine="0",model_name="m"'
E1 = 'engine="1",model_name="m"'


def test_engines_are_summed_and_le_is_canonical() -> None:
    text = hist("vllm:time_to_first_token_seconds", E0, [("0.1", 1), ("1", 3), ("+Inf", 4)])
    text += hist("vllm:time_to_first_token_seconds", E1, [("0.1", 2), ("1.0", 2), ("+Inf", 2)])
    serving = parse_vllm_metrics(text).serving
    h = serving.histograms[(TTFT, "m")]
    assert h.buckets == ((0.1, 3.0), (1.0, 5.0), (float("inf"), 6.0)) and h.count == 6.0
    worker = VllmWorkerConfig(name="w0", url="http://127.0.0.1:1", gpus=[0, 1])
    readings = serving_readings(worker, serving, 10.0)
    les = [label_value(r.labels, "le") for r in readings if r.metric == TTFT + "_bucket"]
    assert les == ["0.1", "1.0", "+Inf"]
    assert all(label_value(r.labels, "gpu") is None for r in readings)  # one copy per worker
    assert {_family_name(r.metric, CATALOG) for r in readings} <= set(CATALOG)


def test_the_newer_itl_name_wins_and_the_older_is_read_alone() -> None:
    old = hist("vllm:time_per_output_token_seconds", E0, [("0.1", 5), ("+Inf", 5)])
    new = hist("vllm:inter_token_latency_seconds", E0, [("0.1", 1), ("+Inf", 9)])
    assert parse_vllm_metrics(old).serving.histograms[(ITL, "m")].count == 5.0
    assert parse_vllm_metrics(old + new).serving.histograms[(ITL, "m")].count == 9.0
    assert parse_vllm_metrics(new + old).serving.histograms[(ITL, "m")].count == 9.0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (hist("vllm:time_to_first_token_seconds", E0, [("0.1", 1), ("1", 3)]), "no +Inf"),
        (hist("vllm:time_to_first_token_seconds", E0, [("0.1", 4), ("+Inf", 3)]), "decrease"),
        (hist("vllm:time_to_first_token_seconds", E0, [("0.1", 1), ("+Inf", 3)], 7), "_count"),
        (
            hist("vllm:time_to_first_token_seconds", E0, [("0.1", 1), ("+Inf", 3)])
            + hist("vllm:time_to_first_token_seconds", E1, [("0.2", 1), ("+Inf", 3)]),
            "disagree",
        ),
        (
            hist(
                "vllm:time_to_first_token_seconds",
                E0,
                [(str(i), i) for i in range(50)] + [("+Inf", 50)],
            ),
            "buckets",
        ),
    ],
)
def test_inconsistent_histograms_are_skipped_with_a_reason(text: str, why: str) -> None:
    serving = parse_vllm_metrics(text).serving
    assert (TTFT, "m") not in serving.histograms
    assert why in serving.skipped[(TTFT, "m")]


def test_labels_stay_bounded() -> None:
    text = "# TYPE vllm:request_success_total counter\n"
    for i in range(MAX_MODELS + 3):
        text += f'vllm:request_success_total{{model_name="m{i}",finished_reason="weird{i}"}} 1\n'
    text += 'vllm:request_success_total{model_name="m0",finished_reason="stop"} 4\n'
    text += "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total 2\n"
    text += "# TYPE vllm:gpu_prefix_cache_hits_total counter\nvllm:gpu_prefix_cache_hits_total 7\n"
    serving = parse_vllm_metrics(text).serving
    models = {m for m, _ in serving.finished}
    assert len(models) <= MAX_MODELS + 1 and "other" in models
    assert {r for _, r in serving.finished} == {"other", "stop"}
    assert serving.finished[("m0", "stop")] == 4.0
    assert serving.counters[("fleetd_vllm_preemptions_total", "other")] == 2.0
    assert serving.counters[("fleetd_vllm_prefix_cache_hits_total", "other")] == 7.0


def test_every_serving_series_is_catalogued() -> None:
    for family in HISTOGRAMS:
        assert CATALOG[family].type == "histogram"
        for suffix in ("_bucket", "_sum", "_count"):
            assert _family_name(family + suffix, CATALOG) == family
    assert set(COUNTERS) | {FINISHED} <= set(CATALOG)


def test_the_stand_in_exports_real_names_and_slows_down_with_its_gpu_clock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    node = build_node("MI355X", seed=1, clock=clock)
    node.set_load(None, 0.6)
    fleet = StandInFleet(tmp_path, clock=clock, processes=node)
    try:
        fast = fleet.add("gpu0", [0], max_running=4, tokens_per_s=40.0)
        slow = fleet.add("gpu1", [1], max_running=4, tokens_per_s=40.0)
        node.inject(1, "thermal_runaway", delta_c=48, hbm_delta_c=40)
        clock.advance(120)  # the GPU heats up past its throttle point
        node.sync()  # as a poll would
        for _ in range(20):
            fast.add_requests(2, duration_s=5.0)
            slow.add_requests(2, duration_s=5.0)
            clock.advance(6)
            node.sync()
        clock.advance(60)
        workers = [
            VllmWorkerConfig(name=w.name, url=w.url, gpus=list(w.gpus)) for w in (fast, slow)
        ]
        with requests.Session() as session:
            scrape = VllmScraper(workers, session).scrape(clock.now())
        itl: dict[str, list[tuple[float, float]]] = {}
        for r in scrape.readings:
            if r.metric == ITL + "_bucket" and r.value is not None:
                le = label_value(r.labels, "le")
                assert le is not None
                itl.setdefault(str(label_value(r.labels, "worker")), []).append(
                    (float(le), r.value)
                )
        p50 = {w: bucket_quantile(0.5, sorted(b)) for w, b in itl.items()}
        assert p50["gpu1"] > 1.2 * p50["gpu0"], p50
        text = requests.get(fast.url + "/metrics", timeout=2).text
        for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds",
                     "vllm:request_queue_time_seconds", "vllm:prompt_tokens_total"):  # fmt: skip
            assert name in text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        fleet.close()
