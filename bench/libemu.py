"""Benchmark: the real amdsmi package over the emulated libamd_smi.so, against the stand-in.

Reports the time to generate and compile the library, the median wall time per call of a
few functions through each face, the median wall time of one poll of an 8-GPU MI355X
node by fleetd's backend and poller through each face, and the cost model: for every amdsmi
function a poll calls, how often per GPU per poll and its mean wall time per call through
each face (the backend's own call meter). Prints ONE JSON line.

    python bench/libemu.py [--calls 300] [--polls 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.logs import configure_logging
from fleetd.sim import RawLibrary, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import EmulatedLibrary, SimProvider, build_library


def median_us(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return round(statistics.median(samples) * 1e6, 1)


class Recorder:
    """Wraps a face: while ``on``, every amdsmi_* call's wall time is kept, by function."""

    def __init__(self, face: Any) -> None:
        self._face = face
        self.on = False
        self.samples: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._face, name)
        if not (name.startswith("amdsmi_") and callable(target)):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return target(*args, **kwargs)
            start = time.perf_counter()
            try:
                return target(*args, **kwargs)
            finally:
                self.samples.setdefault(name, []).append(time.perf_counter() - start)

        return call

    def cost(self, polls: int, gpus: int) -> dict[str, tuple[float, float]]:
        """function → (calls per GPU per poll, median wall µs per call), costliest first."""
        out = {
            name: (round(len(v) / polls / gpus, 2), round(statistics.median(v) * 1e6, 1))
            for name, v in self.samples.items()
        }
        return dict(sorted(out.items(), key=lambda kv: -kv[1][0] * kv[1][1]))


def calls_per_gpu_per_poll(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], polls: int, gpus: int
) -> float:
    """Every amdsmi call the backend's meter counted between two totals, per GPU per poll."""
    calls = sum(count - before.get(name, (0, 0.0))[0] for name, (count, _) in after.items())
    return round(calls / polls / gpus, 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--polls", type=int, default=20)
    options = parser.parse_args()
    configure_logging("json", "warning")
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        library = EmulatedLibrary(build_library(Path(cache)))
        build_s = time.perf_counter() - start
        amdsmi = library.import_amdsmi()
        clock = FakeClock()
        node = build_node("MI355X", seed=1, clock=clock)
        node.set_load(None, 0.6)
        library.install(SimProvider(amdsmi.amdsmi_wrapper, RawLibrary(node)))
        faces = {"stand_in": SimulatedAmdSmi(node), "real": amdsmi}
        result: dict[str, Any] = {"bench": "libemu", "build_s": round(build_s, 3)}
        for label, face in faces.items():
            face.amdsmi_init()
            h = face.amdsmi_get_processor_handles()[0]
            for name in ("amdsmi_get_power_info", "amdsmi_get_gpu_metrics_info"):
                fn = getattr(face, name)
                result[f"{label}_{name.removeprefix('amdsmi_get_')}_us"] = median_us(
                    lambda fn=fn, h=h: fn(h), options.calls
                )
            recorder = Recorder(face)
            backend = AmdSmiBackend(recorder)
            gpus = len(backend.gpus())
            poller = Poller(backend, default_collectors(), node="bench", gpu_timeout=10.0)
            try:
                poller.poll(clock.advance(5))  # warm-up
                before = backend.meter.totals()
                result[f"{label}_poll_ms"] = round(
                    median_us(lambda p=poller: p.poll(clock.advance(5)), options.polls) / 1000, 2
                )
                result[f"{label}_calls_per_gpu_per_poll"] = calls_per_gpu_per_poll(
                    before, backend.meter.totals(), options.polls, gpus
                )
                # the cost model: the same collectors one GPU after another on this thread, so
                # a call's time is its own (the poller's threads would add waits for the GIL),
                # with the simulated node advanced before the clock starts
                collectors = default_collectors()
                recorder.on = True
                for _ in range(options.polls):
                    now = clock.advance(5)
                    node.sync()
                    for gpu in backend.sources():
                        for collector in collectors:
                            collector.collect(gpu, now)
                recorder.on = False
                cost = recorder.cost(options.polls, gpus)
                result[f"{label}_cost_per_call_us"] = {n: us for n, (_, us) in cost.items()}
                if label == "real":
                    result["calls_per_gpu_per_poll"] = {n: c for n, (c, _) in cost.items()}
            finally:
                poller.close()
                backend.close()
        library.install(None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
