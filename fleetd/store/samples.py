"""The sample store: one batched transaction per poll, and the ``Query`` protocol over every tier.

Writes go to the head table (one packed row per poll, see ``headrows``). Reads
pick, for each part of a time range, the finest tier that still holds it completely (the
watermarks say where): raw samples (chunks + head) for recent data, 1-minute rollups after
raw retention, 1-hour rollups after that. A window inside raw retention is computed from the
raw samples with exactly the code the memory window uses; longer ones combine rollup
summaries, which keeps ``increase``/``rate`` correct across counter resets.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Connection

from fleetd.model import Reading, Sample, SeriesKey
from fleetd.query import Matcher, QueryBase, RangeSpan, WindowFn
from fleetd.store import functions, headrows, reader
from fleetd.store.db import Database
from fleetd.store.functions import Buckets, Summary, to_ms
from fleetd.store.series import SeriesRegistry, relabel_series
from fleetd.store.tables import head_table
from fleetd.store.watermarks import Watermarks

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


def _ceil_to(ms: int, step: int) -> int:
    return -(-ms // step) * step


def _floor_to(ms: int, step: int) -> int:
    return ms // step * step


class Rider(Protocol):
    """What another part writes in a poll's transaction (``SampleStore.append``)."""

    def ride(self, conn: Connection) -> None:
        """Write, inside the transaction."""

    def rode(self, committed: bool) -> None:
        """After the transaction: whether what ``ride`` wrote was committed."""


@dataclass(frozen=True, slots=True)
class TierPlan:
    """Which tier answers which part of ``(lo, hi]`` (ms; ``None`` = part not used).

    Rollup parts are bucket-end ranges ``[first_end, last_end]``; the raw part is a
    sample-time range ``(lo, hi]``. Consecutive parts meet exactly at bucket boundaries.
    """

    hour: tuple[int, int] | None
    minute: tuple[int, int] | None
    raw: tuple[int, int] | None


class SampleStore(QueryBase):
    """Telemetry in the database: ``append`` per poll, ``Query`` for reads."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.registry = SeriesRegistry(db)
        self.registry.refresh()
        self.marks = Watermarks(db)

    # ---------------------------------------------------------------------------- writes
    def relabel(self, label: str, old: str, new: str) -> tuple[int, int]:
        """``relabel_series`` in its own transaction; the series cache is read again."""
        with self.db.begin() as conn:
            result = relabel_series(conn, label, old, new)
        self.registry.reload()
        return result

    def append(self, readings: Iterable[Reading], *, also: Rider | None = None) -> int:
        """Write one poll's readings in one transaction; missing ones are skipped.

        Returns the number of samples written. Either every sample of the call is stored or,
        on an error (raised), none is. Readings are grouped by timestamp into head rows.
        ``also`` writes what goes with the poll (the rules' evaluation time) in the same
        transaction, one commit and one fsync per poll, and is told whether it committed.
        """
        registry = self.registry
        polls: dict[int, dict[int, float]] = {}
        written = 0
        try:
            with self.db.begin() as conn:
                last_ts: float | None = None
                poll: dict[int, float] = {}
                for reading in readings:
                    value = reading.value
                    if value is None:
                        continue
                    if reading.ts != last_ts:
                        last_ts = reading.ts
                        poll = polls.setdefault(to_ms(last_ts), {})
                    sid = registry.id_of(reading.metric, reading.labels)
                    if sid is None:
                        sid = registry.resolve(conn, reading.metric, reading.labels)
                    poll[sid] = float(value)
                rows = [
                    {
                        "ts": ms,
                        "sids": headrows.pack_ids(list(poll)),
                        "vals": headrows.pack_values(list(poll.values())),
                    }
                    for ms, poll in polls.items()
                    if poll
                ]
                if rows:
                    conn.execute(head_table.insert(), rows)
                if also is not None:
                    also.ride(conn)
                written = sum(len(poll) for poll in polls.values())
        except BaseException:
            registry.discard_pending()
            if also is not None:
                also.rode(False)
            raise
        registry.commit_pending()
        if also is not None:
            also.rode(True)
        return written

    # ---------------------------------------------------------------------- selection
    def _select(self, metric: str, matchers: Sequence[Matcher]) -> dict[int, SeriesKey]:
        return self.registry.select(metric, matchers)

    def refresh(self) -> None:
        """Pick up series and watermarks another process (the daemon) has written."""
        self.registry.refresh()
        self.marks.reload()

    # --------------------------------------------------------------------------- Query
    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        return list(self._select(metric, matchers).values())

    def _latest(
        self, metric: str, matchers: Sequence[Matcher], now: float, max_age: float | None
    ) -> dict[SeriesKey, Sample]:
        chosen = self._select(metric, matchers)
        if not chosen:
            return {}
        now_ms = to_ms(now)
        found: dict[int, tuple[int, float]] = {}
        with self.db.read() as conn:
            remaining = list(chosen)
            lookups: list[Callable[[list[int]], dict[int, tuple[int, float]]]] = [
                lambda ids: reader.latest_head(conn, ids, now_ms),
                lambda ids: reader.latest_chunk(conn, ids, now_ms),
                lambda ids: reader.latest_rollup(conn, 60, ids, now_ms),
                lambda ids: reader.latest_rollup(conn, 3600, ids, now_ms),
            ]
            for lookup in lookups:
                if not remaining:
                    break
                for sid, hit in lookup(remaining).items():
                    if sid not in found or hit[0] > found[sid][0]:
                        found[sid] = hit
                remaining = [sid for sid in remaining if sid not in found]
        oldest = None if max_age is None else now - max_age
        out: dict[SeriesKey, Sample] = {}
        for sid, (ts_ms, value) in found.items():
            ts = ts_ms / 1000.0
            if oldest is None or ts >= oldest:
                out[chosen[sid]] = Sample(ts, value)
        return out

    def raw_columns(
        self, ids: Sequence[int], start: float, end: float
    ) -> dict[int, tuple[list[float], list[float]]]:
        """Raw samples with ``start <= ts <= end`` (a millisecond of slack either side is
        trimmed by the caller with the shared float comparisons)."""
        with self.db.read() as conn:
            return reader.read_raw(conn, ids, to_ms(start) - 1, to_ms(end) + 1)

    def _window(
        self, fn: WindowFn, metric: str, matchers: Sequence[Matcher], window: float, now: float
    ) -> dict[SeriesKey, float]:
        start = now - window
        if to_ms(start) >= self.marks.deleted_until(0):
            chosen = self._select(metric, matchers)
            out: dict[SeriesKey, float] = {}
            for sid, (ts, values) in self.raw_columns(list(chosen), start, now).items():
                lo, hi = functions.window_slice(ts, start, now)
                if hi > lo:
                    value = functions.evaluate(fn, (ts[lo], ts[hi - 1]), values[lo:hi])
                    if value is not None:
                        out[chosen[sid]] = value
            return out
        return functions.summary_values(fn, self.summaries(metric, matchers, start=start, end=now))

    def summaries(
        self, metric: str, matchers: Sequence[Matcher] = (), *, start: float, end: float
    ) -> dict[SeriesKey, Summary]:
        """A ``Summary`` per series of ``(start, end]``, from the finest tiers holding it.

        Where rollups answer, the start snaps inward to the first whole bucket.
        """
        chosen = self._select(metric, matchers)
        if not chosen:
            return {}
        lo_ms, hi_ms = to_ms(start), to_ms(end)
        if lo_ms >= self.marks.deleted_until(0):
            plan = TierPlan(None, None, (lo_ms, hi_ms))
        else:
            plan = self.plan(lo_ms, hi_ms, use_hours=True)
        parts = self._read_plan(list(chosen), plan, start, end)
        out: dict[SeriesKey, Summary] = {}
        for sid, pieces in parts.items():
            summary = functions.combine(pieces)
            if summary is not None:
                out[chosen[sid]] = summary
        return out

    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]:
        """Raw samples in ``[start, end]``; with ``step``, one ``agg`` sample per step bucket
        ``(t - step, t]`` for grid times ``t`` in ``[start, end]``.

        A step that is a whole number of minutes (hours) is answered from 1-minute (1-hour)
        rollups wherever they exist, so long ranges stay cheap; other steps use raw samples.
        """
        start, end, step, agg = span
        chosen = self._select(metric, matchers)
        if not chosen:
            return {}
        ids = list(chosen)
        out: dict[SeriesKey, list[Sample]] = {}
        if step is None:
            for sid, (ts, values) in self.raw_columns(ids, start, end).items():
                lo, hi = bisect_left(ts, start), bisect_right(ts, end)
                samples = list(map(Sample, ts[lo:hi], values[lo:hi]))
                if samples:
                    out[chosen[sid]] = samples
            return out
        step_ms = functions.step_to_ms(step)
        if step_ms % MINUTE_MS:
            for sid, (ts, values) in self.raw_columns(ids, start - step, end).items():
                samples = functions.downsample(ts, values, start=start, end=end, step=step, agg=agg)
                if samples:
                    out[chosen[sid]] = samples
            return out
        first_end = functions.bucket_end_ms(to_ms(start), step_ms)
        lo_ms, hi_ms = first_end - step_ms, to_ms(end)
        plan = self.plan(lo_ms, hi_ms, use_hours=step_ms % HOUR_MS == 0, prefer_rollups=True)
        parts = self._read_buckets(ids, plan, hi_ms / 1000.0, functions.AGG_FIELDS[agg])
        first_ms = to_ms(start)
        for sid, buckets in parts.items():
            samples = [
                Sample(end_ms / 1000.0, value)
                for end_ms, value in buckets.aggregate(step_ms, agg)
                if first_ms <= end_ms <= hi_ms
            ]
            if samples:
                out[chosen[sid]] = samples
        return out

    # ------------------------------------------------------------------------ planning
    def plan(
        self, lo_ms: int, hi_ms: int, *, use_hours: bool, prefer_rollups: bool = False
    ) -> TierPlan:
        """Split ``(lo_ms, hi_ms]`` between the tiers (see ``TierPlan``).

        With ``prefer_rollups`` (range queries by step) the coarsest allowed tier answers as
        far as it reaches, then finer ones, then raw samples after the 1-minute watermark.
        Otherwise (window functions) raw samples answer alone when they reach back to
        ``lo_ms``; if not, 1-minute rollups answer from where they still exist, 1-hour ones
        what is older, and raw samples the part after the 1-minute watermark.
        """
        raw_after = self.marks.deleted_until(0)
        if lo_ms >= raw_after and not prefer_rollups:
            return TierPlan(None, None, (lo_ms, hi_ms))
        m_after, m_until = self.marks.deleted_until(60), self.marks.rolled_until(60)
        h_after, h_until = self.marks.deleted_until(3600), self.marks.rolled_until(3600)
        cursor = lo_ms  # everything up to here is answered (or no longer exists)
        hour: tuple[int, int] | None = None
        if use_hours and (prefer_rollups or m_after > lo_ms):
            first = max(_ceil_to(lo_ms, HOUR_MS), _floor_to(h_after, HOUR_MS)) + HOUR_MS
            last = min(h_until, _floor_to(hi_ms, HOUR_MS))
            if not prefer_rollups:  # minute buckets are finer: hours only where they are gone
                last = min(last, _ceil_to(m_after, HOUR_MS))
            if first <= last:
                hour = (first, last)
                cursor = last
        minute: tuple[int, int] | None = None
        first = max(_ceil_to(cursor, MINUTE_MS), _floor_to(m_after, MINUTE_MS)) + MINUTE_MS
        last = min(m_until, _floor_to(hi_ms, MINUTE_MS))
        if first <= last:
            minute = (first, last)
            cursor = last
        raw_lo = max(cursor, raw_after)
        return TierPlan(hour, minute, (raw_lo, hi_ms) if raw_lo < hi_ms else None)

    def _read_plan(
        self,
        ids: list[int],
        plan: TierPlan,
        start: float,
        end: float,
    ) -> dict[int, list[Summary | None]]:
        """Summaries of each plan part per series, oldest part first."""
        parts: dict[int, list[Summary | None]] = {}
        with self.db.read() as conn:
            for tier, span in ((3600, plan.hour), (60, plan.minute)):
                if span is None:
                    continue
                for sid, buckets in reader.read_rollups(conn, tier, ids, *span).items():
                    parts.setdefault(sid, []).append(buckets.summary())
            if plan.raw is not None:
                lo_ms, hi_ms = plan.raw
                raw = reader.read_raw(conn, ids, lo_ms, hi_ms + 1)
                lo_s = start if lo_ms == to_ms(start) else lo_ms / 1000.0
                for sid, (ts, values) in raw.items():
                    a, b = functions.window_slice(ts, lo_s, end)
                    parts.setdefault(sid, []).append(functions.summarize(ts[a:b], values[a:b]))
        return parts

    def _read_buckets(
        self, ids: list[int], plan: TierPlan, end: float, fields: Sequence[str]
    ) -> dict[int, Buckets]:
        """Minute-or-coarser buckets per series as ``plan`` says, up to ``end``; rollups
        decode only ``fields``, raw samples are bucketed by minute."""
        out: dict[int, Buckets] = {}
        with self.db.read() as conn:
            for tier, span in ((3600, plan.hour), (60, plan.minute)):
                if span is not None:
                    for sid, buckets in reader.read_rollups(conn, tier, ids, *span, fields).items():
                        functions.add_buckets(out, sid, buckets)
            if plan.raw is not None:
                lo_ms, hi_ms = plan.raw
                for sid, (ts, values) in reader.read_raw(conn, ids, lo_ms, hi_ms).items():
                    a, b = functions.window_slice(ts, lo_ms / 1000.0, end)
                    pairs = functions.bucket_summaries(ts[a:b], values[a:b], MINUTE_MS)
                    if pairs:
                        functions.add_buckets(out, sid, Buckets.from_pairs(pairs))
        return out

    def recent_columns(
        self, since: float, until: float, *, batch: int = 64
    ) -> Iterable[tuple[SeriesKey, list[float], list[float]]]:
        """Every series' raw samples in ``(since, until]``, a batch of series at a time (to
        warm the memory window at start-up)."""
        self.registry.refresh()
        ids = self.registry.all_ids()
        for i in range(0, len(ids), batch):
            part = ids[i : i + batch]
            for sid, (ts, values) in self.raw_columns(part, since, until).items():
                lo, hi = functions.window_slice(ts, since, until)
                if hi > lo:
                    yield self.registry.key(sid), ts[lo:hi], values[lo:hi]
