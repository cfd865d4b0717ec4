"""Building a node's Remediation from fleetd.yaml (the daemon and ``fleetd demo`` call this).

Composition, beside ``fleetd.daemon``, not inside ``fleetd.remedy``: it reads the whole
``FleetdConfig`` (node name, the ``remediation``, ``vllm`` and ``registry`` sections), and
``fleetd.config`` imports ``fleetd.remedy.config`` to compose that file, so a module of the
remedy package that imported ``fleetd.config`` would close a package-level import cycle.
"""

from __future__ import annotations

import hashlib

from fleetd.clock import Clock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.dump import dump_unit
from fleetd.collect.serial import PollSafeBackend
from fleetd.config import FleetdConfig
from fleetd.remedy.bundle import BundleStore
from fleetd.remedy.events import ChangeSink, EventSink
from fleetd.remedy.evidence import EvidenceCapture
from fleetd.remedy.executor import RemediationParts
from fleetd.remedy.holders import KfdInspector
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.lease import FleetLease, SqlFleetLease
from fleetd.remedy.ports import AlertView, GpuControl, GpuDumper, HealthPoller
from fleetd.remedy.rma import RmaBook
from fleetd.remedy.service import Remediation
from fleetd.remedy.workers import CommandWorkers, SystemdWorkers, WorkerAdapter
from fleetd.store.db import Database
from fleetd.store.events import EventLog
from fleetd.vllm.benchmark import BASELINE_FILE, BaselineStore, BenchmarkGate

EVIDENCE_DIR = "evidence"


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
        return SqlFleetLease.shared(
            registry.url.reveal(),
            fleet,
            timeout=registry.timeout,
            node=config.node.name,
            labels=config.node.labels,
            stale_after=registry.stale_after,
        )
    return SqlFleetLease.local(db, config.node.name, fleet, config.node.labels)


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
    journal = RunJournal(db)
    made: list[Remediation] = []
    rma = RmaBook(
        db,
        config.node.name,
        identities=backend.gpus,
        afids=lambda: made[0].afid_table() if made else None,
        tickets=config.remediation.validation.ticket.enabled,
    )
    parts = RemediationParts(
        node=config.node.name,
        config=config.remediation,
        workers=config.vllm.workers,
        backend=backend,
        poller=poller,
        adapter=adapter or build_adapter(config),
        journal=journal,
        lease=lease or build_lease(config, db),
        clock=clock,
        sink=sink,
        events=events,
        alerts=alerts,
        kfd=kfd,
        evidence=build_evidence(config, db=db, journal=journal, backend=backend, alerts=alerts),
        benchmark=BenchmarkGate(
            config.vllm.benchmark, BaselineStore(config.state_dir / BASELINE_FILE)
        ),
        rma=rma,
    )
    remediation = Remediation(parts)
    made.append(remediation)
    return remediation


def config_hash(config: FleetdConfig) -> str:
    """sha256 of the configuration in force (secrets as their placeholder, never revealed)."""
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()


def gpu_dumper(backend: GpuControl) -> GpuDumper | None:
    """The raw reads of a unit, behind the poll lock when the backend has one."""
    if isinstance(backend, PollSafeBackend):
        return backend.dump
    if isinstance(backend, AmdSmiBackend):
        raw = backend
        return lambda indices: dump_unit(raw, indices)
    return None


def build_evidence(
    config: FleetdConfig,
    *,
    db: Database,
    journal: RunJournal,
    backend: GpuControl,
    alerts: AlertView | None,
) -> EvidenceCapture | None:
    """Bundles under ``<state_dir>/evidence/`` with the section's cap and retention."""
    section = config.remediation.evidence
    if not section.enabled:
        return None
    store = BundleStore(
        config.state_dir / EVIDENCE_DIR,
        max_bundle_bytes=section.max_bundle_bytes,
        max_total_bytes=section.max_total_bytes,
        keep=section.keep,
    )
    return EvidenceCapture(
        node=config.node.name,
        config=section,
        store=store,
        journal=journal,
        dumper=gpu_dumper(backend),
        fault_log=EventLog(db).query,
        alerts=alerts,
        config_hash=config_hash(config),
    )
