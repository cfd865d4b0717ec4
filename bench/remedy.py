"""Benchmark: fleetd's own overhead per remediation run, with every configured wait at zero.

Each run is the whole loop on the simulated 8-GPU MI355X hive: an uncorrectable-error alert
on one GPU → every stand-in vLLM worker of the hive out of rotation (HTTP hook), two idle
reads of its /metrics, ``systemctl stop`` (the stand-in script on PATH) → process check →
one hive reset → re-enumeration and three verification polls through the real backend and
poller → ``systemctl start`` → /health, /v1/models and a 1-token completion → back into
rotation. The journal is a real SQLite file (WAL), the lease the per-node one.

``overhead_s_*`` is the wall time of a run minus the time spent outside the remediation
code — in the worker adapters (HTTP, subprocesses), the GPU backend and the poller (the
simulator) — i.e. the state machine, policy, journal writes, events, logging and the lease.
The external time and the whole wall time are reported beside it.

``ladder_*`` (``--validators N``, default 3): the validation ladder's cost. Every other run
has a ladder of N command validators (stand-ins that print an RVS log in the tool's format
and exit); ``validators_s_median`` is their own runtime (process start to exit), and
``ladder_overhead_s_median`` is fleetd's own part of the ladder per run, excluding that
runtime: the median overhead of a run with the ladder minus that of a run without it, plus
what carrying out the validators took beyond the processes themselves (reading their output,
parsing it, the verdict) — the extra journal writes, steps and events included.

``capture_s_*`` is the evidence bundle captured before each reset (issue 20): the raw reads
of the 8 GPUs of the hive through the simulated amdsmi, the events, the run's journal, gzip
and an fsync'd write under the state directory. It runs inside the executor's carrying out
of commands, so it is part of the external time, not of ``overhead_s``.

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

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.logs import configure_logging
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.journal import RunJournal
from fleetd.remedy_wiring import build_remediation
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database, sqlite_url

NODE = "bench-node"


def zero_wait_section(out_url: str, in_url: str) -> dict[str, Any]:
    return {
        "mode": "on",
        "probation": 0,
        "budget": {"max_resets": 100},  # the limit; 100 runs over 8 GPUs stay under it
        "drain": {
            "balancer_delay": 0,
            "poll_interval": 0,
            "release_poll_interval": 0,
            "timeout": "5m",
        },
        "verify": {"healthy_polls": 3, "poll_interval": 0, "timeout": "5m"},
        "readmit": {"poll_interval": 0, "timeout": "5m", "completion_check": True},
        "workers": {"rotation": {"http": {"out_url": out_url, "in_url": in_url}}},
        "fleet": {"max_gpus_out": 64, "breaker": {"max_failures": 100_000}},
    }


def transition(gpu: int, at: float) -> Transition:
    alert = Alert(
        key=AlertKey("GpuUncorrectableEcc", make_labels({"gpu": gpu})),
        state=AlertState.FIRING,
        severity=Severity.CRITICAL,
        labels=make_labels({"alertname": "GpuUncorrectableEcc", "gpu": gpu, "node": NODE}),
        value=1.0,
        fired_at=at,
        remediation_plan="reset",
    )
    return Transition(alert, AlertState.PENDING, AlertState.FIRING, at)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8, help="stand-in vLLM workers (GPUs)")
    parser.add_argument(
        "--validators", type=int, default=3, help="command validators in the ladder (0: none)"
    )
    args = parser.parse_args()
    with open(os.devnull, "w") as devnull:  # logs are rendered (part of the cost), discarded
        configure_logging("json", "info", stream=devnull)
        print(json.dumps(bench(args.runs, args.workers, args.validators)))


def ladder_section(tmp: Path, count: int) -> dict[str, Any]:
    """``count`` stand-in RVS validators: each prints an 8-GPU gst log and exits 0."""
    fixture = Path(__file__).resolve().parents[1] / "tests/remedy/fixtures/validators"
    tool = tmp / "rvs-standin"
    tool.write_text(f"#!/bin/sh\nexec cat {fixture / 'rvs_gst_pass.txt'}\n")
    tool.chmod(0o755)
    names = [f"rvs{i}" for i in range(count)]
    return {
        "validators": [{"name": n, "kind": "rvs", "command": [str(tool)]} for n in names],
        "plans": {"reset": names},
    }


def bench(runs: int, workers: int, validators: int = 0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="fleetd-bench-remedy-"))
    clock = FakeClock()
    sim = build_node("MI355X", seed=11, clock=clock)
    fleet = StandInFleet(tmp / "standin", clock=clock, processes=sim)
    for gpu in range(workers):
        fleet.add(f"gpu{gpu}", [gpu], model="bench/llama-70b")
    os.environ["PATH"] = f"{fleet.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    out_url, in_url = fleet.rotation_urls()
    config = FleetdConfig.model_validate(
        {
            "node": {"name": NODE},
            "state_dir": str(tmp),
            "vllm": {"workers": fleet.worker_config()},
            "remediation": zero_wait_section(out_url, in_url),
        }
    )
    db = Database.open(sqlite_url(tmp / "fleetd.db"))
    backend = AmdSmiBackend(SimulatedAmdSmi(sim))
    poller = Poller(
        backend, default_collectors(), node=NODE, gpu_timeout=5.0, timer=clock.monotonic
    )
    remediation = build_remediation(config, db=db, backend=backend, poller=poller, clock=clock)
    plain = config.remediation
    laddered = plain.model_copy(
        update={
            "validation": type(plain.validation).model_validate(ladder_section(tmp, validators))
        }
    )
    writes = [0]
    original_save = RunJournal.save

    def counting_save(self: RunJournal, *a: Any, **kw: Any) -> None:
        writes[0] += 1
        original_save(self, *a, **kw)

    RunJournal.save = counting_save  # type: ignore[method-assign]

    executor = remediation.executor
    walls: list[float] = []
    overheads: list[float] = []
    externals: list[float] = []
    cpus: list[float] = []
    captures: list[float] = []
    sizes: list[int] = []
    failures = 0
    ladder_overheads: list[float] = []
    plain_overheads: list[float] = []
    validator_runtimes: list[float] = []
    total = runs * 2 if validators else runs
    for i in range(total):
        with_ladder = bool(validators) and i % 2 == 1
        section = laddered if with_ladder else plain
        remediation.config = section
        executor.configure(section)
        validate0, validators0 = executor.validate_s, executor.validators_s
        clock.advance(60)
        sim.inject(i % 8, "ecc_uncorrectable")
        now = clock.now()
        busy0 = executor.busy_s
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        [run_id] = remediation.handle([transition(i % 8, now)], now)
        ticks = 0
        while executor.active() and ticks < 1000:
            remediation.tick(clock.now())
            ticks += 1
        wall = time.perf_counter() - t0
        cpus.append(time.process_time() - cpu0)
        external = executor.busy_s - busy0
        walls.append(wall)
        externals.append(external)
        run = remediation.run(run_id)
        if run is None or run.state is not m.RunState.DONE:
            failures += 1
        if with_ladder:
            own_in_validate = (executor.validate_s - validate0) - (
                executor.validators_s - validators0
            )
            ladder_overheads.append(wall - external + own_in_validate)
            validator_runtimes.append(executor.validators_s - validators0)
            if run is None or len([o for o in run.validation if o.ok]) != validators:
                failures += 1
            continue
        plain_overheads.append(wall - external)
        overheads.append(wall - external)
        if executor.evidence is not None and run is not None and run.bundles:
            captures.append(executor.evidence.last_capture_s)
            sizes.append(run.bundles[-1].size)
    resets = sim.reset_count()
    fleet.close()
    poller.close()
    backend.close()
    db.dispose()
    return {
        "runs": total,
        "workers": workers,
        "gpus_per_run": 8,
        "completed": total - failures,
        "resets": resets,
        "overhead_s_median": round(statistics.median(overheads), 4),
        "overhead_s_p99": round(percentile(overheads, 0.99), 4),
        "external_s_median": round(statistics.median(externals), 4),
        "wall_s_median": round(statistics.median(walls), 4),
        "wall_s_p99": round(percentile(walls, 0.99), 4),
        "process_cpu_s_median": round(statistics.median(cpus), 4),
        "journal_writes_per_run": round(writes[0] / total, 1),
        "target_overhead_s": 0.5,
        "captures": len(captures),
        "capture_s_median": round(statistics.median(captures), 4) if captures else None,
        "capture_s_p99": round(percentile(captures, 0.99), 4) if captures else None,
        "bundle_bytes_median": int(statistics.median(sizes)) if sizes else None,
        "target_capture_s": 3.0,
        "ladder_validators": validators,
        "ladder_runs": len(ladder_overheads),
        "validators_s_median": (
            round(statistics.median(validator_runtimes), 4) if validator_runtimes else None
        ),
        "ladder_overhead_s_median": (
            round(statistics.median(ladder_overheads) - statistics.median(plain_overheads), 4)
            if ladder_overheads
            else None
        ),
        "ladder_overhead_s_p99": (
            round(percentile(ladder_overheads, 0.99) - statistics.median(plain_overheads), 4)
            if ladder_overheads
            else None
        ),
    }


if __name__ == "__main__":
    main()
