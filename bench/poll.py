"""Benchmark: CPU and memory of one poll of the simulated 8-GPU MI355X node.

Each measured iteration is poll + convert (parse, readings) + export (render /metrics text),
timed with time.process_time, which counts every thread of the process (the per-GPU workers
included). The simulator runs in-process, so its own CPU time is measured too — every call
into the simulated amdsmi module is timed with time.thread_time — and subtracted:
``cpu_ms_per_poll_*`` is fleetd's own cost; ``sim_cpu_ms_per_poll_median`` and
``total_cpu_ms_per_poll_median`` (fleetd + simulator) are reported beside it.

``generate_latest_cpu_ms_per_poll_median`` is the same with the export done by
prometheus_client.generate_latest instead of FleetdExporter.render.

``--node mi300x-cpx`` instead measures an 8×MI300X node in CPX (64 logical devices: board data
read once per physical GPU, from partition 0) against the same node in SPX, in alternating
rounds, both printed in the one JSON line with their ratio (the target is at most 2×).

Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
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
from fleetd.collect.config import CollectConfig
from fleetd.collect.exporter import FleetdExporter
from fleetd.collect.poller import Poller
from fleetd.config import PollConfig
from fleetd.logs import configure_logging
from fleetd.sim import SimulatedAmdSmi, build_node

COLLECT = CollectConfig()  # the daemon's default cadence tiers
SLOW_EVERY = COLLECT.slow_every
INTERVAL_S = PollConfig().interval  # the default poll interval
ROUNDS = 3  # --node mi300x-cpx: CPX and SPX measured in this many alternating rounds


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
        self.__dict__[name] = wrapped  # plain lookup from now on (no AttributeError per call)
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


def run(
    polls: int,
    warmup: int,
    timed: bool,
    export: str = "render",
    slow_every: int = SLOW_EVERY,
    *,
    model: str = "MI355X",
    compute: str = "SPX",
) -> dict[str, Any]:
    clock = FakeClock()
    node = build_node(model, seed=1, clock=clock, compute_partition=compute)
    node.set_load(None, 0.6)
    sysfs = Path(tempfile.mkdtemp(prefix="fleetd-bench-sysfs-"))
    module: Any = SimulatedAmdSmi(node)
    timer = TimedModule(module) if timed else None
    backend = AmdSmiBackend(  # as the daemon opens the simulator: with its fake sysfs tree
        timer if timer is not None else module, pci_root=node.attach_sysfs(sysfs)
    )
    collectors = default_collectors(
        processes_interval=PollConfig().slow_interval,
        slow_every=slow_every,
        ecc_guard=COLLECT.ecc_guard,
        metrics_table=COLLECT.metrics_table and slow_every > 1,
    )
    poller = Poller(backend, collectors, node="bench", gpu_timeout=5.0)
    calls_before: dict[str, tuple[int, float]] = {}
    registry = CollectorRegistry()
    exporter = FleetdExporter(registry)
    totals: list[float] = []
    sims: list[float] = []
    text = b""
    try:
        for i in range(warmup + polls):
            if i == warmup:
                calls_before = backend.meter.totals()
            clock.advance(INTERVAL_S)
            sim_before = timer.cpu_s if timer is not None else 0.0
            start = time.process_time()
            snapshot = poller.poll(clock.now())
            exporter.update(snapshot)
            text = exporter.render() if export == "render" else generate_latest(registry)
            spent = time.process_time() - start
            if i >= warmup:
                totals.append(spent)
                sims.append((timer.cpu_s - sim_before) if timer is not None else 0.0)
        calls = {
            name: count - calls_before.get(name, (0, 0.0))[0]
            for name, (count, _) in backend.meter.totals().items()
        }
    finally:
        poller.close()
        backend.close()
        shutil.rmtree(sysfs, ignore_errors=True)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    gpus = len(snapshot.gpus)
    per_gpu_tick = {
        name: round(count / polls / gpus, 3) for name, count in sorted(calls.items()) if count
    }
    return {
        "totals": totals,
        "sims": sims,
        "series": series,
        "gpus": gpus,
        "calls_per_gpu_per_tick": round(sum(per_gpu_tick.values()), 2),
        "calls_by_function": per_gpu_tick,
    }


def ms(values: list[float], q: float | None = None) -> float:
    if q is None:
        return round(statistics.median(values) * 1000, 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--node", choices=["mi355x", "mi300x-cpx"], default="mi355x")
    args = parser.parse_args()
    configure_logging("json", "warning", stream=sys.stderr)
    gc.collect()
    if args.node == "mi300x-cpx":
        print(json.dumps(partitioned(args.polls, args.warmup)))
        return

    plain = run(args.polls, args.warmup, timed=False)
    every_poll = run(max(60, args.polls // 5), args.warmup, timed=True, slow_every=1)
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
        amdsmi_calls_per_gpu_per_tick=plain["calls_per_gpu_per_tick"],
        amdsmi_calls_per_gpu_per_tick_slow_every_1=every_poll["calls_per_gpu_per_tick"],
        sim_cpu_ms_per_poll_median_slow_every_1=ms(every_poll["sims"]),
        amdsmi_calls_by_function=plain["calls_by_function"],
        slow_every=SLOW_EVERY,
        poll_interval_s=INTERVAL_S,
        polls=args.polls,
        note="cpu_ms_per_poll_* = poll+convert+export (FleetdExporter.render) CPU with the "
        "simulator's own CPU subtracted; total_* includes the simulator; "
        "generate_latest_* exports through prometheus_client.generate_latest instead; "
        "amdsmi calls counted by the backend's meter with the default cadence tiers "
        "(collect defaults) and as before them (every reading every poll by its own call)",
    )
    print(json.dumps(vars(result)))


def partitioned(polls: int, warmup: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """fleetd's own CPU per poll on an 8×MI300X node in CPX (64 devices) and in SPX.

    The two nodes are measured in ``rounds`` alternating rounds of ``polls / rounds`` polls
    each, so a burst of load from the machine's other tenants falls on both rather than on
    whichever ran second; the medians are over every measured poll of a mode."""
    figures: dict[str, Any] = {"node": "mi300x-cpx"}
    own: dict[str, list[float]] = {"CPX": [], "SPX": []}
    sims: dict[str, list[float]] = {"CPX": [], "SPX": []}
    last: dict[str, dict[str, Any]] = {}
    per_round = max(1, polls // rounds)
    for _ in range(rounds):
        for mode in ("CPX", "SPX"):
            timed = run(per_round, warmup, timed=True, model="MI300X", compute=mode)
            own[mode] += [t - s for t, s in zip(timed["totals"], timed["sims"], strict=True)]
            sims[mode] += timed["sims"]
            last[mode] = timed
    for mode in ("CPX", "SPX"):
        key = mode.lower()
        figures[f"{key}_gpus"] = last[mode]["gpus"]
        figures[f"{key}_series"] = last[mode]["series"]
        figures[f"{key}_cpu_ms_per_poll_median"] = ms(own[mode])
        figures[f"{key}_cpu_ms_per_poll_p99"] = ms(own[mode], 99)
        figures[f"{key}_sim_cpu_ms_per_poll_median"] = ms(sims[mode])
        figures[f"{key}_amdsmi_calls_per_gpu_per_tick"] = last[mode]["calls_per_gpu_per_tick"]
    figures["cpx_over_spx_cpu"] = round(
        figures["cpx_cpu_ms_per_poll_median"] / figures["spx_cpu_ms_per_poll_median"], 2
    )
    figures["target_max_ratio"] = 2.0
    figures["polls"] = per_round * rounds
    figures["rounds"] = rounds
    figures["note"] = (
        "cpu_ms_per_poll = poll+convert+export CPU with the simulator's own CPU subtracted; "
        "CPX: 64 logical devices polled as 8 physical GPUs (one job each), board-level "
        "collectors on the 8 partition-0 devices only; CPX and SPX alternate in rounds"
    )
    return figures


if __name__ == "__main__":
    main()
