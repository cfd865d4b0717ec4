"""Reading one vLLM worker's /metrics: fleetd's parser against prometheus_client's.

The text is what a vLLM V1 server exports through prometheus_client, rendered by
prometheus_client itself: the six latency histograms fleetd reads (vLLM's bucket layouts, from
the stand-in) and the gauges and counters, plus the families fleetd does not read but a real
server exports beside them (token-count and iteration histograms, the process and Python GC
collectors), for ``--models`` models on one engine. Prints one JSON line: lines and samples
per scrape, CPU per scrape through ``parse_vllm_metrics`` (fleetd's fast reader, with the
library as its fallback) and through prometheus_client's parser alone, and for a node of
eight workers the CPU per scrape interval.

    python bench/vllm_parse.py [--models 2] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import (
    GC_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

from fleetd.sim.vllm_worker import HISTOGRAMS
from fleetd.vllm.metrics import parse_vllm_metrics

# families a vLLM V1 server exports that fleetd does not read (names from vllm/v1/metrics)
OTHER_HISTOGRAMS: dict[str, list[float]] = {
    "vllm:request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
    "vllm:request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    "vllm:iteration_tokens_total": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    "vllm:request_params_n": [1, 2, 5, 10, 20],
    "vllm:request_params_max_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    "vllm:request_inference_time_seconds": [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30],
}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
COUNTERS = (
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
)


def vllm_text(models: int) -> str:
    registry = CollectorRegistry()
    registry.register(PROCESS_COLLECTOR)
    registry.register(GC_COLLECTOR)
    labels = ["model_name", "engine"]
    hists = [
        Histogram(name, "Latency.", labels, buckets=list(bounds), registry=registry)
        for name, bounds in HISTOGRAMS
    ] + [
        Histogram(name, "Other.", labels, buckets=bounds, registry=registry)
        for name, bounds in OTHER_HISTOGRAMS.items()
    ]
    gauges = [Gauge(name, "Gauge.", labels, registry=registry) for name in GAUGES]
    counters = [Counter(name, "Counter.", labels, registry=registry) for name in COUNTERS]
    success = Counter(
        "vllm:request_success", "Finished.", [*labels, "finished_reason"], registry=registry
    )
    for m in range(models):
        model = (f"meta-llama/Llama-3.3-70B-Instruct-{m}", "0")
        for i, hist in enumerate(hists):
            for k in range(50):
                hist.labels(*model).observe(0.01 * (k + 1) * (i + 1))
        for gauge in gauges:
            gauge.labels(*model).set(0.5)
        for counter in counters:
            counter.labels(*model).inc(1234)
        for reason in ("stop", "length", "abort"):
            success.labels(*model, reason).inc(10)
    return generate_latest(registry).decode()


def cpu_ms(work: Callable[[str], object], text: str, repeat: int) -> list[float]:
    """CPU milliseconds of each of ``repeat`` calls of ``work`` on ``text``."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        work(text)
        times.append((time.process_time() - start) * 1000)
    return times


def library(text: str) -> None:
    for family in text_string_to_metric_families(text):
        _ = family.samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    text = vllm_text(args.models)
    samples = sum(len(f.samples) for f in text_string_to_metric_families(text))
    ours = cpu_ms(parse_vllm_metrics, text, args.repeat)
    theirs = cpu_ms(library, text, max(20, args.repeat // 5))
    ours_ms, theirs_ms = statistics.median(ours), statistics.median(theirs)
    print(
        json.dumps(
            {
                "bench": "vllm_parse",
                "models": args.models,
                "lines": text.count("\n"),
                "samples": samples,
                "fleetd_parse_ms_median": round(ours_ms, 3),
                "fleetd_parse_ms_p99": round(sorted(ours)[int(0.99 * (len(ours) - 1))], 3),
                "prometheus_client_parse_ms_median": round(theirs_ms, 3),
                "speedup": round(theirs_ms / ours_ms, 1),
                "node_of_8_workers_ms_per_scrape": round(8 * ours_ms, 2),
                "node_of_8_workers_ms_per_scrape_library": round(8 * theirs_ms, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
