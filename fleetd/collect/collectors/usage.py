"""Utilisation (gfx, memory), VRAM used and total, and current clocks (gfx, memory, soc).

Clocks are on the slow tier (``fleetd.collect.cadence``): three calls that no rule needs
every poll.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.cadence import slow_every_of, slow_part
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

UTILIZATION = "fleetd_gpu_utilization_ratio"
MEMORY_USED = "fleetd_gpu_memory_used_bytes"
MEMORY_TOTAL = "fleetd_gpu_memory_total_bytes"
CLOCK = "fleetd_gpu_clock_hertz"

ENGINES = (("gfx", "gfx_activity"), ("memory", "umc_activity"))
METRICS_ENGINES = (("gfx", "average_gfx_activity"), ("memory", "average_umc_activity"))
CLOCKS = (("gfx", "GFX"), ("memory", "MEM"), ("soc", "SOC"))


class UsageCollector:
    """Activity and VRAM every poll; clocks on the slow tier (every ``slow_every`` polls)."""

    name = "usage"

    def __init__(self, slow_every: int = 1, from_metrics: bool = False) -> None:
        """``from_metrics``: activity from the gpu_metrics table instead of
        amdsmi_get_gpu_activity every poll."""
        self.slow_every = slow_every_of(slow_every)
        self.from_metrics = from_metrics

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        if self.from_metrics and gpu.identity.primary:  # gpu_metrics: partition 0 only
            activity, err = attempt(gpu.per_poll, "gpu_metrics", now, gpu.gpu_metrics)
            keys = METRICS_ENGINES
        else:
            activity, err = attempt(gpu.activity)
            keys = ENGINES
        for engine, key in keys:
            raw = field(activity, key)
            out.add(
                UTILIZATION,
                parse.percent_to_ratio(raw),
                raw,
                reason=err,
                labels=(("engine", engine),),
            )

        # sysfs first: amdsmi's own read may make fleetd a KFD client (docs/remediation.md)
        sysfs_used = gpu.vram_used_sysfs()
        if sysfs_used is not None:
            out.add(MEMORY_USED, float(sysfs_used), sysfs_used)
        else:
            raw, err = attempt(gpu.memory_usage, "VRAM")
            out.add(MEMORY_USED, parse.nonneg_bytes(raw), raw, reason=err)
        raw, err = attempt(gpu.static, "vram_total", lambda: gpu.memory_total("VRAM"))
        out.add(MEMORY_TOTAL, parse.nonneg_bytes(raw), raw, reason=err)

        if gpu.identity.primary:  # clocks are board-level: not applicable on other partitions
            clocks, _ = slow_part(gpu, self.name, self.slow_every, lambda: self._clocks(gpu, now))
            out.items.extend(clocks)
        return out.items

    @staticmethod
    def _clocks(gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        for domain, clock_type in CLOCKS:
            info, err = attempt(gpu.clock_info, clock_type)
            raw = field(info, "clk")
            out.add(CLOCK, parse.mhz_to_hz(raw), raw, reason=err, labels=(("domain", domain),))
        return out.items
