"""One ``Query`` over the memory window and the database, and warming the window at start-up.

Rules ask for windows of minutes to days. ``HybridQuery`` answers from the memory window
when it holds everything the question needs, and otherwise combines the database's older
part with the memory window's newer part (split where the memory window is known to be
complete), so an answer never depends on whether the latest polls already reached disk.
When the database fails, it answers from memory alone and reports the error, so rules keep
evaluating while storage is degraded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError

from fleetd.errors import StoreError
from fleetd.logs import get_logger
from fleetd.model import Sample, SeriesKey
from fleetd.query import Matcher, Query, QueryBase, RangeAgg, RangeSpan, WindowFn
from fleetd.store import functions
from fleetd.store.functions import Summary
from fleetd.store.memory import MemoryWindow

log = get_logger("store")

DATABASE_ERRORS = (StoreError, SQLAlchemyError, OSError)


class StoredQuery(Query, Protocol):
    """A ``Query`` that can also summarise ``(start, end]`` for combining with memory, and
    takes ``range``'s parsed arguments (``QueryBase._range``)."""

    def summaries(
        self, metric: str, matchers: Sequence[Matcher] = (), *, start: float, end: float
    ) -> dict[SeriesKey, Summary]: ...

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]: ...


class RecentSource(Protocol):
    def recent_columns(
        self, since: float, until: float
    ) -> Iterable[tuple[SeriesKey, list[float], list[float]]]: ...


class HybridQuery(QueryBase):
    """Memory first, the database for what memory does not hold."""

    def __init__(
        self,
        memory: MemoryWindow,
        database: StoredQuery,
        *,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.memory = memory
        self.database = database
        self._on_error = on_error

    def _failed(self, exc: Exception, what: str) -> None:
        log.warning("store_read_failed", query=what, error=str(exc))
        if self._on_error is not None:
            self._on_error(exc)

    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        found = dict.fromkeys(self.memory.series(metric, matchers))
        try:
            found.update(dict.fromkeys(self.database.series(metric, matchers)))
        except DATABASE_ERRORS as exc:
            self._failed(exc, "series")
        return list(found)

    def _latest(
        self, metric: str, matchers: Sequence[Matcher], now: float, max_age: float | None
    ) -> dict[SeriesKey, Sample]:
        mem = self.memory.latest(metric, matchers, now=now, max_age=max_age)
        if max_age is not None and self.memory.covers(now - max_age):
            return mem
        split = self.memory.complete_after
        try:
            if split is not None:
                known = self._newest_in_memory(metric, matchers, mem, split)
                if known is not None:
                    return known
            stored = self.database.latest(metric, matchers, now=now, max_age=max_age)
        except DATABASE_ERRORS as exc:
            self._failed(exc, "latest")
            return mem
        for key, sample in mem.items():
            if key not in stored or sample.ts >= stored[key].ts:
                stored[key] = sample
        return stored

    def _newest_in_memory(
        self,
        metric: str,
        matchers: Sequence[Matcher],
        mem: dict[SeriesKey, Sample],
        split: float,
    ) -> dict[SeriesKey, Sample] | None:
        """``latest``'s answer without reading samples from the database, when memory alone
        decides it: every series the database knows (its series registry, held in memory)
        has a sample in memory newer than the split. Every sample after the split is held in
        memory, so nothing the database holds for that series is newer, and a series the
        database does not know can only be in memory. None when some series needs the
        database (no sample in memory, or only ones at or before the split)."""
        known = self.database.series(metric, matchers)
        out: dict[SeriesKey, Sample] = {}
        for key in known:
            sample = mem.get(key)
            if sample is None or sample.ts <= split:
                return None
            out[key] = sample
        if len(out) != len(mem):
            for key, sample in mem.items():
                out.setdefault(key, sample)
        return out

    def _window(
        self, fn: WindowFn, metric: str, matchers: Sequence[Matcher], window: float, now: float
    ) -> dict[SeriesKey, float]:
        start = now - window
        split = self.memory.complete_after
        if split is not None and start >= split:
            return self.memory.window(fn, metric, matchers, window=window, now=now)
        try:
            if split is None or split >= now:
                return self.database.window(fn, metric, matchers, window=window, now=now)
            older = self.database.summaries(metric, matchers, start=start, end=split)
        except DATABASE_ERRORS as exc:
            self._failed(exc, "window")
            return self.memory.window(fn, metric, matchers, window=window, now=now)
        newer = self.memory.summaries(metric, matchers, start=split, end=now)
        return functions.summary_values(fn, functions.combine_by_key(older, newer))

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]:
        """Samples (or step buckets) up to the split from the database, after it from memory;
        the step bucket holding the split combines both parts' summaries."""
        start, end, step, agg = span
        split = self.memory.complete_after
        lookback = 0.0 if step is None else step
        if split is not None and start - lookback >= split:
            return self.memory._range(metric, matchers, span)
        try:
            stored = self.database._range(metric, matchers, span)
        except DATABASE_ERRORS as exc:
            self._failed(exc, "range")
            return self.memory._range(metric, matchers, span)
        if split is None or split >= end:
            return stored
        mem = self.memory._range(metric, matchers, span)
        for key, samples in mem.items():
            fresh = [s for s in samples if s.ts - lookback >= split]
            if fresh:
                kept = [s for s in stored.get(key, []) if s.ts - lookback < split]
                stored[key] = kept + fresh
        if step is not None:
            self._fill_split_bucket(stored, metric, matchers, split, step, (start, end), agg)
        return stored

    def _fill_split_bucket(
        self,
        out: dict[SeriesKey, list[Sample]],
        metric: str,
        matchers: Sequence[Matcher],
        split: float,
        step: float,
        span: tuple[float, float],
        agg: RangeAgg,
    ) -> None:
        """The step bucket ``(t - step, t]`` holding the split: the database's part up to
        the split and memory's after it, combined."""
        step_ms = functions.step_to_ms(step)
        t = functions.bucket_end_ms(functions.to_ms(split), step_ms) / 1000.0
        if t <= split or not span[0] <= t <= span[1]:
            return  # the split falls on a bucket edge: no bucket is shared
        try:
            older = self.database.summaries(metric, matchers, start=t - step, end=split)
        except DATABASE_ERRORS as exc:
            self._failed(exc, "range")
            older = {}
        newer = self.memory.summaries(metric, matchers, start=split, end=t)
        for key, summary in functions.combine_by_key(older, newer).items():
            value = None if summary is None else summary.value(agg)
            samples = [s for s in out.get(key, []) if s.ts != t]
            if value is not None:
                samples.append(Sample(t, value))
                samples.sort(key=lambda s: s.ts)
            if samples:
                out[key] = samples


def warm_memory(memory: MemoryWindow, source: RecentSource, *, now: float) -> int:
    """Fill the memory window from the database at start-up; returns samples loaded.

    Afterwards the window counts as complete from ``now - retention`` on, so rules get full
    windows on their first evaluation after a restart.
    """
    since = now - memory.retention
    before = memory.sample_count()
    for key, ts, values in source.recent_columns(since, now):
        memory.load_columns(key, ts, values)
    memory.mark_complete_after(since)
    return memory.sample_count() - before
