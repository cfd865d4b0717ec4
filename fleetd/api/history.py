"""One GPU in detail: its status entry, recent history of its key series, alerts and events.

History comes through the ``Query`` (memory window for recent data, the database and its
rollups for longer windows) with a step, so a week of data is still a bounded answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetd.api.views import Json
from fleetd.model import Sample
from fleetd.query import Matcher, Query


@dataclass(frozen=True, slots=True)
class HistorySeries:
    name: str
    metric: str
    labels: tuple[tuple[str, str], ...] = ()


HISTORY_SERIES: tuple[HistorySeries, ...] = (
    HistorySeries(
        "temperature_hotspot_c", "fleetd_gpu_temperature_celsius", (("sensor", "hotspot"),)
    ),
    HistorySeries("temperature_hbm_c", "fleetd_gpu_temperature_celsius", (("sensor", "hbm"),)),
    HistorySeries("power_w", "fleetd_gpu_power_watts"),
    HistorySeries("utilization_gfx", "fleetd_gpu_utilization_ratio", (("engine", "gfx"),)),
    HistorySeries("memory_used_bytes", "fleetd_gpu_memory_used_bytes"),
    HistorySeries(
        "ecc_correctable_total", "fleetd_gpu_ecc_errors_total", (("type", "correctable"),)
    ),
    HistorySeries(
        "ecc_uncorrectable_total", "fleetd_gpu_ecc_errors_total", (("type", "uncorrectable"),)
    ),
    HistorySeries("pcie_width", "fleetd_gpu_pcie_link_width_lanes"),
    HistorySeries("xgmi_links_up", "fleetd_gpu_xgmi_links", (("state", "up"),)),
    HistorySeries("up", "fleetd_gpu_up"),
)


def gpu_history(query: Query, gpu: int, *, now: float, window: float, points: int) -> Json:
    """``{"start", "end", "step_s", "series": {name: [[ts, value], ...]}}`` for one GPU.

    One point per complete step bucket (stamped with the bucket's end), then the newest
    reading. A GPU replaced under the same index (new uuid) shows as one line: its series are merged
    in time order.
    """
    start = now - window
    step = window / points
    series: dict[str, list[list[float]]] = {}
    for spec in HISTORY_SERIES:
        matchers = [Matcher("gpu", "=", str(gpu))]
        matchers.extend(Matcher(k, "=", v) for k, v in spec.labels)
        found = query.range(spec.metric, matchers, start=start, end=now, step=step)
        merged: list[Sample] = sorted(
            (sample for samples in found.values() for sample in samples), key=lambda s: s.ts
        )
        # stepped answers hold complete buckets only; the newest reading ends the line
        newest = query.latest(spec.metric, matchers, now=now, max_age=step)
        if newest:
            last = max(newest.values(), key=lambda s: s.ts)
            if not merged or last.ts > merged[-1].ts:
                merged.append(last)
        series[spec.name] = [[round(s.ts, 3), s.value] for s in merged]
    return {"start": start, "end": now, "step_s": step, "series": series}
