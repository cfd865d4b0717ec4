"""How the daemon opens the GPUs: the real amdsmi library or the simulator, and a GPU's
stored history carried over when amdsmi renames it (a top-level module like remedy_wiring:
it composes collect, sim and the store from fleetd.yaml)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetd.clock import Clock
from fleetd.collect.amdsmi_backend import AmdSmiBackend, load_amdsmi
from fleetd.collect.identities import LEDGER_FILE, IdentityLedger
from fleetd.config import FleetdConfig
from fleetd.logs import get_logger
from fleetd.store.resilient import ResilientStore

if TYPE_CHECKING:  # the simulator is imported only by a daemon that runs it (footprint)
    from fleetd.sim import ScenarioRunner, SimNode

log = get_logger("daemon")

BASELINE_FILE = "port-baselines.json"
"""Under state_dir: each GPU's learned per-port baselines (XGMI ports seen up), by BDF."""


@dataclass
class SimContext:
    """The simulated node behind a ``--simulate`` daemon, and its scenario."""

    node: SimNode
    runner: ScenarioRunner | None


def open_backend(config: FleetdConfig, clock: Clock) -> tuple[AmdSmiBackend, SimContext | None]:
    """The real amdsmi library, or the simulator when the config asks for it.

    Raises BackendError (one clear line) when amdsmi cannot be loaded.
    """
    settings = config.backend
    allow = settings.allow_unsafe_library
    baselines = config.state_dir / BASELINE_FILE
    if settings.kind == "amdsmi":
        real = AmdSmiBackend(
            load_amdsmi(), allow_unsafe_library=allow, pci_root=Path("/"), baseline_path=baselines
        )
        return real, None
    from fleetd.sim import ScenarioRunner, SimulatedAmdSmi, build_node, load_scenario
    from fleetd.sim.scenario import apply_partition

    scenario = load_scenario(settings.scenario) if settings.scenario else None
    model = scenario.model if scenario is not None else settings.simulated_model
    seed = scenario.seed if scenario is not None and settings.seed == 0 else settings.seed
    node = build_node(model, seed=seed, clock=clock)
    if scenario is not None:
        major, minor, release = (int(p) for p in scenario.library_version.split("."))
        node.library_version = (major, minor, release, node.library_version[3])
        apply_partition(node, scenario.partition)
    runner = ScenarioRunner(node, scenario, start=clock.now()) if scenario is not None else None
    # the simulated node keeps a fake sysfs tree, checked like /sys on a real node
    try:
        pci_root = node.attach_sysfs(config.state_dir / "simulated-sysfs")
    except OSError:  # a state_dir fleetd may not write yet (the store reports that itself)
        pci_root = node.attach_sysfs(Path(tempfile.mkdtemp(prefix="fleetd-sim-sysfs-")))
    backend = AmdSmiBackend(
        SimulatedAmdSmi(node),
        allow_unsafe_library=allow,
        pci_root=pci_root,
        baseline_path=baselines,
    )
    return backend, SimContext(node, runner)


def carry_over_uuids(
    state_dir: Path, backend: AmdSmiBackend, store: ResilientStore, now: float
) -> None:
    """A GPU whose UUID changed (an amdsmi upgrade) keeps its stored history."""
    ledger = IdentityLedger(state_dir / LEDGER_FILE)
    for change in ledger.reconcile(backend.gpus()):
        renamed = clashed = 0
        if store.samples is not None:
            try:
                renamed, clashed = store.samples.relabel("uuid", change.old, change.new)
            except Exception as exc:  # history splits; nothing else is lost
                log.warning("gpu_uuid_relabel_failed", gpu=change.gpu, error=repr(exc))
        log.warning(
            "gpu_uuid_changed",
            gpu=change.gpu,
            key=change.key,
            old=change.old,
            new=change.new,
            series_renamed=renamed,
            series_clashed=clashed,
        )
        store.append_event(
            "gpu_uuid_changed",
            now=now,
            gpu=change.gpu,
            message=f"GPU {change.gpu} UUID {change.old} is now {change.new}; "
            f"{renamed} stored series carried over",
            data={"key": change.key, "old": change.old, "new": change.new},
        )
