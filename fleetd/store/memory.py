"""The in-memory recent window: what rules evaluate against on every tick.

Series are indexed by metric name; each holds parallel ``array('d')`` columns of timestamps
and values in time order (16 bytes a sample, no per-sample objects), so a window is two
bisects and a slice, and the maths is ``fleetd.store.functions`` — the same code the
database uses, so both answer identically. Timestamps are kept at millisecond resolution,
as the database stores them.

A missing reading (``value is None``) is not stored: its series simply goes stale.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

from fleetd.model import Labels, Reading, Sample, SeriesKey
from fleetd.query import Matcher, QueryBase, Span, WindowFn, matches_all
from fleetd.store import functions
from fleetd.store.functions import Summary

_SELECT_CACHE_LIMIT = 4096


class _Series:
    """One series' samples: parallel, time-sorted timestamp and value columns."""

    __slots__ = ("key", "ts", "values")

    def __init__(self, key: SeriesKey) -> None:
        self.key = key
        self.ts = array("d")
        self.values = array("d")

    def put(self, ts: float, value: float) -> None:
        """Add a sample; in-order appends are O(1), a repeated timestamp replaces the value."""
        times = self.ts
        if not times or ts > times[-1]:
            times.append(ts)
            self.values.append(value)
            return
        i = bisect_left(times, ts)
        if i < len(times) and times[i] == ts:
            self.values[i] = value
        else:
            times.insert(i, ts)
            self.values.insert(i, value)


class MemoryWindow(QueryBase):
    """The last ``retention`` seconds of every series, answering the ``Query`` protocol."""

    def __init__(self, retention: float) -> None:
        if retention <= 0:
            raise ValueError(f"retention must be positive, got {retention!r}")
        self._retention = float(retention)
        self._metrics: dict[str, dict[Labels, _Series]] = {}
        self._versions: dict[str, int] = {}
        self._select_cache: dict[tuple[str, tuple[Matcher, ...]], tuple[int, list[_Series]]] = {}
        self._complete_after: float | None = None
        self._samples = 0
        self._lock = threading.RLock()  # the poll appends while the API may be reading

    # ------------------------------------------------------------------------- state
    @property
    def retention(self) -> float:
        return self._retention

    @property
    def complete_after(self) -> float | None:
        """Every sample with a later timestamp is held here (None: nothing is known yet).

        Set by the first ``append`` (or by ``load``, which warms the window from the
        database) and moved forward by ``prune``; ``HybridQuery`` asks the database only
        for what lies before it.
        """
        return self._complete_after

    def covers(self, start: float) -> bool:
        """True when every sample after ``start`` is held here."""
        return self._complete_after is not None and start >= self._complete_after

    def sample_count(self) -> int:
        """Samples held, for self-metrics and tests."""
        return self._samples

    def series_count(self) -> int:
        return sum(len(by_labels) for by_labels in self._metrics.values())

    # ------------------------------------------------------------------------ writing
    def append(self, readings: Iterable[Reading]) -> None:
        """Add one poll's readings; missing ones (``value is None``) are skipped."""
        with self._lock:
            metrics = self._metrics
            last_raw: float | None = None
            last_norm = 0.0
            earliest: float | None = None
            added = 0
            for reading in readings:
                value = reading.value
                if value is None:
                    continue
                raw_ts = reading.ts
                if raw_ts != last_raw:
                    last_raw = raw_ts
                    last_norm = round(raw_ts * 1000.0) / 1000.0
                    if earliest is None or last_norm < earliest:
                        earliest = last_norm
                by_labels = metrics.get(reading.metric)
                if by_labels is None:
                    by_labels = metrics[reading.metric] = {}
                series = by_labels.get(reading.labels)
                if series is None:
                    series = by_labels[reading.labels] = _Series(reading.key)
                    self._versions[reading.metric] = self._versions.get(reading.metric, 0) + 1
                before = len(series.ts)
                series.put(last_norm, float(value))
                added += len(series.ts) - before
            self._samples += added
            if self._complete_after is None and earliest is not None:
                self._complete_after = (functions.to_ms(earliest) - 1) / 1000.0

    def load(self, data: Mapping[SeriesKey, Sequence[Sample]], *, complete_after: float) -> None:
        """Warm the window (at start-up) with every stored sample later than ``complete_after``."""
        for key, samples in data.items():
            self.load_columns(
                key,
                [s.ts for s in samples if s.ts > complete_after],
                [s.value for s in samples if s.ts > complete_after],
            )
        self.mark_complete_after(complete_after)

    def load_columns(self, key: SeriesKey, ts: Sequence[float], values: Sequence[float]) -> None:
        """Merge stored samples of one series (time-sorted columns) into the window."""
        with self._lock:
            by_labels = self._metrics.setdefault(key.metric, {})
            series = by_labels.get(key.labels)
            if series is None:
                series = by_labels[key.labels] = _Series(key)
                self._versions[key.metric] = self._versions.get(key.metric, 0) + 1
            before = len(series.ts)
            if not series.ts or (ts and ts[0] > series.ts[-1]):
                series.ts.extend(functions.at_ms(t) for t in ts)
                series.values.extend(float(v) for v in values)
            else:
                for t, v in zip(ts, values, strict=True):
                    series.put(functions.at_ms(t), float(v))
            self._samples += len(series.ts) - before

    def mark_complete_after(self, when: float) -> None:
        """Declare that every sample later than ``when`` has been loaded or appended."""
        if self._complete_after is None or when < self._complete_after:
            self._complete_after = when

    def prune(self, now: float) -> None:
        """Forget samples at or before ``now - retention``; series left empty are dropped."""
        with self._lock:
            horizon = now - self._retention
            for metric in list(self._metrics):
                by_labels = self._metrics[metric]
                emptied = []
                for labels, series in by_labels.items():
                    times = series.ts
                    if times and times[0] <= horizon:
                        cut = bisect_right(times, horizon)
                        del times[:cut]
                        del series.values[:cut]
                        self._samples -= cut
                        if not times:
                            emptied.append(labels)
                if emptied:
                    for labels in emptied:
                        del by_labels[labels]
                    self._versions[metric] = self._versions.get(metric, 0) + 1
                    if not by_labels:
                        del self._metrics[metric]
            if self._complete_after is not None and horizon > self._complete_after:
                self._complete_after = horizon

    # ------------------------------------------------------------------------ reading
    def _select(self, metric: str, matchers: Sequence[Matcher]) -> list[_Series]:
        by_labels = self._metrics.get(metric)
        if not by_labels:
            return []
        if not matchers:
            return list(by_labels.values())
        cache_key = (metric, tuple(matchers))
        version = self._versions.get(metric, 0)
        cached = self._select_cache.get(cache_key)
        if cached is not None and cached[0] == version:
            return cached[1]
        chosen = [s for labels, s in by_labels.items() if matches_all(labels, matchers)]
        if len(self._select_cache) >= _SELECT_CACHE_LIMIT:
            self._select_cache.clear()
        self._select_cache[cache_key] = (version, chosen)
        return chosen

    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        with self._lock:
            return [s.key for s in self._select(metric, matchers)]

    def _latest(
        self, metric: str, matchers: Sequence[Matcher], now: float, max_age: float | None
    ) -> dict[SeriesKey, Sample]:
        now = functions.at_ms(now)  # stored times are whole milliseconds, rounded
        with self._lock:
            oldest = None if max_age is None else now - max_age
            out: dict[SeriesKey, Sample] = {}
            for series in self._select(metric, matchers):
                times = series.ts
                i = len(times) if times and times[-1] <= now else bisect_right(times, now)
                if i == 0:
                    continue
                ts = times[i - 1]
                if oldest is not None and ts < oldest:
                    continue
                out[series.key] = Sample(ts, series.values[i - 1])
            return out

    def _window(
        self, fn: WindowFn, metric: str, matchers: Sequence[Matcher], window: float, now: float
    ) -> dict[SeriesKey, float]:
        now = functions.at_ms(now)
        with self._lock:
            start = now - window
            out: dict[SeriesKey, float] = {}
            evaluate = functions.evaluate
            for series in self._select(metric, matchers):
                times = series.ts
                hi = len(times) if times and times[-1] <= now else bisect_right(times, now)
                lo = bisect_right(times, start, 0, hi)
                if hi <= lo:
                    continue
                if fn == "last":
                    out[series.key] = series.values[hi - 1]
                    continue
                value = evaluate(fn, (times[lo], times[hi - 1]), series.values[lo:hi])
                if value is not None:
                    out[series.key] = value
            return out

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: Span
    ) -> dict[SeriesKey, list[Sample]]:
        """Samples in ``[start, end]``; with ``step``, one ``agg`` sample per step bucket."""
        start, end, step, agg = span
        with self._lock:
            out: dict[SeriesKey, list[Sample]] = {}
            for series in self._select(metric, matchers):
                times = series.ts
                if step is None:
                    lo = bisect_left(times, start)
                    hi = bisect_right(times, end)
                    samples = list(map(Sample, times[lo:hi], series.values[lo:hi]))
                else:
                    samples = functions.downsample(
                        times, series.values, start=start, end=end, step=step, agg=agg
                    )
                if samples:
                    out[series.key] = samples
            return out

    def summaries(
        self, metric: str, matchers: Sequence[Matcher] = (), *, start: float, end: float
    ) -> dict[SeriesKey, Summary]:
        """A ``Summary`` per series of the samples in ``(start, end]``, for combining with
        the database's older part of a window."""
        with self._lock:
            out: dict[SeriesKey, Summary] = {}
            for series in self._select(metric, matchers):
                lo, hi = functions.window_slice(series.ts, start, end)
                summary = functions.summarize(series.ts[lo:hi], series.values[lo:hi])
                if summary is not None:
                    out[series.key] = summary
            return out
