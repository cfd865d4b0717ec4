"""fleetd's readings about itself: rules and health, storage, rule input coverage, alert
delivery and remediation — exported on /metrics, and the ones rules read put in the window."""

from __future__ import annotations

from collections.abc import Callable

from fleetd.alert.dispatch import Dispatcher
from fleetd.collect.exporter import FleetdExporter
from fleetd.logs import get_logger
from fleetd.model import Reading
from fleetd.remedy.service import Remediation
from fleetd.rules.coverage import InputCoverage
from fleetd.rules.engine import RuleEngine
from fleetd.rules.health import out_of_service, with_service
from fleetd.rules.metrics import rule_readings
from fleetd.store.memory import MemoryWindow
from fleetd.store.metrics import store_readings
from fleetd.store.resilient import ResilientStore

log = get_logger("daemon")


class SelfMetrics:
    """Publishes after every evaluation; refreshes the service view at every scrape.

    The alert delivery, remediation and reliability (``kpi``) groups are read from the
    database (the outbox's pending entries, the remediation journal, the lease, the runs'
    counts) and only /metrics shows them (no rule reads them), so they are computed at each
    scrape (``refresh_service_view``, which ``/metrics`` calls before it
    renders) rather than after every poll: the first ``publish`` computes them once, so the
    groups exist, in the same order, before the first scrape.
    """

    def __init__(
        self,
        exporter: FleetdExporter,
        *,
        engine: RuleEngine,
        store: ResilientStore,
        coverage: InputCoverage,
        memory: MemoryWindow,
        dispatcher: Dispatcher,
        remediation: Remediation | None,
        fleet: Callable[[float], list[Reading]] | None = None,
        kpi: Callable[[float], list[Reading]] | None = None,
    ) -> None:
        self._exporter = exporter
        self._engine = engine
        self._store = store
        self._coverage = coverage
        self._memory = memory
        self._dispatcher = dispatcher
        self._remediation = remediation
        self._fleet = fleet  # the registry heartbeat's readings (drift, fleet silences)
        self._kpi = kpi  # the reliability report's (fleetd.remedy.reliability)
        self._scrape_groups_published = False

    def publish(self, now: float) -> list[Reading]:
        """Export every group. Health and storage state also go into the memory window
        (VllmWorkerDown reads GPU health, FleetdStorageDegraded reads the store) and are
        returned so the store keeps the health history."""
        health = rule_readings(self._engine, now)
        storage = store_readings(self._store.stats(), now)
        if self._remediation is not None:  # the evidence directory is storage too
            storage += self._remediation.evidence_readings(now)
        coverage = self._coverage.readings(self._engine.rules, now)
        fleet = self._fleet(now) if self._fleet is not None else []
        self._memory.append([*health, *storage, *coverage, *fleet])
        if self._fleet is not None:
            self._exporter.update_group("fleet", fleet)
        self._exporter.update_group("rules", health)
        self._exporter.update_group("store", storage)
        self._exporter.update_group("coverage", coverage)
        if not self._scrape_groups_published:
            self._scrape_groups_published = True
            self._update_group_from("alerts", self._dispatcher.metrics, now)
            if self._remediation is not None:
                self._update_group_from("remediation", self._remediation.metrics, now)
            if self._kpi is not None:
                self._update_group_from("kpi", self._kpi, now)
        return health

    def refresh_service_view(self, now: float) -> None:
        """At scrape time, what remediation has out of service, as the API reads it: a drain
        or a reset that began since the last poll shows on /metrics at once, and the two never
        disagree (the rules' verdict itself stays the last poll's); and the alert delivery,
        remediation and reliability groups as they are now."""
        published = self._scrape_groups_published  # else the first poll has not published
        if published:
            self._update_group_from("alerts", self._dispatcher.metrics, now)
        if published and self._kpi is not None:
            self._update_group_from("kpi", self._kpi, now)
        remedy, health = self._remediation, self._engine.health()
        if remedy is None or health is None:
            return
        try:
            live = with_service(health, out_of_service(remedy.holds(), remedy.run))
        except Exception as exc:  # the journal's database may be unreadable
            log.warning("service_view_stale", error=repr(exc))
            return
        self._exporter.update_group("rules", rule_readings(self._engine, now, health=live))
        if published:
            self._update_group_from("remediation", remedy.metrics, now)

    def _update_group_from(
        self, group: str, read: Callable[[float], list[Reading]], now: float
    ) -> None:
        """Export what ``read`` returns; while it cannot read the database, keep the last."""
        try:
            readings = read(now)
        except Exception as exc:
            log.warning("self_metrics_stale", group=group, error=repr(exc))
            return
        self._exporter.update_group(group, readings)
