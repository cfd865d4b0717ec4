"""Latency-quantile evaluation cost: 8 vLLM workers x 20 histograms x 24 h of history.

Each worker exports 20 latency histograms of 20 buckets (vLLM's six real families plus
fourteen more of the same shape, as a worker with speculative decoding, LoRA and per-stage
timings would), scraped every ``--scrape`` seconds for ``--hours`` into the rules' memory
window: 3,200 bucket series. 60 rules read them — p50, p95 and p99 of every histogram per
worker and model, ``histogram_quantile(q, sum by (worker, model, le) (rate(x_bucket[5m])))``,
with thresholds a healthy node stays clear of. Each measured tick appends one scrape (not
timed), then times ``RuleEngine.evaluate``; a second figure times ``histogram_quantile`` alone
on the 160 histograms' rates. Then the gray-failure detector (``fleetd/vllm/peers.py``) over
``--trials`` randomised runs of each scenario — clocks pulled down on one GPU (hardware), a slow
engine (engine), a traffic shift on one worker (workload), and a healthy node — through the
memory window as the daemon feeds it: detection delay (the verdict, plus the rule's
``for: 10m``) and a confusion table of true class against attribution. Last, the fleet-peer
comparison (``fleetd/vllm/fleet.py``): CPU per evaluation of one node's hive against the
figures a heartbeat read of 10, 100 and 1,000 peer nodes (8 workers each, same SKU and model).
Prints one JSON line.

    python bench/slo.py [--ticks 200] [--hours 24] [--scrape 30]
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
from fleetd.vllm.config import PeersConfig, VllmWorkerConfig
from fleetd.vllm.fleet import FleetView, ServingFigure, judge_fleet
from fleetd.vllm.peers import SLOWDOWN, PeerComparison
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


CLASSES = ("hardware", "engine", "workload", "healthy")
RULE_FOR_S = 600.0


def gray_trial(kind: str, seed: int) -> tuple[str, float | None]:
    """One randomised run: 8 workers, a fault on one of them at 10 minutes, comparisons every
    30 s for 15 minutes after it. Returns (attribution at first detection or "none", delay)."""
    rng = random.Random(seed)
    step, t0, start = 30.0, 600.0, T_END
    bad = rng.randrange(8)
    base = [0.025 * rng.uniform(0.95, 1.05) for _ in range(8)]
    window = MemoryWindow(retention=7200)
    workers = [VllmWorkerConfig(name=f"w{i}", url="http://127.0.0.1:1", gpus=[i]) for i in range(8)]
    peers = PeerComparison(workers, PeersConfig())
    totals: dict[tuple[str, int], float] = {}
    severity = rng.uniform(0.0, 1.0)
    detected: tuple[str, float] | None = None
    t = 0.0
    while t <= t0 + 900:
        readings: list[Reading] = []
        for w in range(8):
            faulty = w == bad and t >= t0 and kind != "healthy"
            batch = 10 * rng.uniform(0.9, 1.1)
            itl = base[w] * rng.uniform(0.97, 1.03)
            clock, prompt = 2.2e9 * rng.uniform(0.98, 1.02), 600.0 * rng.uniform(0.9, 1.1)
            if faulty and kind == "hardware":
                factor = 0.5 + 0.25 * severity  # clocks at 50-75 %
                clock *= factor
                itl /= factor
            elif faulty and kind == "engine":
                itl *= 1.25 + 0.35 * severity
            elif faulty and kind == "workload":
                prompt *= 3 + 5 * severity
                batch *= 1.8 + severity
                itl *= 1.2 + 0.3 * severity
            tokens = batch / itl * step
            wl = make_labels({"worker": f"w{w}", "model": MODEL})
            for metric, add in (
                ("fleetd_vllm_inter_token_latency_seconds_sum", itl * tokens),
                ("fleetd_vllm_inter_token_latency_seconds_count", tokens),
                ("fleetd_vllm_prompt_tokens_total", prompt * tokens / 256),
                ("fleetd_vllm_e2e_request_latency_seconds_count", tokens / 256),
            ):
                totals[(metric, w)] = totals.get((metric, w), 0.0) + add
                readings.append(Reading(metric, wl, totals[(metric, w)], start + t))
            gl = make_labels({"worker": f"w{w}", "gpu": w})
            readings.append(Reading("fleetd_vllm_requests_running", gl, batch, start + t))
            readings.append(Reading("fleetd_vllm_up", gl, 1.0, start + t))
            gpu = make_labels({"gpu": w, "uuid": f"U{w}", "domain": "gfx"})
            readings.append(Reading("fleetd_gpu_clock_hertz", gpu, clock, start + t))
        window.append(readings)
        if t >= t0 and detected is None:
            for r in peers.assess(window, start + t):
                if r.metric == SLOWDOWN and r.value:
                    detected = (dict(r.labels)["attribution"], t - t0 + RULE_FOR_S)
                    break
        t += step
    return (detected[0], detected[1]) if detected else ("none", None)


def gray_failures(trials: int) -> dict[str, object]:
    table = {kind: dict.fromkeys((*CLASSES[:3], "none"), 0) for kind in CLASSES}
    delays: list[float] = []
    c0 = time.process_time()
    for k, kind in enumerate(CLASSES):
        for i in range(trials):
            got, delay = gray_trial(kind, 1000 * k + i)
            table[kind][got] += 1
            if delay is not None and kind != "healthy":
                delays.append(delay)
    right = sum(table[kind][kind] for kind in CLASSES[:3]) + table["healthy"]["none"]
    delays.sort()
    return {
        "gray_trials_per_class": trials,
        "gray_confusion": table,  # true class -> attribution at first detection
        "gray_accuracy": round(right / (trials * len(CLASSES)), 3),
        "gray_delay_s_median": statistics.median(delays) if delays else None,
        "gray_delay_s_max": delays[-1] if delays else None,
        "gray_cpu_s": round(time.process_time() - c0, 1),
    }


def fleet_cost(peer_nodes: int, rng: random.Random) -> float:
    """Median CPU milliseconds of one fleet comparison against ``peer_nodes`` peers' rows."""

    def hive(node: str) -> list[ServingFigure]:
        return [
            ServingFigure(node, "0", f"w{i}", MODEL, "MI355X", (i,), T_END,
                          0.03 * rng.uniform(0.95, 1.05), 3.0, 2.1e9, 0.02, 8.0)
            for i in range(WORKERS)
        ]  # fmt: skip

    view = FleetView(tuple(f for n in range(peer_nodes) for f in hive(f"n{n}")), read_at=T_END)
    mine = hive("me")
    settings = PeersConfig()
    cpu = []
    for _ in range(20):
        c0 = time.thread_time()
        judge_fleet(mine, view, settings, T_END, max_age=60.0)
        cpu.append((time.thread_time() - c0) * 1000.0)
    return round(statistics.median(cpu), 3)


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--scrape", type=float, default=30.0, help="seconds between scrapes")
    parser.add_argument("--trials", type=int, default=25, help="gray-failure runs per class")
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
    gray = gray_failures(args.trials)
    fleet_rng = random.Random(5)
    fleet = {f"fleet_peer_cpu_ms_{n}_nodes": fleet_cost(n, fleet_rng) for n in (10, 100, 1000)}
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
                **gray,
                **fleet,
            }
        )
    )


if __name__ == "__main__":
    main()
