"""Background work on the sample tables, in small bounded steps that never stall a poll.

``Maintenance.step(now)`` does at most ``maintenance_rows`` rows of each job, each job in its
own short transaction, and says whether more is pending so the scheduler can call again:

1. compaction: head rows of a closed span → one compressed chunk per series;
2. rollups: closed hours of raw samples → 1-minute buckets; closed days of 1-minute buckets
   → 1-hour buckets (watermarks record how far each tier is complete);
3. retention: raw chunks after ``raw_retention`` (only once rolled up), 1-minute rollups
   after ``rollup_1m_retention`` (only once rolled into hours), 1-hour rollups after
   ``rollup_1h_retention``, events after ``event_retention``;
4. the disk budget: while the database is larger than ``disk_budget_bytes``, the oldest data
   of every tier goes first, with a log line, a counter and a ``storage`` event;
5. handing free pages back to the file system (SQLite incremental vacuum).

Progress within a round lives in memory; every write is idempotent (a chunk or rollup row is
replaced, not appended), so a crash simply redoes the interrupted batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import Connection, Row, delete, func, select, tuple_

from fleetd.logs import get_logger
from fleetd.store import functions, reader
from fleetd.store.config import StoreConfig
from fleetd.store.events import EventKind, EventLog
from fleetd.store.functions import Buckets, to_ms
from fleetd.store.reader import ROLLUP_CHUNK_SPAN_MS, decode_raw, encode_buckets, encode_raw
from fleetd.store.rows import batches
from fleetd.store.samples import HOUR_MS, MINUTE_MS, SampleStore
from fleetd.store.tables import chunk_table, head_table, rollup_table
from fleetd.store.watermarks import DELETED_UNTIL, ROLLUP_UNTIL

log = get_logger("store")

VACUUM_PAGES = 512
MAX_ROUND_MS = {0: 86_400_000, 60: 86_400_000, 3600: 30 * 86_400_000}
"""Longest stretch one round covers per tier (0 = compaction), bounding a series' batch."""
SAMPLE_NUMBERS = 2
"""What ``maintenance_rows`` counts: raw samples, each a time and a value when read."""
BUCKET_NUMBERS = len(Buckets.FIELDS) + 1
"""A 1-minute bucket read for the hourly rollup: its end and ten summary columns. Counted as
raw samples, a day of them would make a step read five times what the setting allows; the
first daily rollup then lifted the RSS high-water mark by ~2.4 MB, a step glibc kept."""


@dataclass
class MaintenanceReport:
    """What one ``step`` did; ``more`` means another step right away would find work."""

    compacted_rows: int = 0
    rolled_series: dict[int, int] = field(default_factory=dict)
    deleted_chunks: int = 0
    deleted_events: int = 0
    budget_dropped_bytes: int = 0
    more: bool = False


@dataclass
class _Round:
    """A pass over every series for one span: where it is and which series are done."""

    start: int
    end: int
    cursor: int = 0
    per_step: int = 1  # series per call
    max_id: int = 0  # compaction: head rows newer than the round's start wait for the next


class Maintenance:
    """Compaction, rollups, retention and the disk budget for one ``SampleStore``."""

    def __init__(
        self,
        store: SampleStore,
        config: StoreConfig,
        events: EventLog | None = None,
        *,
        node: str = "",
    ) -> None:
        self.store = store
        self.db = store.db
        self.config = config
        self.events = events
        self.node = node
        self._compact: _Round | None = None
        self._rollup: dict[int, _Round | None] = {60: None, 3600: None}
        # nothing can be ready before these times (ms): skip the look-up scans until then
        self._idle_until: dict[str, int] = {"compact": 0, "rollup60": 0, "rollup3600": 0}
        self._over_budget = False
        self.budget_dropped_bytes_total = 0
        self.disk_bytes: int | None = None
        self._last_now: float | None = None

    # --------------------------------------------------------------------------- driver
    def step(self, now: float) -> MaintenanceReport:
        """One bounded step of every job."""
        report = MaintenanceReport()
        if self._last_now is not None and now < self._last_now:
            # time went back (a clock re-anchored): what was idle until then may be due now
            self._idle_until = dict.fromkeys(self._idle_until, 0)
        self._last_now = now
        try:
            report.compacted_rows = self.compact(now)
            for tier in (60, 3600):
                report.rolled_series[tier] = self.rollup(tier, now)
            report.deleted_chunks = self.retention(now)
            report.deleted_events = self.prune_events(now)
            report.budget_dropped_bytes = self.enforce_budget(now)
            self.db.release_free_pages(VACUUM_PAGES)
        except BaseException:
            self.store.marks.reload()  # a failed commit must not leave cached marks ahead
            raise
        report.more = bool(
            report.compacted_rows
            or any(report.rolled_series.values())
            or report.deleted_chunks
            or report.deleted_events
            or report.budget_dropped_bytes
        )
        return report

    @property
    def _span_ms(self) -> int:
        return to_ms(self.config.chunk_span)

    def _next_ids(self, cursor: int, limit: int) -> list[int]:
        ids = [sid for sid in self.store.registry.all_ids() if sid > cursor]
        return ids[:limit]

    # ----------------------------------------------------------------------- compaction
    def compact(self, now: float) -> int:
        """Chunk the closed spans of head rows for a batch of series.

        A round covers every closed span from the oldest head row on (at most a day, to
        bound the work per series) and walks the series a batch per call; when all are
        done, the round's head rows (those that existed when it began) are deleted.
        Returns the samples chunked, at least 1 when it made progress, 0 when nothing is
        closed yet.
        """
        span = self._span_ms
        cutoff = to_ms(now - self.config.compact_delay)
        h = head_table.c
        if self._compact is None:
            if cutoff < self._idle_until["compact"]:
                return 0
            self.store.registry.refresh()
            with self.db.read() as conn:
                oldest, max_id = conn.execute(select(func.min(h.ts), func.max(h.id))).one()
                if oldest is None:
                    return 0
                start = int(oldest) // span * span
                end = min(cutoff // span * span, start + MAX_ROUND_MS[0])
                if end <= start:
                    self._idle_until["compact"] = start + span
                    return 0
                polls = conn.execute(
                    select(func.count()).where(h.ts < end, h.id <= max_id)
                ).scalar_one()
            per_step = max(1, self.config.maintenance_rows // max(1, int(polls)))
            self._compact = _Round(start, end=end, max_id=int(max_id), per_step=per_step)
        rnd = self._compact
        ids = self._next_ids(rnd.cursor, rnd.per_step)
        if not ids:
            with self.db.begin() as conn:
                conn.execute(delete(head_table).where(h.ts < rnd.end, h.id <= rnd.max_id))
            self._compact = None
            return 1
        with self.db.read() as conn:
            heads = reader.read_head(conn, ids, 0, rnd.end - 1, max_id=rnd.max_id)
        groups: dict[tuple[int, int], tuple[list[int], list[float]]] = {}
        moved = 0
        for sid, (ts_list, values) in heads.items():
            moved += len(ts_list)
            for ts, value in zip(ts_list, values, strict=True):
                key = (sid, ts // span * span)
                group = groups.get(key)
                if group is None:
                    group = groups[key] = ([], [])
                group[0].append(ts)
                group[1].append(value)
        if groups:
            with self.db.begin() as conn:
                self._write_chunks(conn, groups)
        rnd.cursor = ids[-1]
        return moved or 1

    def _write_chunks(
        self, conn: Connection, groups: dict[tuple[int, int], tuple[list[int], list[float]]]
    ) -> None:
        c = chunk_table.c
        existing: dict[tuple[int, int], bytes] = {}
        for part in batches(groups, 200):
            for sid, start, blob in conn.execute(
                select(c.series_id, c.start_ts, c.data).where(
                    tuple_(c.series_id, c.start_ts).in_(part)
                )
            ):
                existing[(sid, start)] = blob
        if existing:
            conn.execute(
                delete(chunk_table).where(tuple_(c.series_id, c.start_ts).in_(list(existing)))
            )
        inserts = []
        for (sid, start), (ts_ms, values) in groups.items():
            old = existing.get((sid, start))
            if old is not None:
                old_ts, old_values = decode_raw(old)
                merged = dict(zip(old_ts, old_values, strict=True))
                merged.update(zip(ts_ms, values, strict=True))
                ts_ms = sorted(merged)
                values = [float(merged[t]) for t in ts_ms]
            inserts.append(
                {
                    "series_id": sid,
                    "start_ts": start,
                    "first_ts": ts_ms[0],
                    "last_ts": ts_ms[-1],
                    "count": len(ts_ms),
                    "data": encode_raw(ts_ms, values),
                }
            )
        conn.execute(chunk_table.insert(), inserts)

    # -------------------------------------------------------------------------- rollups
    def _next_source_data(self, conn: Connection, tier: int, after: int) -> int | None:
        """The earliest time after ``after`` holding data the tier is built from."""
        if tier == 60:
            c, h = chunk_table.c, head_table.c
            in_chunks = conn.execute(select(func.min(c.first_ts)).where(c.last_ts > after)).scalar()
            in_head = conn.execute(select(func.min(h.ts)).where(h.ts > after)).scalar()
            found = [int(v) for v in (in_chunks, in_head) if v is not None]
            return max(min(found), after + 1) if found else None
        r = rollup_table.c
        first = conn.execute(
            select(func.min(r.first_ts)).where(r.tier == 60, r.last_ts > after)
        ).scalar()
        return None if first is None else max(int(first), after + 1)

    def rollup(self, tier: int, now: float) -> int:
        """Roll a batch of series over the closed spans after the tier's watermark.

        A round covers the closed spans from the first source data after the watermark (at
        most ``MAX_ROUND_MS``) and walks the series a batch per call; the watermark moves
        when every series is done. Returns the series processed, at least 1 when it made
        progress, 0 when nothing is ready.
        """
        span = ROLLUP_CHUNK_SPAN_MS[tier]
        marks = self.store.marks
        ready = to_ms(now - self.config.compact_delay) if tier == 60 else marks.rolled_until(60)
        rnd = self._rollup[tier]
        if rnd is None:
            idle_key = f"rollup{tier}"
            if marks.rolled_until(tier) > ready // span * span:
                self._rewind(tier, ready // span * span)
            if ready < self._idle_until[idle_key]:
                return 0
            until = marks.rolled_until(tier)
            with self.db.read() as conn:
                first = self._next_source_data(conn, tier, until)
            if first is None:
                return 0
            start = max(until, -(-first // span) * span - span)  # spans (s, s + span]
            end = min(ready // span * span, start + MAX_ROUND_MS[tier])
            if end <= start:
                self._idle_until[idle_key] = start + span
                return 0
            self.store.registry.refresh()
            if tier == 60:  # raw samples, at most one a second
                per_series = (end - start) // 1000
            else:  # 1-minute buckets, weighed in raw samples' worth of numbers read
                per_series = (end - start) // MINUTE_MS * BUCKET_NUMBERS // SAMPLE_NUMBERS
            per_step = max(1, self.config.maintenance_rows // per_series)
            rnd = self._rollup[tier] = _Round(start, end=end, per_step=per_step)
        ids = self._next_ids(rnd.cursor, rnd.per_step)
        lo, hi = rnd.start, rnd.end
        rows = []
        if ids:
            with self.db.read() as conn:
                if tier == 60:
                    built = {
                        sid: Buckets.from_pairs(functions.bucket_summaries(ts, values, MINUTE_MS))
                        for sid, (ts, values) in reader.read_raw(conn, ids, lo + 1, hi).items()
                    }
                else:
                    built = {
                        sid: Buckets.from_pairs(buckets.regroup(HOUR_MS))
                        for sid, buckets in reader.read_rollups(
                            conn, 60, ids, lo + MINUTE_MS, hi
                        ).items()
                    }
            for sid, buckets in built.items():
                for chunk_start in range(lo, hi, span):
                    part = buckets.between(chunk_start + 1, chunk_start + span)
                    if len(part):
                        rows.append(
                            {
                                "tier": tier,
                                "series_id": sid,
                                "start_ts": chunk_start,
                                "first_ts": part.ends[0],
                                "last_ts": part.ends[-1],
                                "count": sum(part.count),
                                "data": encode_buckets(part),
                            }
                        )
        r = rollup_table.c
        with self.db.begin() as conn:
            if ids:
                conn.execute(
                    delete(rollup_table).where(
                        r.tier == tier,
                        r.series_id.in_(ids),
                        r.start_ts >= lo,
                        r.start_ts < hi,
                    )
                )
                if rows:
                    conn.execute(rollup_table.insert(), rows)
            else:
                marks.set(conn, ROLLUP_UNTIL[tier], hi)  # every series done
        if ids:
            rnd.cursor = ids[-1]
        else:
            self._rollup[tier] = None
        return max(1, len(ids))

    def _rewind(self, tier: int, closed: int) -> None:
        """A watermark ahead of what is ready was set by a clock that was ahead (a database
        from before a restart with a stepped clock, a re-anchored clock): samples written
        since, stamped before it, would never be rolled up. Move it back to the last closed
        span (never into spans whose source data is already deleted), so those spans are
        rolled again, from every sample, when they close; queries read raw samples after it.
        """
        span = ROLLUP_CHUNK_SPAN_MS[tier]
        source = self.store.marks.deleted_until(0 if tier == 60 else 60)
        target = max(closed, -(-source // span) * span)
        until = self.store.marks.rolled_until(tier)
        if target >= until:
            return
        with self.db.begin() as conn:
            self.store.marks.set(conn, ROLLUP_UNTIL[tier], target)
        self._idle_until[f"rollup{tier}"] = 0
        log.warning(
            "store_rollups_rewound",
            tier=tier,
            rolled_until=until / 1000.0,
            rewound_to=target / 1000.0,
            detail="rolled up ahead of the clock; those spans are rolled again as they close",
        )

    # ------------------------------------------------------------------------ retention
    def retention(self, now: float) -> int:
        """Delete one batch of chunks past each tier's retention; returns chunks deleted."""
        marks = self.store.marks
        limit = max(1, self.config.maintenance_rows // 100)
        now_ms = to_ms(now)
        deleted = 0
        raw_h = min(now_ms - to_ms(self.config.raw_retention), marks.rolled_until(60))
        deleted += self._delete_tier(0, raw_h, limit)
        m_h = min(now_ms - to_ms(self.config.rollup_1m_retention), marks.rolled_until(3600))
        deleted += self._delete_tier(60, m_h, limit)
        h_h = now_ms - to_ms(self.config.rollup_1h_retention)
        deleted += self._delete_tier(3600, h_h, limit)
        return deleted

    def _delete_tier(self, tier: int, horizon: int, limit: int) -> int:
        """Delete up to ``limit`` chunks of ``tier`` (0 = raw) ending at or before ``horizon``."""
        if horizon <= 0:
            return 0
        marks = self.store.marks
        with self.db.begin() as conn:
            keys = _delete_ending_by(conn, tier, horizon, limit, "last_ts")
            reached = horizon if len(keys) < limit else int(keys[-1][2])
            marks.raise_to(conn, DELETED_UNTIL[tier], reached)
        return len(keys)

    def prune_events(self, now: float) -> int:
        if self.events is None:
            return 0
        return self.events.prune(
            before=now - self.config.event_retention, limit=self.config.maintenance_rows
        )

    # ------------------------------------------------------------------------ the budget
    def enforce_budget(self, now: float) -> int:
        """Over budget: drop one batch of the oldest data of every tier; returns bytes dropped."""
        budget = self.config.disk_budget_bytes
        size = self.db.size_bytes()
        on_disk = self.db.file_bytes()
        self.disk_bytes = size if on_disk is None else on_disk
        if budget is None or size is None or size <= budget:
            if self._over_budget and size is not None:
                log.info("store_disk_budget_ok", size_bytes=size, budget_bytes=budget)
            self._over_budget = False
            return 0
        oldest = self._oldest_ms()
        if oldest is None:
            return 0
        now_ms = to_ms(now)
        horizon = oldest + max(HOUR_MS, (now_ms - oldest) // 50)
        limit = max(1, self.config.maintenance_rows // 20)
        dropped = self._drop_before(horizon, limit)
        self.budget_dropped_bytes_total += dropped
        log.warning(
            "store_disk_budget_exceeded",
            size_bytes=size,
            budget_bytes=budget,
            dropped_before=horizon / 1000.0,
            dropped_bytes=dropped,
        )
        if not self._over_budget and self.events is not None:
            self.events.append(
                EventKind.STORAGE,
                now=now,
                node=self.node,
                message="disk budget exceeded: dropping the oldest stored telemetry",
                data={"size_bytes": size, "budget_bytes": budget, "dropped_before": horizon},
            )
        self._over_budget = True
        return dropped

    def _oldest_ms(self) -> int | None:
        with self.db.read() as conn:
            found = [
                conn.execute(select(func.min(rollup_table.c.first_ts))).scalar(),
                conn.execute(select(func.min(chunk_table.c.first_ts))).scalar(),
                conn.execute(select(func.min(head_table.c.ts))).scalar(),
            ]
        values = [int(v) for v in found if v is not None]
        return min(values) if values else None

    def _drop_before(self, horizon: int, limit: int) -> int:
        """Delete up to ``limit`` chunks per tier, and head rows, ending at or before
        ``horizon``; returns the bytes of data removed."""
        marks = self.store.marks
        dropped = 0
        h = head_table.c
        with self.db.begin() as conn:
            for tier in (3600, 60):
                rows = _delete_ending_by(conn, tier, horizon, limit, "bytes")
                dropped += sum(int(x[2]) for x in rows)
                marks.raise_to(conn, DELETED_UNTIL[tier], horizon)
            rows = _delete_ending_by(conn, 0, horizon, limit, "bytes")
            dropped += sum(int(x[2]) for x in rows)
            head_bytes = conn.execute(
                select(func.sum(func.length(h.sids) + func.length(h.vals))).where(h.ts <= horizon)
            ).scalar()
            conn.execute(delete(head_table).where(h.ts <= horizon))
            dropped += int(head_bytes or 0)
            marks.raise_to(conn, DELETED_UNTIL[0], horizon)
        return dropped


def _delete_ending_by(
    conn: Connection, tier: int, horizon: int, limit: int, third: Literal["last_ts", "bytes"]
) -> Sequence[Row[int, int, int]]:
    """Delete up to ``limit`` chunks of ``tier`` (0 = raw) ending at or before ``horizon``
    and return their ``(series_id, start_ts, third)``: with ``last_ts`` the oldest-ending
    first, with ``bytes`` (the data's length) in no particular order."""
    table = chunk_table if tier == 0 else rollup_table
    c = table.c
    scope = [] if tier == 0 else [c.tier == tier]
    query = select(
        c.series_id, c.start_ts, c.last_ts if third == "last_ts" else func.length(c.data)
    )
    query = query.where(*scope, c.last_ts <= horizon).limit(limit)
    if third == "last_ts":
        query = query.order_by(c.last_ts)
    rows = conn.execute(query).all()
    if rows:
        keys = [(x[0], x[1]) for x in rows]
        conn.execute(delete(table).where(*scope, tuple_(c.series_id, c.start_ts).in_(keys)))
    return rows
