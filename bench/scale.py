"""Scale axes: fleetd's own CPU per daemon tick as devices, series and rules grow.

Each point runs the real daemon (poll, rules, SQLite store, alert delivery, remediation ticks,
store maintenance, every job at its own interval; a /metrics fetch every 5 ticks: see
bench/handdriven.py) ticked by hand on a fake clock over the
replay backend (fleetd.sim.replay): the simulated node is recorded first (its own CPU is not
measured), then replayed; the replay's own CPU (time.thread_time of every answer) is taken
off the process CPU (time.process_time, every thread), so the figure is fleetd's own.

- devices: an 8×MI300X node in SPX (8 devices), DPX (16) and CPX (64 logical devices); the
  series the node exports grow with them (about 1,000 → 5,000);
- rules: the 8-device node with the shipped rules plus generated copies of the shipped GPU
  rules (each a distinct rule over the same series) up to 100 and 500 rules.

``growth_vs_linear`` is (cost ratio) / (size ratio) from the first point: at most 1.0 means
the cost grows at most linearly. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout

from handdriven import HandDriven  # bench/, beside this file

from fleetd.logs import configure_logging
from fleetd.replay_wiring import RecordPlan, record_daemon
from fleetd.sim.replay import Recording

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_GPU_RULES = ROOT / "fleetd/data/rules/gpu.yaml"
PARTITIONS = (("SPX", 8), ("DPX", 16), ("CPX", 64))


def record(mode: str, ticks: int) -> Recording:
    plan = RecordPlan(model="MI300X", compute_partition=mode, ticks=ticks, load=0.6)
    return record_daemon(plan)


def generated_rules(directory: Path, count: int) -> int:
    """``count`` rules written as site rules: copies of the shipped GPU rules, renamed."""
    shipped = yaml.safe_load(SHIPPED_GPU_RULES.read_text())["rules"]
    rules = []
    for i in range(count):
        rule = dict(shipped[i % len(shipped)])
        rule["name"] = f"{rule['name']}Copy{i}"
        rule.pop("runbook", None)
        rules.append(rule)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "generated.yaml").write_text(yaml.safe_dump({"rules": rules}, sort_keys=False))
    return count


def measure(
    recording: Recording, *, warmup: int, ticks: int, rules_dir: Path | None = None
) -> dict[str, Any]:
    """The daemon's own CPU per tick over ``recording``."""
    driven = HandDriven("fleetd-bench-scale-", recording, rules_dir)
    replay = driven.replay
    driven.start()
    try:
        gc.collect()
        driven.run(warmup)
        cpu0, replay0 = time.process_time(), replay.cpu_s
        driven.run(ticks)
        cpu = time.process_time() - cpu0
        replay_cpu = replay.cpu_s - replay0
        rules = len(driven.daemon.engine.rules.rules)
        devices = len(driven.daemon.backend.gpus())
        text = driven.metrics_text
    finally:
        driven.stop()
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return {
        "devices": devices,
        "series": series,
        "rules": rules,
        "own_cpu_ms_per_tick": round(1000 * (cpu - replay_cpu) / ticks, 2),
        "replay_cpu_ms_per_tick": round(1000 * replay_cpu / ticks, 3),
        "replay_misses": sum(replay.misses.values()),
    }


def growth(points: list[dict[str, Any]], size_key: str) -> list[float]:
    first = points[0]
    return [
        round(
            (p["own_cpu_ms_per_tick"] / first["own_cpu_ms_per_tick"])
            / (p[size_key] / first[size_key]),
            2,
        )
        for p in points
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-ticks", type=int, default=24, help="ticks recorded per node")
    parser.add_argument("--warmup", type=int, default=12)
    parser.add_argument("--ticks", type=int, default=36, help="measured ticks per point")
    parser.add_argument("--rules", type=int, nargs="*", default=[100, 500])
    args = parser.parse_args()
    configure_logging("json", "warning", stream=sys.stderr)

    recordings = {mode: record(mode, args.record_ticks) for mode, _ in PARTITIONS}
    devices = [
        {"partition": mode, **measure(recordings[mode], warmup=args.warmup, ticks=args.ticks)}
        for mode, _ in PARTITIONS
    ]
    rules = [devices[0] | {"generated_rules": 0}]
    for count in args.rules:
        with tempfile.TemporaryDirectory(prefix="fleetd-bench-rules-") as tmp:
            added = generated_rules(Path(tmp), count - devices[0]["rules"])
            point = measure(
                recordings["SPX"], warmup=args.warmup, ticks=args.ticks, rules_dir=Path(tmp)
            )
            rules.append(point | {"generated_rules": added})
    device_growth = growth(devices, "devices")
    series_growth = growth(devices, "series")
    rule_growth = growth(rules, "rules")
    result = {
        "bench": "scale",
        "model": "MI300X",
        "ticks": args.ticks,
        "devices": devices,
        "rules": rules,
        "growth_vs_linear_devices": device_growth,
        "growth_vs_linear_series": series_growth,
        "growth_vs_linear_rules": rule_growth,
        "at_most_linear_devices": max(device_growth) <= 1.0,
        "at_most_linear_series": max(series_growth) <= 1.0,
        "at_most_linear_rules": max(rule_growth) <= 1.0,
        "cpu_64_over_8_devices": round(
            devices[-1]["own_cpu_ms_per_tick"] / devices[0]["own_cpu_ms_per_tick"], 2
        ),
        "note": "own_cpu_ms_per_tick = whole daemon tick (poll, rules, store, alerts, "
        "remediation; each job at its own interval, /metrics every 5 ticks) on a fake clock "
        "over the replay backend, less the replay's own CPU; growth_vs_linear = cost ratio / size "
        "ratio from the first point (<= 1: at most linear)",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
