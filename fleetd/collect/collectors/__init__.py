"""One collector per file; ``default_collectors`` is the set the daemon polls."""

from __future__ import annotations

from fleetd.collect.base import Collector
from fleetd.collect.collectors.ecc import EccCollector
from fleetd.collect.collectors.identity import IdentityCollector
from fleetd.collect.collectors.pcie import PcieCollector
from fleetd.collect.collectors.power import PowerCollector
from fleetd.collect.collectors.processes import ProcessesCollector
from fleetd.collect.collectors.temperature import TemperatureCollector
from fleetd.collect.collectors.throttle import ThrottleCollector
from fleetd.collect.collectors.usage import UsageCollector
from fleetd.collect.collectors.xgmi import XgmiCollector

__all__ = [
    "EccCollector",
    "IdentityCollector",
    "PcieCollector",
    "PowerCollector",
    "ProcessesCollector",
    "TemperatureCollector",
    "ThrottleCollector",
    "UsageCollector",
    "XgmiCollector",
    "default_collectors",
]


def default_collectors(
    *,
    processes_interval: float = 30.0,
    slow_every: int = 1,
    ecc_guard: bool = True,
    metrics_table: bool = False,
) -> list[Collector]:
    """Every GPU collector, fast ones first; process listing runs every ``processes_interval``
    s, the slow tier every ``slow_every`` polls (1: every poll), with the ECC totals guarding
    the per-block counts when ``ecc_guard``; ``metrics_table`` reads temperatures, power,
    energy and activity from the gpu_metrics table instead of a call each."""
    return [
        IdentityCollector(),
        TemperatureCollector(from_metrics=metrics_table, slow_every=slow_every),
        PowerCollector(slow_every=slow_every, from_metrics=metrics_table),
        EccCollector(slow_every=slow_every, guard=ecc_guard),
        PcieCollector(),
        XgmiCollector(slow_every=slow_every),
        ThrottleCollector(),
        UsageCollector(slow_every=slow_every, from_metrics=metrics_table),
        ProcessesCollector(interval=processes_interval),
    ]
