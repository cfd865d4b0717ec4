"""The daemon's reliability report: built once the state database is open, whether or not
remediation is (rule precision and shadow firings come from the alert history alone)."""

from __future__ import annotations

from fleetd.config import FleetdConfig
from fleetd.model import GpuIdentity
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.kpi import HistoryEntry, RuleMode
from fleetd.remedy.reliability import ReliabilityReporter, history_reader
from fleetd.rules.engine import RuleEngine
from fleetd.rules.trust import rule_modes
from fleetd.store.db import Database
from fleetd.store.resilient import ResilientStore


class _Gpus:
    """The backend's ``gpus()`` (serial and hive of each index)."""

    def __init__(self, backend: object) -> None:
        self._backend = backend

    def __call__(self) -> list[GpuIdentity]:
        gpus = getattr(self._backend, "gpus", None)
        return list(gpus()) if gpus is not None else []


def build_reliability(
    config: FleetdConfig,
    db: Database,
    *,
    backend: object,
    store: ResilientStore,
    engine: RuleEngine,
) -> ReliabilityReporter:
    def rules() -> list[RuleMode]:
        return rule_modes(engine.rules)

    def query(**filters: object) -> list[HistoryEntry]:
        return list(store.query_events(**filters))

    remediation = config.remediation
    return ReliabilityReporter(
        node=config.node.name,
        journal=RunJournal(db),
        history=history_reader(query, config.node.name),
        identities=_Gpus(backend),
        rules=rules,
        window_s=remediation.kpi_window,
        probation_s=remediation.probation,
    )
