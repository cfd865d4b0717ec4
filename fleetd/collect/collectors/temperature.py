"""Temperatures per sensor and the limits the GPU itself reports.

Hotspot (junction) and HBM (VRAM) come from amdsmi_get_temp_metric; edge too, where present
(MI300-class has no edge sensor: that reading is missing, not zero). The voltage-regulator
maximum comes from gpu_metrics ``temperature_vrsoc``. Critical (throttle) and emergency
(shutdown) limits are static and cached until rediscovery. A sensor the library answers
NOT_SUPPORTED is not asked again until rediscovery (``GpuSource.feature``): its reading stays
missing with that reason, without a call every poll.
"""

from __future__ import annotations

from functools import partial

from fleetd.collect import parse
from fleetd.collect.base import Readings, attempt, field
from fleetd.collect.cadence import slow_every_of, slow_part
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

TEMPERATURE = "fleetd_gpu_temperature_celsius"
LIMIT = "fleetd_gpu_temperature_limit_celsius"

SENSORS = (("hotspot", "HOTSPOT"), ("hbm", "VRAM"), ("edge", "EDGE"))
LIMITS = (("critical", "CRITICAL"), ("emergency", "EMERGENCY"))
METRICS_KEYS = {
    "HOTSPOT": "temperature_hotspot",
    "VRAM": "temperature_mem",
    "EDGE": "temperature_edge",
}
"""gpu_metrics keys of the same sensors, in °C (amdsmi.md §4)."""


class TemperatureCollector:
    """``from_metrics``: the current temperatures from the gpu_metrics table (the call every
    poll makes anyway) instead of one amdsmi_get_temp_metric call per sensor. The limits are
    static (read once per discovery) and go out on the slow tier (every ``slow_every``
    polls, with the time of that poll), like the ECC-enabled blocks."""

    name = "temperature"
    board_level = True  # partition 0 only: NOT applicable on other partitions

    def __init__(self, from_metrics: bool = False, slow_every: int = 1) -> None:
        self.from_metrics = from_metrics
        self.slow_every = slow_every_of(slow_every)

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        metrics, metrics_err = attempt(gpu.per_poll, "gpu_metrics", now, gpu.gpu_metrics)
        for label, sensor in SENSORS:
            if self.from_metrics:
                raw, err = field(metrics, METRICS_KEYS[sensor]), metrics_err
            else:
                # a sensor this GPU does not have (EDGE on MI3xx) is asked once, not every poll
                read = partial(gpu.temp_metric, sensor, "CURRENT")
                raw, err = attempt(gpu.feature, f"amdsmi_get_temp_metric:{sensor}", read)
            out.add(TEMPERATURE, parse.celsius(raw), raw, reason=err, labels=(("sensor", label),))
        raw = field(metrics, "temperature_vrsoc")
        out.add(
            TEMPERATURE, parse.celsius(raw), raw, reason=metrics_err, labels=(("sensor", "vr"),)
        )
        limits, _ = slow_part(gpu, "temperature_limits", self.slow_every, lambda: _limits(gpu, now))
        out.items.extend(limits)
        return out.items


def _limits(gpu: GpuSource, now: float) -> list[Reading]:
    out = Readings(gpu.identity, now)
    for label, sensor in SENSORS:
        for limit_label, metric in LIMITS:
            key = f"temp_limit:{sensor}:{metric}"
            raw, err = attempt(gpu.static, key, partial(gpu.temp_metric, sensor, metric))
            labels = (("limit", limit_label), ("sensor", label))
            out.add(LIMIT, parse.celsius(raw), raw, reason=err, labels=labels)
    return out.items
