"""Benchmark: the real amdsmi package over the emulated libamd_smi.so, against the stand-in.

Reports the time to generate and compile the library, the median wall time per call of a
few functions through each face, and the median wall time of one poll of an 8-GPU MI355X
node by fleetd's backend and poller through each face. Prints ONE JSON line.

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
            backend = AmdSmiBackend(face)
            poller = Poller(backend, default_collectors(), node="bench", gpu_timeout=10.0)
            try:
                poller.poll(clock.advance(5))  # warm-up
                result[f"{label}_poll_ms"] = round(
                    median_us(lambda p=poller: p.poll(clock.advance(5)), options.polls) / 1000, 2
                )
            finally:
                poller.close()
                backend.close()
        library.install(None)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
