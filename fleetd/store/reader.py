"""Reading samples and rollups back out of the tables, as columns.

Raw samples of a series live in compressed chunks and, for the last minutes, in head rows;
``read_raw`` stitches both into one time-sorted pair of columns. Rollups decode to
``functions.Buckets``. Callers cut exact windows with the shared ``functions`` helpers, so
the database and the memory window apply identical boundaries.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from sqlalchemy import Connection, and_, func, select

from fleetd.store import codec, headrows
from fleetd.store.functions import Buckets, add_buckets
from fleetd.store.headrows import Layouts
from fleetd.store.rows import batches
from fleetd.store.tables import chunk_table, head_table, rollup_table

MAX_CHUNK_SPAN_MS = 3_600_000
"""Largest raw chunk span ``StoreConfig`` allows; bounds the index scan for a time range."""

ROLLUP_CHUNK_SPAN_MS = {60: 3_600_000, 3600: 86_400_000}
"""Rollup chunk spans per tier: an hour of 1-minute buckets, a day of 1-hour buckets."""

_IN_LIMIT = 500

Columns = tuple[list[float], list[float]]


def encode_raw(ts_ms: Sequence[int], values: Sequence[float]) -> bytes:
    return codec.encode([ts_ms, values])


def decode_raw(blob: bytes) -> tuple[list[int], list[float]]:
    ts_ms, values = codec.decode(blob)
    return ts_ms, values  # type: ignore[return-value]  # the time column is integral


def read_head(
    conn: Connection, ids: Sequence[int], lo_ms: int, hi_ms: int, *, max_id: int | None = None
) -> dict[int, tuple[list[int], list[float]]]:
    """Head samples with ``lo_ms <= ts <= hi_ms`` per series id (a later row wins a tie)."""
    h = head_table.c
    stmt = select(h.ts, h.sids, h.vals).where(h.ts >= lo_ms, h.ts <= hi_ms)
    if max_id is not None:
        stmt = stmt.where(h.id <= max_id)
    wanted = set(ids)
    layouts = Layouts()
    out: dict[int, tuple[list[int], list[float]]] = {}
    for ts, sids, vals in conn.execute(stmt.order_by(h.ts, h.id)):
        positions = layouts.positions(sids)
        if len(wanted) <= len(positions):
            hits = [(sid, positions[sid]) for sid in wanted if sid in positions]
        else:
            hits = [(sid, i) for sid, i in positions.items() if sid in wanted]
        if not hits:
            continue
        values = headrows.unpack_values(vals)
        for sid, i in hits:
            entry = out.get(sid)
            if entry is None:
                out[sid] = ([ts], [values[i]])
            elif entry[0][-1] == ts:
                entry[1][-1] = values[i]
            else:
                entry[0].append(ts)
                entry[1].append(values[i])
    return out


def read_raw(conn: Connection, ids: Sequence[int], lo_ms: int, hi_ms: int) -> dict[int, Columns]:
    """Samples with ``lo_ms <= ts <= hi_ms`` per series id: (seconds, values) columns.

    Head samples overlapping chunks (a compaction round in progress, late arrivals) are
    merged in, the head winning a tie.
    """
    pieces: dict[int, list[tuple[list[int], list[float]]]] = {}
    c = chunk_table.c
    for batch in batches(ids, _IN_LIMIT):
        chunk_rows = conn.execute(
            select(c.series_id, c.data)
            .where(
                c.series_id.in_(batch),
                c.start_ts <= hi_ms,
                c.start_ts > lo_ms - MAX_CHUNK_SPAN_MS,
                c.last_ts >= lo_ms,
                c.first_ts <= hi_ms,
            )
            .order_by(c.series_id, c.start_ts)
        )
        for sid, blob in chunk_rows:
            ts_ms, values = decode_raw(blob)
            if ts_ms[0] < lo_ms or ts_ms[-1] > hi_ms:
                a, b = bisect_left(ts_ms, lo_ms), bisect_right(ts_ms, hi_ms)
                ts_ms, values = ts_ms[a:b], values[a:b]
            pieces.setdefault(sid, []).append((ts_ms, values))
    heads = read_head(conn, ids, lo_ms, hi_ms)
    out: dict[int, Columns] = {}
    for sid in set(pieces) | set(heads):
        ts_all: list[int] = []
        values_all: list[float] = []
        for ts_ms, values in pieces.get(sid, ()):
            ts_all.extend(ts_ms)
            values_all.extend(values)
        head = heads.get(sid)
        if head is not None:
            if ts_all and head[0][0] <= ts_all[-1]:
                merged = dict(zip(ts_all, values_all, strict=True))
                merged.update(zip(head[0], head[1], strict=True))
                ts_all = sorted(merged)
                values_all = [merged[t] for t in ts_all]
            else:
                ts_all.extend(head[0])
                values_all.extend(head[1])
        if ts_all:
            out[sid] = ([t / 1000.0 for t in ts_all], list(map(float, values_all)))
    return out


def encode_buckets(b: Buckets) -> bytes:
    ends = b.ends
    return codec.encode(
        [
            ends,
            b.count,
            b.sum,
            b.min,
            b.max,
            b.first,
            b.last,
            [e - round(t * 1000.0) for e, t in zip(ends, b.first_ts, strict=True)],
            [e - round(t * 1000.0) for e, t in zip(ends, b.last_ts, strict=True)],
            b.inc,
            b.changes,
        ]
    )


_BUCKET_COLUMNS = {
    "count": 1,
    "sum": 2,
    "min": 3,
    "max": 4,
    "first": 5,
    "last": 6,
    "first_ts": 7,
    "last_ts": 8,
    "inc": 9,
    "changes": 10,
}


def decode_buckets(blob: bytes, fields: Sequence[str] | None = None) -> Buckets:
    """A rollup chunk → ``Buckets``; with ``fields``, only those columns are filled."""
    names = list(Buckets.FIELDS if fields is None else fields)
    cols = codec.decode(blob, [0, *(_BUCKET_COLUMNS[name] for name in names)])
    b = Buckets()
    b.ends = list(map(int, cols[0]))
    for name, col in zip(names, cols[1:], strict=True):
        if name in ("first_ts", "last_ts"):
            setattr(b, name, [(e - o) / 1000.0 for e, o in zip(b.ends, col, strict=True)])
        elif name in ("count", "changes"):
            setattr(b, name, list(map(int, col)))
        else:
            setattr(b, name, list(map(float, col)))
    return b


def read_rollups(
    conn: Connection,
    tier: int,
    ids: Sequence[int],
    lo_end_ms: int,
    hi_end_ms: int,
    fields: Sequence[str] | None = None,
) -> dict[int, Buckets]:
    """Buckets of ``tier`` whose end lies in ``[lo_end_ms, hi_end_ms]``, per series id
    (with ``fields``, only those columns are decoded)."""
    span = ROLLUP_CHUNK_SPAN_MS[tier]
    r = rollup_table.c
    out: dict[int, Buckets] = {}
    for batch in batches(ids, _IN_LIMIT):
        rows = conn.execute(
            select(r.series_id, r.data)
            .where(
                r.tier == tier,
                r.series_id.in_(batch),
                r.start_ts < hi_end_ms,
                r.start_ts >= lo_end_ms - span,
                r.last_ts >= lo_end_ms,
                r.first_ts <= hi_end_ms,
            )
            .order_by(r.series_id, r.start_ts)
        )
        for sid, blob in rows:
            buckets = decode_buckets(blob, fields).between(lo_end_ms, hi_end_ms)
            if len(buckets):
                add_buckets(out, sid, buckets)
    return out


def latest_head(conn: Connection, ids: Sequence[int], now_ms: int) -> dict[int, tuple[int, float]]:
    """The newest head sample at or before ``now_ms`` per series id."""
    h = head_table.c
    wanted = set(ids)
    layouts = Layouts()
    out: dict[int, tuple[int, float]] = {}
    rows = conn.execute(
        select(h.ts, h.sids, h.vals).where(h.ts <= now_ms).order_by(h.ts.desc(), h.id.desc())
    )
    for ts, sids, vals in rows:
        positions = layouts.positions(sids)
        hits = [sid for sid in wanted if sid in positions]
        if hits:
            values = headrows.unpack_values(vals)
            for sid in hits:
                out[sid] = (int(ts), values[positions[sid]])
            wanted.difference_update(hits)
            if not wanted:
                break
    rows.close()
    return out


def latest_chunk(conn: Connection, ids: Sequence[int], now_ms: int) -> dict[int, tuple[int, float]]:
    """The newest chunked sample at or before ``now_ms`` per series id."""
    c = chunk_table.c
    out: dict[int, tuple[int, float]] = {}
    for batch in batches(ids, _IN_LIMIT):
        newest = (
            select(c.series_id.label("sid"), func.max(c.start_ts).label("mstart"))
            .where(c.series_id.in_(batch), c.first_ts <= now_ms)
            .group_by(c.series_id)
            .subquery()
        )
        rows = conn.execute(
            select(c.series_id, c.data).join(
                newest, and_(c.series_id == newest.c.sid, c.start_ts == newest.c.mstart)
            )
        )
        for sid, blob in rows:
            ts_ms, values = decode_raw(blob)
            i = bisect_right(ts_ms, now_ms)
            if i:
                out[sid] = (ts_ms[i - 1], float(values[i - 1]))
    return out


def latest_rollup(
    conn: Connection, tier: int, ids: Sequence[int], now_ms: int
) -> dict[int, tuple[int, float]]:
    """The last sample recorded by the newest rollup bucket ending at or before ``now_ms``."""
    r = rollup_table.c
    out: dict[int, tuple[int, float]] = {}
    for batch in batches(ids, _IN_LIMIT):
        newest = (
            select(r.series_id.label("sid"), func.max(r.start_ts).label("mstart"))
            .where(r.tier == tier, r.series_id.in_(batch), r.first_ts <= now_ms)
            .group_by(r.series_id)
            .subquery()
        )
        rows = conn.execute(
            select(r.series_id, r.data)
            .where(r.tier == tier)
            .join(newest, and_(r.series_id == newest.c.sid, r.start_ts == newest.c.mstart))
        )
        for sid, blob in rows:
            b = decode_buckets(blob, ("last", "last_ts"))
            i = bisect_right(b.ends, now_ms)
            if i:
                out[sid] = (round(b.last_ts[i - 1] * 1000.0), b.last[i - 1])
    return out
