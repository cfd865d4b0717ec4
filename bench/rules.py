"""Rule evaluation cost: the default pack plus 100 synthetic rules on an 8-GPU node.

The in-memory window holds a day of history at the default 5 s poll (every series a real
node exports: temperatures and limits, power, ECC per block, PCIe, XGMI per link, throttling,
utilisation, clocks, vLLM workers). Each measured tick appends one poll (not timed), then
times ``RuleEngine.evaluate``. Prints one JSON line: ms per evaluation, median and p99.

    python bench/rules.py [--ticks 300] [--hours 24]
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

from fleetd.model import Reading, Sample, SeriesKey, make_labels
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.store.memory import MemoryWindow

POLL_S = 5.0
GPUS = 8
T_END = 1_767_225_600.0


def node_series() -> dict[SeriesKey, tuple[str, float, float]]:
    """Every series of the node → (kind, base value, noise or counter rate per second)."""
    out: dict[SeriesKey, tuple[str, float, float]] = {}

    def put(
        metric: str, labels: dict[str, object], kind: str, base: float, spread: float = 0.0
    ) -> None:
        out[SeriesKey(metric, make_labels(labels))] = (kind, base, spread)

    for g in range(GPUS):
        gl: dict[str, object] = {"gpu": g, "uuid": f"GPU-{g:02d}"}
        put("fleetd_gpu_up", gl, "const", 1.0)
        put(
            "fleetd_gpu_info",
            {
                **gl,
                "bdf": f"0000:{g:02x}:00.0",
                "serial": f"S{g}",
                "product": "AMD Instinct MI355X",
                "model": "MI355X",
                "vbios": "v",
                "driver_version": "6.12",
                "kfd_id": g,
                "hip_id": g,
                "hive_id": "0x1",
            },
            "const",
            1.0,
        )
        for sensor, base in (("hotspot", 85.0), ("hbm", 70.0), ("edge", 60.0), ("vr", 65.0)):
            put("fleetd_gpu_temperature_celsius", {**gl, "sensor": sensor}, "gauge", base, 3.0)
        for sensor, crit in (("hotspot", 110.0), ("hbm", 100.0), ("edge", 100.0)):
            put(
                "fleetd_gpu_temperature_limit_celsius",
                {**gl, "sensor": sensor, "limit": "critical"},
                "const",
                crit,
            )
            put(
                "fleetd_gpu_temperature_limit_celsius",
                {**gl, "sensor": sensor, "limit": "emergency"},
                "const",
                crit + 5,
            )
        put("fleetd_gpu_power_watts", gl, "gauge", 1250.0, 60.0)
        put("fleetd_gpu_power_cap_watts", gl, "const", 1400.0)
        put("fleetd_gpu_energy_joules_total", gl, "counter", 0.0, 1250.0)
        for t in ("correctable", "uncorrectable", "deferred"):
            put(
                "fleetd_gpu_ecc_errors_total",
                {**gl, "type": t},
                "counter",
                3.0,
                0.0001 if t == "correctable" else 0.0,
            )
            for block in ("umc", "gfx", "xgmi_wafl", "sdma", "mmhub"):
                put(
                    "fleetd_gpu_ecc_block_errors_total",
                    {**gl, "block": block, "type": t},
                    "counter",
                    0.0,
                    0.0,
                )
        for block in ("umc", "gfx", "xgmi_wafl", "sdma", "mmhub"):
            put("fleetd_gpu_ecc_enabled", {**gl, "block": block}, "const", 1.0)
        for status in ("reserved", "pending", "unreservable"):
            put(
                "fleetd_gpu_retired_pages",
                {**gl, "status": status},
                "const",
                2.0 if status == "reserved" else 0.0,
            )
        put("fleetd_gpu_retired_pages_threshold", gl, "const", 612.0)
        put("fleetd_gpu_pcie_link_width_lanes", gl, "const", 16.0)
        put("fleetd_gpu_pcie_link_max_width_lanes", gl, "const", 16.0)
        put("fleetd_gpu_pcie_link_speed_gigatransfers_per_second", gl, "const", 32.0)
        put("fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second", gl, "const", 32.0)
        for metric in (
            "replays",
            "replay_rollovers",
            "l0_recoveries",
            "naks_sent",
            "naks_received",
        ):
            put(f"fleetd_gpu_pcie_{metric}_total", gl, "counter", 0.0, 0.001)
        for link in range(7):
            put("fleetd_gpu_xgmi_link_up", {**gl, "link": link}, "const", 1.0)
            put("fleetd_gpu_xgmi_read_bytes_total", {**gl, "link": link}, "counter", 0.0, 5e10)
            put("fleetd_gpu_xgmi_write_bytes_total", {**gl, "link": link}, "counter", 0.0, 4e10)
        for state, n in (("up", 7.0), ("down", 0.0), ("disabled", 0.0)):
            put("fleetd_gpu_xgmi_links", {**gl, "state": state}, "const", n)
        put("fleetd_gpu_xgmi_error_status", gl, "const", 0.0)
        for reason in ("ppt", "socket_thermal", "hbm_thermal", "vr_thermal", "prochot"):
            put(
                "fleetd_gpu_throttle_ratio",
                {**gl, "reason": reason},
                "gauge",
                0.02 if reason == "ppt" else 0.0,
                0.02,
            )
            put(
                "fleetd_gpu_throttle_residency_total",
                {**gl, "reason": reason},
                "counter",
                0.0,
                100.0,
            )
        put("fleetd_gpu_throttle_accumulation_total", gl, "counter", 0.0, 100000.0)
        for engine in ("gfx", "memory"):
            put("fleetd_gpu_utilization_ratio", {**gl, "engine": engine}, "gauge", 0.8, 0.15)
        put("fleetd_gpu_memory_used_bytes", gl, "gauge", 2.5e11, 1e9)
        put("fleetd_gpu_memory_total_bytes", gl, "const", 3.09e11)
        for domain, hz in (("gfx", 2.2e9), ("memory", 2.0e9), ("soc", 1.1e9)):
            put("fleetd_gpu_clock_hertz", {**gl, "domain": domain}, "gauge", hz, 1e8)
        vl = {"worker": f"vllm-{g}", "gpu": g}
        put("fleetd_vllm_up", vl, "const", 1.0)
        put("fleetd_vllm_requests_running", vl, "gauge", 12.0, 4.0)
        put("fleetd_vllm_requests_waiting", vl, "gauge", 2.0, 2.0)
        put("fleetd_vllm_kv_cache_usage_ratio", vl, "gauge", 0.6, 0.1)
        put("fleetd_vllm_generation_tokens_total", vl, "counter", 0.0, 3000.0)
    return out


def value_at(kind: str, base: float, spread: float, t: float, rng: random.Random) -> float:
    if kind == "const":
        return base
    if kind == "counter":
        return math.floor(base + spread * (t - (T_END - 86400.0 * 2)))
    return max(0.0, base + rng.uniform(-spread, spread))


def synthetic_rules(count: int) -> str:
    """Rules like a site would add: the same metrics, other windows (1 m to 1 h) and thresholds
    that a healthy node stays clear of, as in production where most rules are quiet."""
    templates = [
        'avg_over_time(fleetd_gpu_temperature_celsius{{sensor="hotspot"}}[{w}m]) > {t}',
        'max_over_time(fleetd_gpu_temperature_celsius{{sensor="hbm"}}[{w}m]) > {t}',
        "rate(fleetd_gpu_pcie_replays_total[{w}m]) * 60 > {t} / 10",
        'increase(fleetd_gpu_ecc_block_errors_total{{block="umc", type="correctable"}}[{w}m])'
        " > {t}",
        "avg_over_time(fleetd_gpu_power_watts[{w}m]) / fleetd_gpu_power_cap_watts > {t} / 90",
        'min_over_time(fleetd_gpu_utilization_ratio{{engine="gfx"}}[{w}m]) < {t} / 1000'
        " and on(gpu, uuid) fleetd_gpu_up == 1",
        "max by (gpu, uuid) (rate(fleetd_gpu_xgmi_read_bytes_total[{w}m])) > {t}e9",
        'changes(fleetd_gpu_clock_hertz{{domain="gfx"}}[{w}m]) > {t} * 100',
        "avg_over_time(fleetd_vllm_kv_cache_usage_ratio[{w}m]) > {t} / 100",
        "count by (gpu) (fleetd_gpu_xgmi_link_up == 0) > {t} / 90",
    ]
    lines = ["rules:" if count else "rules: []"]
    windows = (1, 5, 10, 15, 30, 60)
    for i in range(count):
        expr = templates[i % len(templates)].format(
            w=windows[(i // len(templates)) % len(windows)], t=96 + i % 4
        )
        lines += [
            f"  - name: Synthetic{i:03d}",
            f"    expr: '{expr}'",
            f"    for: {1 + i % 5}m",
            "    severity: warning",
            "    annotations: {summary: 'GPU {{ $labels.gpu }} value {{ $value | humanize }}'}",
        ]
    return "\n".join(lines) + "\n"


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--synthetic", type=int, default=100)
    args = parser.parse_args()

    started = time.perf_counter()
    series = node_series()
    rng = random.Random(42)
    history = int(args.hours * 3600 / POLL_S)
    t_start = T_END - history * POLL_S
    window = MemoryWindow(retention=args.hours * 3600 + 3600)
    times = [t_start + i * POLL_S for i in range(history)]
    data: dict[SeriesKey, list[Sample]] = {}
    for key, (kind, base, spread) in series.items():
        data[key] = [Sample(t, value_at(kind, base, spread, t, rng)) for t in times]
    window.load(data, complete_after=t_start - 1)
    samples = window.sample_count()
    del data
    gc.collect()

    synthetic = Path("/tmp") / f"fleetd_bench_rules_{id(window)}.yaml"
    synthetic.write_text(synthetic_rules(args.synthetic))
    try:
        rules = load_rule_set([shipped_rules_dir(), synthetic])
    finally:
        synthetic.unlink()
    engine = RuleEngine(
        rules, EngineSettings(poll_interval_s=POLL_S), node="bench", timer=time.perf_counter
    )
    setup_s = time.perf_counter() - started

    durations: list[float] = []
    cpu: list[float] = []
    now = times[-1]
    for _ in range(args.ticks + 1):
        now += POLL_S
        window.append(
            [Reading(k.metric, k.labels, value_at(*v, now, rng), now) for k, v in series.items()]
        )
        c0, t0 = time.thread_time(), time.perf_counter()
        engine.evaluate(window, now)
        durations.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.thread_time() - c0) * 1000.0)
    failing = [s.rule for s in engine.rule_statuses() if s.health != "ok"]
    first = durations.pop(0)  # the first tick loads each range group's history once
    cpu.pop(0)
    durations.sort()
    cpu.sort()
    print(
        json.dumps(
            {
                "bench": "rules",
                "rules": len(rules),
                "gpus": GPUS,
                "series": len(series),
                "samples_in_window": samples,
                "history_hours": args.hours,
                "evaluations": args.ticks,
                "ms_per_eval_median": round(statistics.median(durations), 3),
                "ms_per_eval_p99": round(_p99(durations), 3),
                "cpu_ms_per_eval_median": round(statistics.median(cpu), 3),
                "cpu_ms_per_eval_p99": round(_p99(cpu), 3),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "first_eval_ms": round(first, 1),
                "alerts": len(engine.alerts()),
                "failing_rules": failing,
                "setup_s": round(setup_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
