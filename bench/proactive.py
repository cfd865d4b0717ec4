"""Benchmark: fleetd's own overhead of rolling proactive validation (issue 20, item 6).

``run_overhead_s_*``: one proactive validation of the simulated 8-GPU MI355X hive, the whole
loop with every wait at zero — every stand-in vLLM worker out of rotation (HTTP hook), idle
reads, ``systemctl stop``, the process check, a ladder of ``--validators`` stand-in RVS
validators, ``systemctl start``, /health and the model, back into rotation — minus the time
spent outside the remediation code (the worker adapters, the GPU backend, the validators'
own processes), as ``bench/remedy.py`` measures a reset run. ``validators_s_median`` is the
validators' own runtime, reported beside it.

``check_s_*``: one scheduling decision of remediation's tick (when each hive is due, from the
journal; the headroom query over ``window`` of 1 s readings of every worker's running and
waiting requests and every GPU's gfx activity in a real ``MemoryWindow``). It runs once per
``check_interval``; ``watch_s_*`` is the check a tick makes while a validation runs.

Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmark this checkout

from bench.remedy import NODE, ladder_section, percentile, zero_wait_section
from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.logs import configure_logging
from fleetd.model import Reading, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.proactive import load_problem
from fleetd.remedy_wiring import build_remediation
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database, sqlite_url
from fleetd.store.memory import MemoryWindow

WINDOW = 900.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--workers", type=int, default=8, help="stand-in vLLM workers (GPUs)")
    parser.add_argument("--validators", type=int, default=3, help="command validators (>= 1)")
    parser.add_argument("--checks", type=int, default=200)
    args = parser.parse_args()
    with open(os.devnull, "w") as devnull:  # logs are rendered (part of the cost), discarded
        configure_logging("json", "info", stream=devnull)
        print(json.dumps(bench(args.runs, args.workers, max(1, args.validators), args.checks)))


def fill(window: MemoryWindow, workers: list[str], start: float, end: float) -> None:
    t = start
    while t <= end:
        readings = []
        for i, name in enumerate(workers):
            labels = make_labels({"worker": name, "gpu": i})
            readings.append(Reading("fleetd_vllm_requests_running", labels, 0.0, t))
            readings.append(Reading("fleetd_vllm_requests_waiting", labels, 0.0, t))
            gfx = make_labels({"gpu": i, "engine": "gfx"})
            readings.append(Reading("fleetd_gpu_utilization_ratio", gfx, 0.02, t))
        window.append(readings)
        t += 1.0


def bench(runs: int, workers: int, validators: int, checks: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fleetd-bench-proactive-"))
    clock = FakeClock()
    sim = build_node("MI355X", seed=11, clock=clock)
    fleet = StandInFleet(tmp / "standin", clock=clock, processes=sim)
    for gpu in range(workers):
        fleet.add(f"gpu{gpu}", [gpu], model="bench/llama-70b")
    os.environ["PATH"] = f"{fleet.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    out_url, in_url = fleet.rotation_urls()
    ladder = ladder_section(tmp, validators)
    ladder["plans"] = {"proactive": ladder["plans"]["reset"]}
    section = {
        **zero_wait_section(out_url, in_url),
        "validation": ladder,
        "proactive": {"enabled": True, "interval": "1h", "window": f"{WINDOW:g}s"},
    }
    config = FleetdConfig.model_validate(
        {
            "node": {"name": NODE},
            "state_dir": str(tmp),
            "vllm": {"workers": fleet.worker_config()},
            "remediation": section,
        }
    )
    db = Database.open(sqlite_url(tmp / "fleetd.db"))
    backend = AmdSmiBackend(SimulatedAmdSmi(sim))
    poller = Poller(
        backend, default_collectors(), node=NODE, gpu_timeout=5.0, timer=clock.monotonic
    )
    remediation = build_remediation(config, db=db, backend=backend, poller=poller, clock=clock)
    window = MemoryWindow(2 * WINDOW)
    remediation.attach_query(window)
    names = list(fleet.workers)
    executor = remediation.executor
    [hive] = remediation.hives()

    overheads: list[float] = []
    runtimes: list[float] = []
    walls: list[float] = []
    failures = 0
    for _ in range(runs):
        clock.advance(3600)
        busy0, validate0, validators0 = executor.busy_s, executor.validate_s, executor.validators_s
        t0 = time.perf_counter()
        run_id = remediation.open_proactive(hive, "bench", clock.now())
        ticks = 0
        while executor.active() and ticks < 1000:
            remediation.tick(clock.now())
            ticks += 1
        wall = time.perf_counter() - t0
        external = executor.busy_s - busy0
        own_in_validate = (executor.validate_s - validate0) - (executor.validators_s - validators0)
        walls.append(wall)
        overheads.append(wall - external + own_in_validate)
        runtimes.append(executor.validators_s - validators0)
        run = remediation.run(run_id)
        if run is None or run.state is not m.RunState.DONE or len(run.validation) != validators:
            failures += 1

    # the scheduling decision, with a full window of readings (nothing due: the journal says
    # the last run just began, so the whole decision up to the headroom query is timed apart)
    now = clock.now()
    fill(window, names, now - WINDOW, now)
    scheduler = remediation.proactive
    proactive = remediation.config.proactive
    check_times: list[float] = []
    watch_times: list[float] = []
    for _ in range(checks):
        t0 = time.perf_counter()
        scheduler.due(now)
        problem = load_problem(
            window,
            proactive,
            workers=names,
            gpus=list(hive),
            window=WINDOW,
            now=now,
            require=True,
        )
        check_times.append(time.perf_counter() - t0)
        assert problem is None, problem
        t0 = time.perf_counter()
        load_problem(
            window,
            proactive,
            workers=names,
            gpus=[],
            window=proactive.check_interval,
            now=now,
            require=False,
        )
        watch_times.append(time.perf_counter() - t0)
    fleet.close()
    poller.close()
    backend.close()
    db.dispose()
    return {
        "runs": runs,
        "completed": runs - failures,
        "workers": workers,
        "gpus_per_run": len(hive),
        "validators": validators,
        "resets": sim.reset_count(),
        "run_overhead_s_median": round(statistics.median(overheads), 4),
        "run_overhead_s_p99": round(percentile(overheads, 0.99), 4),
        "validators_s_median": round(statistics.median(runtimes), 4),
        "wall_s_median": round(statistics.median(walls), 4),
        "target_overhead_s": 0.5,
        "check_s_median": round(statistics.median(check_times), 5),
        "check_s_p99": round(percentile(check_times, 0.99), 5),
        "watch_s_median": round(statistics.median(watch_times), 5),
        "window_s": WINDOW,
    }


if __name__ == "__main__":
    main()
