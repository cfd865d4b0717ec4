"""(metric, labels) ↔ integer series id, cached in memory.

Every sample row and chunk names its series by id; the registry turns readings into ids
without a query per reading, and answers ``series(metric, matchers)`` from memory. New ids
are handed out inside the caller's write transaction and cached only once it commits, so a
rolled-back poll never leaves the cache pointing at ids that do not exist. One writer (the
poll) and any number of readers may use it from different threads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from sqlalchemy import Connection, select, update

from fleetd.model import Labels, SeriesKey
from fleetd.query import Matcher, matches_all
from fleetd.store.db import Database
from fleetd.store.tables import series_table


def encode_labels(labels: Labels) -> str:
    """Canonical text of sorted label pairs (the unique key stored with the metric)."""
    return json.dumps([list(pair) for pair in labels], separators=(",", ":"))


def decode_labels(text: str) -> Labels:
    return tuple((str(k), str(v)) for k, v in json.loads(text))


_SELECT_CACHE_LIMIT = 4096  # distinct (metric, matchers) selections remembered


class SeriesRegistry:
    """The series table, cached; one per open database."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # copy-on-write per metric, so readers in other threads never see a dict change
        self._ids: dict[str, dict[Labels, int]] = {}
        self._keys: dict[int, SeriesKey] = {}
        self._max_id = 0
        self._pending: dict[tuple[str, Labels], int] = {}
        self._lock = threading.Lock()
        # select's answers, each with the per-metric dict it was computed from: that dict is
        # replaced (never changed) when the metric's series change, so identity is its version
        self._selected: dict[
            tuple[str, tuple[Matcher, ...]], tuple[dict[Labels, int], dict[int, SeriesKey]]
        ] = {}

    def reload(self) -> None:
        """Forget the cache and read the whole table again (after series were relabelled)."""
        with self._lock:
            self._ids, self._keys, self._max_id = {}, {}, 0
        self.refresh()

    def refresh(self) -> None:
        """Load series created since the last look (by this or another process)."""
        t = series_table
        with self._db.read() as conn:
            rows = conn.execute(
                select(t.c.id, t.c.metric, t.c.labels).where(t.c.id > self._max_id)
            ).all()
        self._remember([(int(sid), metric, decode_labels(labels)) for sid, metric, labels in rows])

    def _remember(self, rows: Sequence[tuple[int, str, Labels]]) -> None:
        if not rows:
            return
        with self._lock:
            by_metric: dict[str, dict[Labels, int]] = {}
            for sid, metric, labels in rows:
                fresh = by_metric.get(metric)
                if fresh is None:
                    fresh = by_metric[metric] = dict(self._ids.get(metric, {}))
                fresh[labels] = sid
                self._keys[sid] = SeriesKey(metric, labels)
                self._max_id = max(self._max_id, sid)
            self._ids.update(by_metric)

    def key(self, sid: int) -> SeriesKey:
        return self._keys[sid]

    def id_of(self, metric: str, labels: Labels) -> int | None:
        by_labels = self._ids.get(metric)
        return None if by_labels is None else by_labels.get(labels)

    def all_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._keys)

    def select(self, metric: str, matchers: Sequence[Matcher] = ()) -> dict[int, SeriesKey]:
        """Ids and keys of the known series of ``metric`` matching every matcher."""
        by_labels = self._ids.get(metric)
        if by_labels is None:
            return {}
        cache_key = (metric, tuple(matchers))
        cached = self._selected.get(cache_key)
        if cached is not None and cached[0] is by_labels:
            return dict(cached[1])
        chosen = {
            sid: SeriesKey(metric, labels)
            for labels, sid in by_labels.items()
            if matches_all(labels, matchers)
        }
        if len(self._selected) >= _SELECT_CACHE_LIMIT:
            self._selected.clear()
        self._selected[cache_key] = (by_labels, chosen)
        return dict(chosen)

    def resolve(self, conn: Connection, metric: str, labels: Labels) -> int:
        """The id of a series, inserting it within ``conn``'s transaction when new.

        Call ``commit_pending`` after the transaction commits, ``discard_pending`` after a
        rollback.
        """
        by_labels = self._ids.get(metric)
        if by_labels is not None:
            sid = by_labels.get(labels)
            if sid is not None:
                return sid
        pending = self._pending.get((metric, labels))
        if pending is not None:
            return pending
        t = series_table
        encoded = encode_labels(labels)
        found = conn.execute(
            select(t.c.id).where(t.c.metric == metric, t.c.labels == encoded)
        ).scalar()
        if found is None:
            result = conn.execute(t.insert().values(metric=metric, labels=encoded))
            assert result.inserted_primary_key is not None
            found = result.inserted_primary_key[0]
        sid = int(found)
        self._pending[(metric, labels)] = sid
        return sid

    def commit_pending(self) -> None:
        self._remember([(sid, metric, labels) for (metric, labels), sid in self._pending.items()])
        self._pending.clear()

    def discard_pending(self) -> None:
        self._pending.clear()


def relabel_series(conn: Connection, label: str, old: str, new: str) -> tuple[int, int]:
    """Rename one label value in every stored series that carries it, in ``conn``'s
    transaction: (renamed, clashed). A GPU's UUID that changed format (amdsmi 7.13) keeps
    its history this way. A series whose renamed labels already exist (written since the
    change) keeps both; it is counted as clashed and left as it is."""
    t = series_table
    needle = json.dumps([label, old], separators=(",", ":"))
    rows = conn.execute(
        select(t.c.id, t.c.metric, t.c.labels).where(t.c.labels.contains(needle))
    ).all()
    renamed = clashed = 0
    for sid, metric, text in rows:
        labels = decode_labels(text)
        if (label, old) not in labels:
            continue
        moved = tuple(sorted((k, new if (k, v) == (label, old) else v) for k, v in labels))
        encoded = encode_labels(moved)
        taken = conn.execute(
            select(t.c.id).where(t.c.metric == metric, t.c.labels == encoded)
        ).first()
        if taken is not None:
            clashed += 1
            continue
        conn.execute(update(t).where(t.c.id == sid).values(labels=encoded))
        renamed += 1
    return renamed, clashed
