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
from fleetd.collect.source import GpuSource
from fleetd.model import Reading

TEMPERATURE = "fleetd_gpu_temperature_celsius"
LIMIT = "fleetd_gpu_temperature_limit_celsius"

SENSORS = (("hotspot", "HOTSPOT"), ("hbm", "VRAM"), ("edge", "EDGE"))
LIMITS = (("critical", "CRITICAL"), ("emergency", "EMERGENCY"))


class TemperatureCollector:
    name = "temperature"

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]:
        out = Readings(gpu.identity, now)
        for label, sensor in SENSORS:
            # a sensor this GPU does not have (EDGE on MI3xx) is asked once, not every poll
            read = partial(gpu.temp_metric, sensor, "CURRENT")
            raw, err = attempt(gpu.feature, f"amdsmi_get_temp_metric:{sensor}", read)
            out.add(TEMPERATURE, parse.celsius(raw), raw, reason=err, labels=(("sensor", label),))
            for limit_label, metric in LIMITS:
                key = f"temp_limit:{sensor}:{metric}"
                raw, err = attempt(gpu.static, key, partial(gpu.temp_metric, sensor, metric))
                out.add(
                    LIMIT,
                    parse.celsius(raw),
                    raw,
                    reason=err,
                    labels=(("limit", limit_label), ("sensor", label)),
                )
        metrics, err = attempt(gpu.per_poll, "gpu_metrics", now, gpu.gpu_metrics)
        raw = field(metrics, "temperature_vrsoc")
        out.add(TEMPERATURE, parse.celsius(raw), raw, reason=err, labels=(("sensor", "vr"),))
        return out.items
