"""Socket power, average power, power cap and the energy counter.

amdsmi_get_power_info reports W (and leaks raw 0xFFFFFFFF… for unsupported fields, e.g.
average power on MI300-class); amdsmi_get_power_cap_info reports µW; the energy counter is
ticks × resolution in µJ. parse converts each exactly once. The cap is on the slow tier
(``fleetd.collect.cadence``): it changes only when an operator sets it.
"""

from __future__ import annotations

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.cadence import slow_every_of, slow_part
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

POWER = "fleetd_gpu_power_watts"
POWER_AVERAGE = "fleetd_gpu_power_average_watts"
POWER_CAP = "fleetd_gpu_power_cap_watts"
ENERGY = "fleetd_gpu_energy_joules_total"


class PowerCollector:
    """Power and energy every poll; the power cap on the slow tier."""

    name = "power"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def __init__(self, slow_every: int = 1, from_metrics: bool = False) -> None:
        """``from_metrics``: socket power and the energy accumulator from the gpu_metrics
        table instead of amdsmi_get_power_info and amdsmi_get_energy_count every poll (the
        energy counter's resolution is then read once per discovery)."""
        self.slow_every = slow_every_of(slow_every)
        self.from_metrics = from_metrics

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)

        if self.from_metrics:
            info, err = attempt(gpu.per_poll, "gpu_metrics", now, gpu.gpu_metrics)
        else:
            info, err = attempt(gpu.power_info)
        raw = field(info, "current_socket_power")
        out.add(POWER, parse.watts(raw), raw, reason=err)
        raw = field(info, "average_socket_power")
        out.add(POWER_AVERAGE, parse.watts(raw), raw, reason=err)

        cap, _ = slow_part(gpu, self.name, self.slow_every, lambda: self._cap(gpu, now))
        out.items.extend(cap)

        if self.from_metrics:
            ticks = field(info, "energy_accumulator")  # same PMFW ticks (amdsmi.md §5)
            static, err2 = attempt(gpu.static, "energy_resolution", gpu.energy_count)
            resolution = field(static, "counter_resolution")
            err = err or err2
        else:
            energy, err = attempt(gpu.energy_count)
            ticks = field(energy, "energy_accumulator")
            resolution = field(energy, "counter_resolution")
        joules = parse.energy_joules(ticks, resolution)
        out.add(
            ENERGY,
            joules,
            reason=err or (parse.first_reason(ticks, resolution) if joules is None else None),
        )
        return out.items

    @staticmethod
    def _cap(gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        cap, err = attempt(gpu.power_cap_info)
        raw = field(cap, "power_cap")
        out.add(POWER_CAP, parse.microwatts_to_watts(raw), raw, reason=err)
        return out.items
