"""PCIe link: current vs maximum width and speed, and the link's error counters.

amdsmi_get_pcie_info reports speeds in MT/s (32000 = Gen5) whatever the header says; they
are exported in GT/s. A downtrained link (x16→x8, Gen5→Gen4) shows as current < max.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

# (metric, section, key, conversion)
FIELDS: tuple[tuple[str, str, str, Callable[[object], float | None]], ...] = (
    ("fleetd_gpu_pcie_link_width_lanes", "pcie_metric", "pcie_width", parse.count),
    ("fleetd_gpu_pcie_link_max_width_lanes", "pcie_static", "max_pcie_width", parse.count),
    (
        "fleetd_gpu_pcie_link_speed_gigatransfers_per_second",
        "pcie_metric",
        "pcie_speed",
        parse.mts_to_gts,
    ),
    (
        "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second",
        "pcie_static",
        "max_pcie_speed",
        parse.mts_to_gts,
    ),
    ("fleetd_gpu_pcie_replays_total", "pcie_metric", "pcie_replay_count", parse.count),
    (
        "fleetd_gpu_pcie_replay_rollovers_total",
        "pcie_metric",
        "pcie_replay_roll_over_count",
        parse.count,
    ),
    (
        "fleetd_gpu_pcie_l0_recoveries_total",
        "pcie_metric",
        "pcie_l0_to_recovery_count",
        parse.count,
    ),
    ("fleetd_gpu_pcie_naks_sent_total", "pcie_metric", "pcie_nak_sent_count", parse.count),
    (
        "fleetd_gpu_pcie_naks_received_total",
        "pcie_metric",
        "pcie_nak_received_count",
        parse.count,
    ),
)


class PcieCollector:
    name = "pcie"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        info, err = attempt(gpu.pcie_info)
        for metric, section, key, convert in FIELDS:
            raw = field(field(info, section), key)
            out.add(metric, convert(raw), raw, reason=err)
        return out.items
