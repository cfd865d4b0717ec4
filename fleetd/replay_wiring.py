"""Recording a whole daemon's amdsmi calls on the simulator, and a backend that replays them
(a top-level module like gpu_wiring: it composes the daemon, collect and fleetd.sim.replay).

``record_daemon`` runs the real ``Daemon`` over the simulator with a fake clock, ticking it by
hand as the daemon's jobs would (poll, alert delivery and remediation every tick, store
maintenance and rediscovery every 5 s, the CPER reader at its interval), with a
``fleetd.sim.replay.Recorder`` between the backend and the simulated amdsmi module: every call
the daemon makes is written down. ``open_replay_backend`` gives the daemon an
``AmdSmiBackend`` over the recording (``Daemon(..., backend=...)``), for benchmarks that must
measure fleetd and not its stand-in (bench/daemon.py). ``bench/record_replay.py`` writes the
shipped recording.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.gpu_wiring import BASELINE_FILE, SimContext
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.replay import Recorder, Recording, ReplayAmdSmi

DEFAULT_RECORDING = Path(__file__).parent / "data" / "replay" / "mi355x-healthy.json.gz"
"""The shipped recording: 8 MI355X GPUs at 60 % load, 120 one-second daemon ticks."""


@dataclass(frozen=True)
class RecordPlan:
    """What to record: the simulated node and how long the daemon runs over it."""

    model: str = "MI355X"
    seed: int = 1
    load: float = 0.6
    ticks: int = 120
    interval_s: float = 1.0
    maintain_every: int = 5
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"


def recording_config(state_dir: Path, *, port: int = 0, interval_s: float = 1.0) -> FleetdConfig:
    """The daemon configuration a recording and its replay run with: 1 s polls, console
    alerts, everything else at its defaults (remediation dry-run, SQLite store, events)."""
    return FleetdConfig.model_validate(
        {
            "state_dir": str(state_dir),
            "http": {"bind": "127.0.0.1", "port": port},
            "poll": {"interval": f"{interval_s:g}s"},
            "alerting": {"receivers": [{"name": "console", "console": [{}]}]},
        }
    )


def record_daemon(plan: RecordPlan, *, state_dir: Path | None = None) -> Recording:
    """Every amdsmi call a daemon makes over ``plan.ticks`` ticks of a simulated node."""
    from fleetd.daemon import Daemon  # the daemon imports what it runs; keep this module light

    own_dir = state_dir is None
    root = Path(tempfile.mkdtemp(prefix="fleetd-record-")) if state_dir is None else state_dir
    clock = FakeClock()
    node = build_node(
        plan.model,
        seed=plan.seed,
        clock=clock,
        compute_partition=plan.compute_partition,
        memory_partition=plan.memory_partition,
    )
    node.set_load(None, plan.load)
    sysfs = node.attach_sysfs(root / "simulated-sysfs")
    recorder = Recorder(SimulatedAmdSmi(node))
    backend = AmdSmiBackend(recorder, pci_root=sysfs, baseline_path=root / BASELINE_FILE)
    config = recording_config(root / "state", interval_s=plan.interval_s)
    console = open(os.devnull, "w")  # noqa: SIM115 - closed below
    daemon = Daemon(
        config,
        clock=clock,
        backend=backend,
        sim=SimContext(node, None),
        schedule_jobs=False,
        console_stream=console,
    )
    daemon.start()
    try:
        cper_every = max(1, round(config.events.cper.interval / plan.interval_s))
        for tick in range(1, plan.ticks + 1):
            clock.advance(plan.interval_s)
            daemon.tick()
            daemon.deliver()
            daemon.remediate()
            if tick % plan.maintain_every == 0:
                daemon.maintain()
            if daemon.events is not None and tick % cper_every == 0:
                daemon.events.poll_cper()
    finally:
        daemon.stop()
        console.close()
    meta: dict[str, Any] = {
        "model": plan.model,
        "gpus": len(backend.gpus()),
        "seed": plan.seed,
        "load": plan.load,
        "ticks": plan.ticks,
        "poll_interval_s": plan.interval_s,
        "compute_partition": plan.compute_partition,
        "memory_partition": plan.memory_partition,
        "package_version": SimulatedAmdSmi.__version__,
    }
    recording = recorder.recording(meta, Recording.read_sysfs(sysfs))
    if own_dir:
        shutil.rmtree(root, ignore_errors=True)
    return recording


def open_replay_backend(
    state_dir: Path, recording: Recording | Path = DEFAULT_RECORDING
) -> tuple[AmdSmiBackend, ReplayAmdSmi]:
    """An ``AmdSmiBackend`` over a recording (its fake sysfs tree written under
    ``state_dir``), and the replay module itself (for its ``misses`` and ``cpu_s``)."""
    loaded = Recording.load(recording) if isinstance(recording, Path) else recording
    module = ReplayAmdSmi(loaded)
    pci_root = loaded.write_sysfs(state_dir / "replay-sysfs")
    backend = AmdSmiBackend(module, pci_root=pci_root, baseline_path=state_dir / BASELINE_FILE)
    return backend, module
