"""What ``fleetd demo`` runs: the daemon on a simulated MI355X node with stand-in vLLM workers.

Faults appear one after another (fleetd/sim/scenarios/demo.yaml). fleetd polls, stores,
evaluates the shipped rules, delivers alerts to the console receiver, and takes the action
each uncorrectable fault's AFID class names: the reset class on GPU 3 (AFID 22) end to end —
every vLLM worker of the XGMI hive drained, one reset, every GPU verified, the workers
re-admitted — and the physical class on GPU 6 (AFID 20) by quarantining GPU 6 alone without
a reset, its page saying what a person must do. The workers are in-process stand-ins
serving real HTTP on loopback, driven through fleetd's real ``systemd`` worker adapter via a
stand-in ``systemctl``. Kept apart from the CLI so tests drive the same wiring on a fake clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from fleetd.clock import Clock
from fleetd.config import FleetdConfig
from fleetd.configbase import validate
from fleetd.daemon import Daemon, open_backend
from fleetd.remedy.events import RemediationEvent
from fleetd.rules.config import RulesConfig
from fleetd.sim.logical import LogicalView
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.vllm.config import VllmWorkerConfig

DEMO_SCENARIO = "demo"
DEMO_MODEL = "stand-in/llama-3.1-70b"
DEMO_NODE = "demo-mi355x"
STALE_POLLS: int = RulesConfig.model_fields["stale_polls"].default  # in real time, at speed


def demo_config(
    state_dir: Path,
    *,
    port: int,
    workers: list[VllmWorkerConfig] | None = None,
    fleet: StandInFleet | None = None,
    scenario: str = DEMO_SCENARIO,
    local_rules: Path | None = None,
    time_scale: float = 1.0,
) -> FleetdConfig:
    """The built-in config: simulator, 1 s polls, console alerts, remediation on, short waits;
    ``local_rules``: a directory of site rules loaded beside the shipped packs.

    At ``time_scale`` × speed a poll is due every 1/``time_scale`` real seconds, so a shared
    machine's second of scheduling lag would make every GPU's telemetry stale at once
    (``GpuTelemetryStale`` on all eight, every minute): the default 3 polls of staleness are
    counted in real time instead (12 polls at the CLI demo's 4×)."""
    data: dict[str, object] = {
        "node": {"name": DEMO_NODE},
        "state_dir": str(state_dir),
        "backend": {"kind": "simulator", "scenario": scenario},
        "poll": {"interval": "1s", "gpu_timeout": "1s", "slow_interval": "5s"},
        "http": {"bind": "127.0.0.1", "port": port},
        "rules": {
            "local_dir": None if local_rules is None else str(local_rules),
            "stale_polls": max(STALE_POLLS, math.ceil(STALE_POLLS * time_scale)),
        },
        "vllm": {
            "workers": [w.model_dump(mode="json") for w in workers or []],
            "scrape_interval": "2s",
            "timeout": "1s",
        },
        # warnings and criticals print as they fire and resolve; remediation steps come
        # through StepNotes (one line per run-level step), so the console skips them
        "alerting": {
            "receivers": [
                {"name": "console", "console": [{"send_changes": False}]},
                {"name": "quiet"},
            ],
            "route": {
                "receiver": "quiet",
                "group_wait": "0s",
                "group_interval": "5s",
                "routes": [{"matchers": ['severity=~"critical|warning"'], "receiver": "console"}],
            },
        },
    }
    if fleet is not None:
        out_url, in_url = fleet.rotation_urls()
        data["remediation"] = {
            "mode": "on",
            "drain": {
                "balancer_delay": "2s",
                "poll_interval": "1s",
                "timeout": "30s",
                "release_timeout": "10s",
                "release_poll_interval": "1s",
            },
            "verify": {"healthy_polls": 2, "poll_interval": "1s", "timeout": "60s"},
            "readmit": {"timeout": "60s", "poll_interval": "1s"},
            "workers": {
                "adapter": "systemd",
                "systemctl": str(fleet.systemctl),
                "rotation": {"http": {"out_url": out_url, "in_url": in_url}},
            },
            # the validation ladder with a stand-in for RVS (the real tool needs real GPUs):
            # the reset hive validates before its workers return, and the GPU gets its RMA
            # record (fleetctl rma list demo-node)
            "validation": {
                "validators": [
                    {
                        "name": "rvs_gst",
                        "kind": "rvs",
                        "command": [str(_rvs_standin(fleet.bin_dir)), "{gpus}"],
                        "timeout": "30s",
                    }
                ],
                "plans": {"reset": ["rvs_gst"], "reboot": ["rvs_gst"]},
            },
        }
    return validate(FleetdConfig, data, {}, "<fleetd demo built-in config>")


def _rvs_standin(directory: Path) -> Path:
    """A stand-in for ``rvs -c gst_single.conf``: one ``[RESULT]`` line per GPU it is given,
    in RVS's format, every target met."""
    path = directory / "rvs-standin"
    path.write_text(
        "#!/bin/sh\n"
        'echo "[RESULT] [ 1.000001] Action name :gst-demo"\n'
        'echo "[RESULT] [ 1.000002] Module name :gst"\n'
        'for g in $(echo "$1" | tr , " "); do\n'
        '  echo "[RESULT] [ 2.000000] [gst-demo] [gst] [GPU:: $g] GFLOPS 1420000.000 '
        'Target GFLOPS: 1215000.000 met: TRUE"\n'
        "done\n"
    )
    path.chmod(0o755)
    return path


PER_WORKER_STEPS = frozenset(
    {
        "worker_unrouted",
        "worker_idle",
        "worker_stopped",
        "worker_started",
        "worker_ready",
        "worker_rerouted",
    }
)


class StepNotes:
    """A remediation ChangeSink that turns each step into a line with its time into the run."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note
        self._started: dict[str, float] = {}

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        if event.kind in PER_WORKER_STEPS:
            return  # the run-level step before or after says it for every worker at once
        start = self._started.setdefault(event.run_id or "", event.at)
        into = f" (+{event.at - start:.0f}s)" if event.run_id else ""
        self._note(f"remediation {event.kind}{into}: {event.message}")


@dataclass
class Demo:
    daemon: Daemon
    fleet: StandInFleet
    view: LogicalView | None = None
    """The simulated node by logical index, as enumerated at start (a partition per worker)."""

    def keep_busy(
        self, *, per_worker: int = 3, duration_s: float = 6.0, load: float = 0.65
    ) -> None:
        """Top every serving, in-rotation worker up to ``per_worker`` requests in flight, and
        make each simulated GPU as busy as its worker (idle while drained or stopped)."""
        node = self.view
        for worker in self.fleet.workers.values():
            serving = worker.in_rotation and worker.state() == "active"
            if serving:
                running, waiting = worker.load()
                if running + waiting < per_worker:
                    worker.add_requests(per_worker - running - waiting, duration_s=duration_s)
            if node is not None:
                for gpu in worker.gpus:
                    node.set_load(gpu, load if serving else 0.02)

    def close(self) -> None:
        self.daemon.stop()
        self.fleet.close()


def build_demo(
    directory: Path,
    *,
    clock: Clock,
    note: Callable[[str], None],
    console_stream: TextIO,
    port: int = 0,
    time_scale: float = 1.0,
    schedule_jobs: bool = True,
    worker_startup_s: float = 3.0,
    scenario: str = DEMO_SCENARIO,
    local_rules: Path | None = None,
) -> Demo:
    """The demo node: simulator, one stand-in worker per GPU, and the daemon around them;
    ``scenario`` is a shipped scenario's name (``demo``, ``gray_failure``, ``vllm_hung_engine``)
    or a file; ``local_rules`` a directory of site rules (e.g. the SLO example)."""
    state = directory / "state"
    state.mkdir(parents=True, exist_ok=True)
    backend, sim = open_backend(demo_config(state, port=port, scenario=scenario), clock)
    assert sim is not None
    view = LogicalView(sim.node)  # a partitioned node: one worker per partition
    fleet = StandInFleet(directory / "standin", clock=clock, processes=view)
    workers = []
    for gpu in range(len(view.gpus)):
        stand_in = fleet.add(f"gpu{gpu}", [gpu], model=DEMO_MODEL, startup_s=worker_startup_s)
        workers.append(
            VllmWorkerConfig(
                name=f"gpu{gpu}",
                url=stand_in.url,
                gpus=[gpu],
                unit=stand_in.unit,
                model=DEMO_MODEL,
            )
        )
    if sim.runner is not None:  # the scenario's engine faults (a hung engine: health 200)
        fleet.follow(sim.runner.scenario.workers, sim.runner.start)
    config = demo_config(
        state,
        port=port,
        workers=workers,
        fleet=fleet,
        scenario=scenario,
        local_rules=local_rules,
        time_scale=time_scale,
    )
    daemon = Daemon(
        config,
        clock=clock,
        backend=backend,
        sim=sim,
        time_scale=time_scale,
        console_stream=console_stream,
        remediation_observer=StepNotes(note),
        schedule_jobs=schedule_jobs,
    )
    return Demo(daemon, fleet, view)
