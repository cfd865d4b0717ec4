"""Benchmark: CPU and memory of one poll of the simulated 8-GPU MI355X node.

Each measured iteration is poll + convert (parse, readings) + export (render /metrics text),
timed with time.process_time, which counts every thread of the process (the per-GPU workers
included). The simulator runs in-process, so its own CPU time is measured too — every call
into the simulated amdsmi module is timed with time.thread_time — and subtracted:
``cpu_ms_per_poll_*`` is fleetd's own cost; ``sim_cpu_ms_per_poll_median`` and
``total_cpu_ms_per_poll_median`` (fleetd + simulator) are reported beside it.

``generate_latest_cpu_ms_per_poll_median`` is the same with the export done by
prometheus_client.generate_latest instead of FleetdExporter.render.

Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.exporter import FleetdExporter
from fleetd.collect.poller import Poller
from fleetd.logs import configure_logging
from fleetd.sim import SimulatedAmdSmi, build_node


class TimedModule:
    """Wraps the simulated amdsmi module: every function call's CPU time is added up."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._lock = threading.Lock()
        self.cpu_s = 0.0
        self._wrapped: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        if wrapped is not None:
            return wrapped
        target = getattr(self._module, name)
        if not (callable(target) and name.startswith("amdsmi_")):
            return target
        wrapped = self._timed(target)
        self._wrapped[name] = wrapped
        return wrapped

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                with self._lock:
                    self.cpu_s += spent

        return call


def run(polls: int, warmup: int, timed: bool, export: str = "render") -> dict[str, Any]:
    clock = FakeClock()
    node = build_node("MI355X", seed=1, clock=clock)
    node.set_load(None, 0.6)
    module: Any = SimulatedAmdSmi(node)
    timer = TimedModule(module) if timed else None
    backend = AmdSmiBackend(timer if timer is not None else module)  # type: ignore[arg-type]
    poller = Poller(backend, default_collectors(), node="bench", gpu_timeout=5.0)
    registry = CollectorRegistry()
    exporter = FleetdExporter(registry)
    totals: list[float] = []
    sims: list[float] = []
    text = b""
    try:
        for i in range(warmup + polls):
            clock.advance(5.0)
            sim_before = timer.cpu_s if timer is not None else 0.0
            start = time.process_time()
            snapshot = poller.poll(clock.now())
            exporter.update(snapshot)
            text = exporter.render() if export == "render" else generate_latest(registry)
            spent = time.process_time() - start
            if i >= warmup:
                totals.append(spent)
                sims.append((timer.cpu_s - sim_before) if timer is not None else 0.0)
    finally:
        poller.close()
        backend.close()
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    return {"totals": totals, "sims": sims, "series": series, "gpus": len(snapshot.gpus)}


def ms(values: list[float], q: float | None = None) -> float:
    if q is None:
        return round(statistics.median(values) * 1000, 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    configure_logging("json", "warning", stream=sys.stderr)
    gc.collect()

    plain = run(args.polls, args.warmup, timed=False)
    timed = run(args.polls, args.warmup, timed=True)
    standard = run(args.polls, args.warmup, timed=True, export="generate_latest")
    standard_own = [t - s for t, s in zip(standard["totals"], standard["sims"], strict=True)]
    own = [t - s for t, s in zip(timed["totals"], timed["sims"], strict=True)]
    rss_mb = psutil.Process().memory_info().rss / (1024 * 1024)
    result = SimpleNamespace(
        gpus=plain["gpus"],
        series=plain["series"],
        cpu_ms_per_poll_median=ms(own),
        cpu_ms_per_poll_p99=ms(own, 99),
        rss_mb=round(rss_mb, 1),
        total_cpu_ms_per_poll_median=ms(plain["totals"]),
        total_cpu_ms_per_poll_p99=ms(plain["totals"], 99),
        sim_cpu_ms_per_poll_median=ms(timed["sims"]),
        generate_latest_cpu_ms_per_poll_median=ms(standard_own),
        polls=args.polls,
        note="cpu_ms_per_poll_* = poll+convert+export (FleetdExporter.render) CPU with the "
        "simulator's own CPU subtracted; total_* includes the simulator; "
        "generate_latest_* exports through prometheus_client.generate_latest instead",
    )
    print(json.dumps(vars(result)))


if __name__ == "__main__":
    main()
