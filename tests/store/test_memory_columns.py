"""MemoryWindow's shared timestamp columns against a per-series reference window.

The window stores a poll's timestamp once for all the series read at it; series that miss a
poll, come from a slower tier, or get an older sample move to a column of their own. Whatever
the pattern, every answer must be what a window keeping each series' own samples gives.
"""

from __future__ import annotations

import random
import tracemalloc
from bisect import bisect_left, bisect_right

import pytest

from fleetd.model import Reading, Sample, SeriesKey, make_labels
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
METRICS = ("fleetd_gpu_power_watts", "fleetd_gpu_temp_celsius")


class Reference:
    """Each series' own sorted samples: what the window must answer."""

    def __init__(self, retention: float) -> None:
        self.retention = retention
        self.data: dict[SeriesKey, dict[float, float]] = {}

    def append(self, readings: list[Reading]) -> None:
        for r in readings:
            if r.value is not None:
                ts = round(r.ts * 1000.0) / 1000.0
                self.data.setdefault(r.key, {})[ts] = float(r.value)

    def prune(self, now: float) -> None:
        horizon = now - self.retention
        for key in list(self.data):
            kept = {t: v for t, v in self.data[key].items() if t > horizon}
            if kept or not self.data[key]:
                self.data[key] = kept
            else:
                del self.data[key]

    def samples(self, metric: str, start: float, end: float) -> dict[SeriesKey, list[Sample]]:
        out = {}
        for key, points in self.data.items():
            if key.metric != metric:
                continue
            times = sorted(points)
            lo, hi = bisect_left(times, start), bisect_right(times, end)
            if hi > lo:
                out[key] = [Sample(t, points[t]) for t in times[lo:hi]]
        return out

    def count(self) -> int:
        return sum(len(p) for p in self.data.values())


def readings_for(rng: random.Random, tick: int, now: float, series: int) -> list[Reading]:
    out = []
    for i in range(series):
        metric = METRICS[i % 2]
        labels = make_labels({"gpu": i // 2})
        if i % 7 == 3 and tick % 5:  # a slower tier: read every 5th poll
            continue
        if rng.random() < 0.05:  # a poll this series was not read in
            continue
        value: float | None = rng.choice([1.0, 2.0, rng.random()])
        if i % 5 == 0:  # mostly one value, as most of a GPU's series
            value = 3.0 if rng.random() < 0.98 else 4.0
        elif i % 11 == 1:  # 0.0 and -0.0 are different values
            value = rng.choice([0.0, -0.0])
        if rng.random() < 0.02:
            value = None
        ts = now
        if rng.random() < 0.01:  # an older sample, out of order
            ts = now - rng.choice([1.0, 2.5, 3.0])
        out.append(Reading(metric, labels, value, ts))
    return out


def exact(found: dict[SeriesKey, list[Sample]]) -> dict[SeriesKey, list[tuple[float, str]]]:
    """Samples with their values' exact text (-0.0 is not 0.0)."""
    return {k: [(s.ts, repr(s.value)) for s in v] for k, v in found.items()}


@pytest.mark.parametrize("seed", range(6))
def test_answers_match_a_window_of_per_series_samples(seed: int) -> None:
    rng = random.Random(seed)
    retention = 20.0
    mem = MemoryWindow(retention)
    ref = Reference(retention)
    series = 10 + seed * 5
    for tick in range(300):
        now = T0 + tick
        batch = readings_for(rng, tick, now, series)
        split = rng.randrange(len(batch) + 1)
        for part in (batch[:split], batch[split:]):  # one poll in one or two appends
            mem.append(part)
            ref.append(part)
        if tick == 120 + seed:  # a series appears late, another one stops
            extra = [Reading(METRICS[0], make_labels({"gpu": 99}), 5.0, now)]
            mem.append(extra)
            ref.append(extra)
        if rng.random() < 0.9:
            mem.prune(now)
            ref.prune(now)
        assert mem.sample_count() == ref.count(), tick
        for metric in METRICS:
            start = now - rng.choice([3.0, 10.0, 30.0])
            assert exact(mem.range(metric, start=start, end=now)) == exact(
                ref.samples(metric, start, now)
            )
            assert exact(mem.range(metric, start=T0 - 1, end=now)) == exact(
                ref.samples(metric, T0 - 1, now)
            )
            expected = {
                k: float(len([s for s in v if s.ts > start]))
                for k, v in ref.samples(metric, start, now).items()
            }
            assert mem.window("count", metric, window=now - start, now=now) == {
                k: c for k, c in expected.items() if c
            }
            latest = {k: v[-1] for k, v in ref.samples(metric, T0 - 10, now - 2).items()}
            assert mem.latest(metric, now=now - 2) == latest


def test_a_poll_stores_its_timestamp_once() -> None:
    mem = MemoryWindow(3600)
    for tick in range(50):
        now = T0 + tick
        mem.append([Reading(METRICS[0], make_labels({"gpu": g}), 1.0, now) for g in range(8)])
        mem.append([Reading(METRICS[1], make_labels({"gpu": g}), 2.0, now) for g in range(8)])
        mem.prune(now)
    assert mem.column_count() == 1
    assert mem.sample_count() == 50 * 16


def test_series_that_missed_a_poll_share_a_column_again_once_it_left_the_window() -> None:
    mem = MemoryWindow(30)
    for tick in range(300):
        now = T0 + tick
        mem.append(
            [
                Reading(METRICS[0], make_labels({"gpu": g}), 1.0, now)
                for g in range(8)
                if not (tick == 10 and g % 2)
            ]
        )
        mem.prune(now)
        if tick == 11:
            assert mem.column_count() == 2
    assert mem.column_count() == 1
    assert mem.sample_count() == 8 * 30


def test_a_series_of_one_value_keeps_the_value_once_and_answers_the_same() -> None:
    mem = MemoryWindow(100)
    labels = make_labels({"gpu": 0})
    for tick in range(500):
        value = 5.0 if tick < 150 or tick >= 200 else float(tick)
        mem.append([Reading(METRICS[0], labels, value, T0 + tick)])
        mem.prune(T0 + tick)
    key = SeriesKey(METRICS[0], labels)
    assert mem.range(METRICS[0], start=T0, end=T0 + 500)[key] == [
        Sample(T0 + t, 5.0) for t in range(400, 500)
    ]
    assert mem.window("avg", METRICS[0], window=50, now=T0 + 499) == {key: 5.0}
    assert mem.window("changes", METRICS[0], window=150, now=T0 + 499) == {key: 0.0}
    # the changing values have left the window: one value and a count again
    assert mem._metrics[METRICS[0]][labels].values is None


def test_a_full_window_takes_8_bytes_a_changing_sample_and_next_to_none_a_constant_one() -> None:
    """Before: 16 bytes a sample, every sample (two ``array('d')`` per series)."""
    retention, series = 600, 100
    labels = [make_labels({"gpu": i}) for i in range(series)]
    mem = MemoryWindow(retention)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for tick in range(retention + 200):
            now = T0 + tick
            mem.append(
                [
                    Reading(METRICS[0], lab, float(tick) if i % 2 else 1.0, now)
                    for i, lab in enumerate(labels)
                ]
            )
            mem.prune(now)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert mem.sample_count() == series * retention
    changing_bytes = (series // 2) * retention * 8
    assert held < 1.4 * changing_bytes  # was 4 × that: (16 bytes) × (all the series)
