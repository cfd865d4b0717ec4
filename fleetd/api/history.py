"""One GPU in detail: its status entry, recent history of its key series, alerts and events.

History comes through the ``Query`` (memory window for recent data, the database and its
rollups for longer windows) with a step, so a week of data is still a bounded answer. The
window's min/avg/max are not taken from those stepped points, which keep one value per step
and would hide a spike between two of them (an ECC counter that a reset zeroed a minute
later): ``summarize`` asks the ``Query`` for them over the whole window, which answers from
raw samples wherever they are still kept (the memory window, the store's raw retention) and
from rollups' exact minima, maxima and sums beyond.
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
    """``{"start", "end", "step_s", "series": {name: [[ts, value], ...]}, "summary": {name:
    {min, avg, max, last, samples} | None}}`` for one GPU.

    One point per complete step bucket (stamped with the bucket's end), then the newest
    reading. A GPU replaced under the same index (new uuid) shows as one line: its series are merged
    in time order.
    """
    start = now - window
    step = window / points
    series: dict[str, list[list[float]]] = {}
    summary: dict[str, Json | None] = {}
    for spec in HISTORY_SERIES:
        matchers = [Matcher("gpu", "=", str(gpu))]
        matchers.extend(Matcher(k, "=", v) for k, v in spec.labels)
        summary[spec.name] = summarize(query, spec.metric, matchers, now=now, window=window)
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
    return {"start": start, "end": now, "step_s": step, "series": series, "summary": summary}


def summarize(
    query: Query, metric: str, matchers: list[Matcher], *, now: float, window: float
) -> Json | None:
    """min, avg, max and the number of samples of ``(now - window, now]``, and the newest
    value; a GPU replaced under the same index (several series) counts as one. None when the
    window holds no sample."""
    counts = query.window("count", metric, matchers, window=window, now=now)
    if not counts:
        return None
    lows = query.window("min", metric, matchers, window=window, now=now)
    highs = query.window("max", metric, matchers, window=window, now=now)
    means = query.window("avg", metric, matchers, window=window, now=now)
    weights = {key: counts[key] for key in means if key in counts}
    weight = sum(weights.values())
    newest = query.latest(metric, matchers, now=now, max_age=window)
    last = max(newest.values(), key=lambda s: s.ts).value if newest else None
    total = sum(counts.values())
    return {
        "min": min(lows.values()) if lows else None,
        "avg": sum(means[k] * w for k, w in weights.items()) / weight if weight else None,
        "max": max(highs.values()) if highs else None,
        "last": last,
        "samples": int(total),
    }
