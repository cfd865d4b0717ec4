"""Latency-quantile evaluation cost: 8 vLLM workers x 20 histograms x 24 h of history.

Each worker exports 20 latency histograms of 20 buckets (vLLM's six real families plus
fourteen more of the same shape, as a worker with speculative decoding, LoRA and per-stage
timings would), scraped every ``--scrape`` seconds for ``--hours`` into the rules' memory
window: 3,200 bucket series. 60 rules read them — p50, p95 and p99 of every histogram per
worker and model, ``histogram_quantile(q, sum by (worker, model, le) (rate(x_bucket[5m])))``,
with thresholds a healthy node stays clear of. Each measured tick appends one scrape (not
timed), then times ``RuleEngine.evaluate``; a second figure times ``histogram_quantile`` alone
on the 160 histograms' rates. Prints one JSON line.

    python -m bench.slo [--ticks 200] [--hours 24] [--scrape 30]   (as a module: bench/http.py
    would shadow the standard library's http package)
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetd.model import Labels, Reading, SeriesKey, make_labels
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.rules.quantile import histogram_quantile
from fleetd.store.memory import MemoryWindow
from fleetd.vllm.serving import HISTOGRAMS, le_text

WORKERS = 8
HISTOGRAM_COUNT = 20
BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5, 10.0, 20.0, 40.0, 80.0, math.inf)  # fmt: skip
QUANTILES = (0.5, 0.95, 0.99)
T_END = 1_767_225_600.0
MODEL = "meta-llama/Llama-3.3-70B-Instruct"


def families() -> list[str]:
    real = list(HISTOGRAMS)
    extra = [f"fleetd_vllm_bench_stage{i:02d}_seconds" for i in range(HISTOGRAM_COUNT - len(real))]
    return real + extra


def bucket_keys() -> list[tuple[SeriesKey, float]]:
    """(bucket series, share of requests at or below its bound)."""
    out: list[tuple[SeriesKey, float]] = []
    for family in families():
        for w in range(WORKERS):
            for bound in BOUNDS:
                share = 1.0 if bound == math.inf else 1.0 - math.exp(-bound / 0.3)
                labels = make_labels({"worker": f"gpu{w}", "model": MODEL, "le": le_text(bound)})
                out.append((SeriesKey(f"{family}_bucket", labels), share))
    return out


def rules_text() -> str:
    lines = ["rules:"]
    for i, family in enumerate(families()):
        for q in QUANTILES:
            lines += [
                f"  - name: Quantile{i:02d}p{int(q * 100):02d}",
                "    expr: >-",
                f"      histogram_quantile({q}, sum by (worker, model, le)"
                f" (rate({family}_bucket[5m]))) > 1000",
                "    for: 5m",
                "    severity: warning",
                "    health: false",
            ]
    return "\n".join(lines) + "\n"


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--scrape", type=float, default=30.0, help="seconds between scrapes")
    args = parser.parse_args()

    started = time.perf_counter()
    keys = bucket_keys()
    rate_per_s = 4.0  # requests per second per worker
    history = int(args.hours * 3600 / args.scrape)
    t_start = T_END - history * args.scrape
    window = MemoryWindow(retention=args.hours * 3600 + 3600)
    times = [t_start + i * args.scrape for i in range(history)]
    for key, share in keys:
        values = [math.floor(rate_per_s * share * (t - t_start)) for t in times]
        window.load_columns(key, times, values)
    window.mark_complete_after(t_start - 1)
    samples = window.sample_count()
    gc.collect()

    path = Path("/tmp") / f"fleetd_bench_slo_{os.getpid()}.yaml"
    path.write_text(rules_text())
    try:
        rules = load_rule_set([path])
    finally:
        path.unlink()
    engine = RuleEngine(
        rules, EngineSettings(poll_interval_s=args.scrape), node="bench", timer=time.perf_counter
    )
    setup_s = time.perf_counter() - started

    rng = random.Random(7)
    durations: list[float] = []
    cpu: list[float] = []
    now = times[-1]
    for _ in range(args.ticks + 1):
        now += args.scrape
        jitter = rng.uniform(0.9, 1.1)
        window.append(
            [
                Reading(
                    k.metric, k.labels, math.floor(rate_per_s * s * jitter * (now - t_start)), now
                )
                for k, s in keys
            ]
        )
        c0, t0 = time.thread_time(), time.perf_counter()
        engine.evaluate(window, now)
        durations.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.thread_time() - c0) * 1000.0)
    failing = [s.rule for s in engine.rule_statuses() if s.health != "ok"]
    first = durations.pop(0)
    cpu.pop(0)
    durations.sort()
    cpu.sort()

    # histogram_quantile alone over the 160 histograms' bucket rates
    rates: dict[str, dict[Labels, float]] = {}
    for key, share in keys:
        rates.setdefault(key.metric, {})[key.labels] = rate_per_s * share
    q_cpu: list[float] = []
    for _ in range(50):
        c0 = time.thread_time()
        for vector in rates.values():
            for q in QUANTILES:
                histogram_quantile(q, vector)
        q_cpu.append((time.thread_time() - c0) * 1000.0)
    q_cpu.sort()
    print(
        json.dumps(
            {
                "bench": "slo",
                "workers": WORKERS,
                "histograms_per_worker": HISTOGRAM_COUNT,
                "bucket_series": len(keys),
                "rules": len(rules),
                "history_hours": args.hours,
                "scrape_s": args.scrape,
                "samples_in_window": samples,
                "evaluations": args.ticks,
                "ms_per_eval_median": round(statistics.median(durations), 3),
                "ms_per_eval_p99": round(_p99(durations), 3),
                "cpu_ms_per_eval_median": round(statistics.median(cpu), 3),
                "cpu_ms_per_eval_p99": round(_p99(cpu), 3),
                "quantile_only_cpu_ms_480_median": round(statistics.median(q_cpu), 3),
                "first_eval_ms": round(first, 1),
                "alerts": len(engine.alerts()),
                "failing_rules": failing,
                "load_average_1m": round(os.getloadavg()[0], 2),
                "setup_s": round(setup_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
