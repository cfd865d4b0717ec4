"""The in-memory recent window: what rules evaluate against on every tick.

Series are indexed by metric name; each holds its values in time order and shares its
timestamps with the other series appended at the same instants: the readings of one poll
carry one timestamp, so a poll's timestamp is stored once in a ``_Times`` column, not once
per sample. Values are an ``array('d')`` (8 bytes a sample, no per-sample objects), or,
while a series has only ever held one value — most of a healthy GPU's series — just that
value and a count. A window is still two bisects and a slice, and the maths is
``fleetd.store.functions`` — the same code the database uses, so both answer identically.
Timestamps are kept at millisecond resolution, as the database stores them.

A series' values line up with the head of its column: its ``i``-th value is at ``ts[i]``,
and a series that missed the column's later instants simply has fewer values (its samples
are ``ts[head:size]``). A series whose next sample does not continue its column (a poll it
was not read in, a slower tier, an out-of-order or older sample) moves to a column of its
own — shared again with the others that move at the same instant — and columns that come to
hold the same instants are merged again as the window moves on. Pruning advances each
column's ``head`` and deletes the pruned prefix only once it is a sixteenth of the column, so
a tick does not move every series' hour of samples by one.

A missing reading (``value is None``) is not stored: its series simply goes stale.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence

from fleetd.model import Labels, Reading, Sample, SeriesKey, same_value
from fleetd.query import Matcher, QueryBase, RangeSpan, WindowFn, matches_all
from fleetd.store import functions
from fleetd.store.functions import Summary

_SELECT_CACHE_LIMIT = 4096
_COMPACT_MIN = 64  # pruned samples a column keeps before deleting them (and 1/16 of it)
_MERGE_EVERY = 64  # prunes between looks for columns holding the same instants

_MoveKey = tuple["_Times", int, float]


class _Times:
    """A time-sorted timestamp column shared by the series sampled at the same instants."""

    __slots__ = ("head", "refs", "ts")

    def __init__(self, ts: array[float] | None = None, head: int = 0) -> None:
        self.ts: array[float] = array("d") if ts is None else ts
        self.head = head  # ts[:head] are pruned, kept until the column compacts
        self.refs = 0  # series using this column


class _Series:
    """One series: its values, lined up with the head of its (shared) timestamp column.

    While every value is the same, only that value and the count are kept (``values`` is
    None): most of a healthy GPU's series (ECC counters, clocks, limits, health) do not
    change for hours. The first different value turns them into an ``array('d')``.
    """

    __slots__ = ("const", "count", "key", "times", "values")

    def __init__(self, key: SeriesKey, times: _Times) -> None:
        self.key = key
        self.times = times
        self.values: array[float] | None = None
        self.const = 0.0  # every value, while ``values`` is None
        self.count = 0  # how many, while ``values`` is None
        times.refs += 1

    def size(self) -> int:
        """The index after this series' last sample in its column."""
        values = self.values
        return self.count if values is None else len(values)

    def at(self, i: int) -> float:
        values = self.values
        return self.const if values is None else values[i]

    def slice(self, lo: int, hi: int) -> array[float]:
        values = self.values
        if values is None:
            return array("d", [self.const]) * max(0, hi - lo)
        return values[lo:hi]

    def add(self, value: float) -> None:
        """Append the value at the next instant of the column."""
        values = self.values
        if values is not None:
            values.append(value)
        elif not self.count:
            self.const = value
            self.count = 1
        elif same_value(value, self.const):
            self.count += 1
        else:
            self.expand().append(value)

    def expand(self) -> array[float]:
        """The values as an array (no longer one repeated value)."""
        values = self.values
        if values is None:
            values = self.values = array("d", [self.const]) * self.count
        return values

    def drop_first(self, k: int) -> None:
        """Forget the first ``k`` positions (the column deleted its pruned prefix)."""
        values = self.values
        if values is None:
            self.count -= k
            return
        del values[:k]
        if values and values.count(values[0]) == len(values):
            first = values[0]
            if first != 0.0 or values.tobytes() == array("d", [first]).tobytes() * len(values):
                self.values = None
                self.const = first
                self.count = len(values)

    def shift(self, k: int) -> None:
        """Line up with a column ``k`` positions longer at the head (fewer if negative)."""
        values = self.values
        if values is None:
            self.count += k
        elif k > 0:
            values[0:0] = array("d", bytes(8 * k))
        elif k < 0:
            del values[:-k]

    def move_to(self, times: _Times) -> None:
        self.times.refs -= 1
        times.refs += 1
        self.times = times

    def put(self, ts: float, value: float, moves: dict[_MoveKey, _Times]) -> int:
        """Add a sample; returns 1 for a new one, 0 when it replaced a value at ``ts``.

        In-order appends are O(1): the first series of a poll appends the poll's timestamp
        to the column, the others find it there. ``moves`` collects, for one ``append``,
        the columns series moved to, so series that leave a column together share the new
        one."""
        times = self.times.ts
        n = self.size()
        m = len(times)
        if n == m:
            if not n or ts > times[-1]:
                times.append(ts)
                self.add(value)
                return 1
        elif n == m - 1 and times[n] == ts:
            self.add(value)
            return 1
        return self._put_slow(ts, value, moves)

    def _put_slow(self, ts: float, value: float, moves: dict[_MoveKey, _Times]) -> int:
        col = self.times
        times = col.ts
        n = self.size()
        if n == col.head or ts > times[n - 1]:
            # in order for this series, but its column went on without it: a column of
            # its own, shared with the series leaving the same column at the same point
            key = (col, n, ts)
            target = moves.get(key)
            if target is None or len(target.ts) != n + 1 or target.ts[-1] != ts:
                target = _Times(times[:n], col.head)
                target.ts.append(ts)
                moves[key] = target
            self.move_to(target)
            self.add(value)
            return 1
        values = self.expand()
        i = bisect_left(times, ts, col.head, n)
        if times[i] == ts:  # i < n: ts <= times[n - 1]
            values[i] = value
            return 0
        if col.refs != 1 or len(times) != n:
            own = _Times(times[:n], col.head)
            self.move_to(own)
            times = own.ts
        times.insert(i, ts)
        values.insert(i, value)
        moves.clear()  # this column's prefixes changed
        return 1


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
        self._fresh: _Times | None = None  # the column new series of the latest instant join
        self._loaded: dict[tuple[int, float, float], _Times] = {}  # columns load_columns made
        self._prunes = 0
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

    def column_count(self) -> int:
        """Distinct timestamp columns the series share, for tests and benchmarks."""
        with self._lock:
            return len({id(s.times) for by in self._metrics.values() for s in by.values()})

    # ------------------------------------------------------------------------ writing
    def _new_series(self, key: SeriesKey, ts: float) -> _Series:
        """A series first seen at ``ts``: it joins the column started at ``ts`` if the
        latest one was, so the series of a first poll share one column."""
        fresh = self._fresh
        if fresh is None or fresh.head or len(fresh.ts) != 1 or fresh.ts[0] != ts:
            fresh = self._fresh = _Times()
        self._versions[key.metric] = self._versions.get(key.metric, 0) + 1
        return _Series(key, fresh)

    def append(self, readings: Iterable[Reading]) -> None:
        """Add one poll's readings; missing ones (``value is None``) are skipped."""
        with self._lock:
            metrics = self._metrics
            moves: dict[_MoveKey, _Times] = {}
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
                    series = by_labels[reading.labels] = self._new_series(reading.key, last_norm)
                # _Series.put's fast path, inlined: this runs for every reading of a poll
                times = series.times.ts
                values = series.values
                n = series.count if values is None else len(values)
                m = len(times)
                if n == m:
                    if not n or last_norm > times[-1]:
                        times.append(last_norm)
                    else:
                        added += series.put(last_norm, float(value), moves)
                        continue
                elif n != m - 1 or times[n] != last_norm:
                    added += series.put(last_norm, float(value), moves)
                    continue
                added += 1
                if values is not None:
                    values.append(float(value))
                    continue
                v = float(value)
                if n and not same_value(v, series.const):
                    series.expand().append(v)
                else:
                    series.const = v
                    series.count = n + 1
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
                column = array("d", [functions.at_ms(t) for t in ts])
                shape = (len(column), column[0], column[-1]) if column else None
                times = self._loaded.get(shape) if shape is not None else None
                if times is None or times.head or times.ts != column:
                    times = _Times(column)
                    if shape is not None:
                        self._loaded[shape] = times
                series = by_labels[key.labels] = _Series(key, times)
                for v in values:
                    series.add(float(v))
                self._versions[key.metric] = self._versions.get(key.metric, 0) + 1
                self._samples += series.size()
                return
            moves: dict[_MoveKey, _Times] = {}
            added = 0
            for t, v in zip(ts, values, strict=True):
                added += series.put(functions.at_ms(t), float(v), moves)
            self._samples += added

    def mark_complete_after(self, when: float) -> None:
        """Declare that every sample later than ``when`` has been loaded or appended."""
        self._loaded.clear()
        if self._complete_after is None or when < self._complete_after:
            self._complete_after = when

    def prune(self, now: float) -> None:
        """Forget samples at or before ``now - retention``; series left empty are dropped."""
        with self._lock:
            horizon = now - self._retention
            self._loaded.clear()
            # per column: (new head, compact now)
            heads: dict[_Times, tuple[int, bool]] = {}
            removed = 0
            for metric in list(self._metrics):
                by_labels = self._metrics[metric]
                emptied = []
                for labels, series in by_labels.items():
                    col = series.times
                    old = col.head
                    seen = heads.get(col)
                    if seen is None:
                        times = col.ts
                        head = old
                        if len(times) > old and times[old] <= horizon:
                            head = bisect_right(times, horizon, old)
                        compact = head > old and head >= _COMPACT_MIN and head * 16 >= len(times)
                        heads[col] = seen = (head, compact)
                    head, compact = seen
                    if head == old:
                        continue
                    n = series.size()
                    if n <= head:
                        removed += n - old
                        emptied.append(labels)
                        col.refs -= 1
                    else:
                        removed += head - old
                        if compact:
                            series.drop_first(head)
                if emptied:
                    for labels in emptied:
                        del by_labels[labels]
                    self._versions[metric] = self._versions.get(metric, 0) + 1
                    if not by_labels:
                        del self._metrics[metric]
            self._samples -= removed
            for col, (head, compact) in heads.items():
                if compact:
                    del col.ts[:head]
                    col.head = 0
                else:
                    col.head = head
            self._prunes += 1
            if len(heads) > 1 and self._prunes % _MERGE_EVERY == 0:
                self._merge_columns(list(heads))
            if self._complete_after is not None and horizon > self._complete_after:
                self._complete_after = horizon

    def _merge_columns(self, columns: list[_Times]) -> None:
        """Series in different columns holding the same instants share one column again
        (those that moved out on a missed poll, once it has left the window)."""
        first: dict[tuple[int, float, float], _Times] = {}
        into: dict[_Times, _Times] = {}
        for col in columns:
            times, head = col.ts, col.head
            if len(times) <= head:
                continue
            shape = (len(times) - head, times[head], times[-1])
            keep = first.get(shape)
            if keep is None:
                first[shape] = col
            elif keep.ts[keep.head :] == times[head:]:
                into[col] = keep
        if not into:
            return
        for by_labels in self._metrics.values():
            for series in by_labels.values():
                keep = into.get(series.times)
                if keep is None:
                    continue
                series.shift(keep.head - series.times.head)
                series.move_to(keep)
        if self._fresh in into:
            self._fresh = None

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
                col = series.times
                times, head, n = col.ts, col.head, series.size()
                i = n if n > head and times[n - 1] <= now else bisect_right(times, now, head, n)
                if i == head:
                    continue
                ts = times[i - 1]
                if oldest is not None and ts < oldest:
                    continue
                out[series.key] = Sample(ts, series.at(i - 1))
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
                col = series.times
                times, head, n = col.ts, col.head, series.size()
                hi = n if n > head and times[n - 1] <= now else bisect_right(times, now, head, n)
                lo = bisect_right(times, start, head, hi)
                if hi <= lo:
                    continue
                if fn == "last":
                    out[series.key] = series.at(hi - 1)
                    continue
                value = evaluate(fn, (times[lo], times[hi - 1]), series.slice(lo, hi))
                if value is not None:
                    out[series.key] = value
            return out

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]:
        """Samples in ``[start, end]``; with ``step``, one ``agg`` sample per step bucket."""
        start, end, step, agg = span
        with self._lock:
            out: dict[SeriesKey, list[Sample]] = {}
            for series in self._select(metric, matchers):
                col = series.times
                times, head, n = col.ts, col.head, series.size()
                if step is None:
                    lo = bisect_left(times, start, head, n)
                    hi = bisect_right(times, end, lo, n)
                    samples = list(map(Sample, times[lo:hi], series.slice(lo, hi)))
                else:
                    if head or n != len(times):
                        times = times[head:n]
                    samples = functions.downsample(
                        times, series.slice(head, n), start=start, end=end, step=step, agg=agg
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
                col = series.times
                times, head, n = col.ts, col.head, series.size()
                lo = bisect_right(times, start, head, n)
                hi = bisect_right(times, end, head, n)
                summary = functions.summarize(times[lo:hi], series.slice(lo, hi))
                if summary is not None:
                    out[series.key] = summary
            return out
