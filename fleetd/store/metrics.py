"""The ``fleetd_store_*`` readings, from the resilient store's counters."""

from __future__ import annotations

from fleetd.model import Reading, make_labels
from fleetd.store.resilient import StoreStats


def store_readings(stats: StoreStats, now: float) -> list[Reading]:
    """Readings for /metrics and for the memory window (so a rule can alert on storage)."""

    def one(metric: str, value: float | None, **labels: object) -> Reading:
        reason = None if value is not None else "not_measured"
        return Reading(metric, make_labels(labels), value, now, reason)

    readings = [
        one("fleetd_store_errors_total", float(count), op=op) for op, count in stats.errors.items()
    ]
    disk = None if stats.disk_bytes is None else float(stats.disk_bytes)
    readings += [
        one("fleetd_store_degraded", 1.0 if stats.degraded else 0.0),
        one("fleetd_store_samples_written_total", float(stats.samples_written)),
        one("fleetd_store_disk_bytes", disk),
        one("fleetd_store_budget_dropped_bytes_total", float(stats.budget_dropped_bytes)),
        one("fleetd_store_backlog_polls", float(stats.backlog_polls)),
        one("fleetd_store_backlog_dropped_polls_total", float(stats.backlog_dropped_polls)),
    ]
    return readings
