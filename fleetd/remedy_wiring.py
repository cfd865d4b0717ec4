"""Building a node's Remediation from fleetd.yaml (the daemon and ``fleetd demo`` call this).

Composition, beside ``fleetd.daemon``, not inside ``fleetd.remedy``: it reads the whole
``FleetdConfig`` (node name, the ``remediation``, ``vllm`` and ``registry`` sections), and
``fleetd.config`` imports ``fleetd.remedy.config`` to compose that file, so a module of the
remedy package that imported ``fleetd.config`` would close a package-level import cycle.
"""

from __future__ import annotations

from fleetd.clock import Clock
from fleetd.config import FleetdConfig
from fleetd.remedy.events import ChangeSink, EventSink
from fleetd.remedy.holders import KfdInspector
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.lease import FleetLease, SqlFleetLease
from fleetd.remedy.ports import AlertView, GpuControl, HealthPoller
from fleetd.remedy.service import Remediation
from fleetd.remedy.workers import CommandWorkers, SystemdWorkers, WorkerAdapter
from fleetd.store.db import Database
from fleetd.vllm.benchmark import BASELINE_FILE, BaselineStore, BenchmarkGate


def build_adapter(config: FleetdConfig) -> WorkerAdapter:
    rc = config.remediation
    if rc.workers.adapter == "command":
        return CommandWorkers(rc.workers, rc.readmit, node=config.node.name)
    return SystemdWorkers(rc.workers, rc.readmit, node=config.node.name)


def build_lease(config: FleetdConfig, db: Database) -> FleetLease:
    """Fleet-wide limits through the shared PostgreSQL when configured, per node otherwise."""
    fleet = config.remediation.fleet
    registry = config.registry
    if registry.url is not None:
        return SqlFleetLease.shared(registry.url.reveal(), fleet, timeout=registry.timeout)
    return SqlFleetLease.local(db, config.node.name, fleet)


def build_remediation(
    config: FleetdConfig,
    *,
    db: Database,
    backend: GpuControl,
    poller: HealthPoller,
    clock: Clock,
    sink: ChangeSink | None = None,
    events: EventSink | None = None,
    adapter: WorkerAdapter | None = None,
    lease: FleetLease | None = None,
    alerts: AlertView | None = None,
    kfd: KfdInspector | None = None,
) -> Remediation:
    return Remediation(
        node=config.node.name,
        config=config.remediation,
        workers=config.vllm.workers,
        backend=backend,
        poller=poller,
        adapter=adapter or build_adapter(config),
        journal=RunJournal(db),
        lease=lease or build_lease(config, db),
        clock=clock,
        sink=sink,
        events=events,
        alerts=alerts,
        kfd=kfd,
        benchmark=BenchmarkGate(
            config.vllm.benchmark, BaselineStore(config.state_dir / BASELINE_FILE)
        ),
    )
