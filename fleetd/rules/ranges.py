"""Range functions without rescanning every window on every tick.

Rules look back up to an hour on every poll; recomputing ``rate(x[1h])`` from 720 samples per
series each tick made evaluation cost grow with window length. ``RangeMirror`` keeps, across
ticks, the samples of each (metric, matchers) group that range functions read — as far back as
the longest window any rule asks of it — and feeds them with only the samples that are new
since the last tick (a ``Query.range`` from the stalest series' newest sample on, at most the
late margin back: one sample a series at each poll). Per series it maintains:

* the reset positions (``v[i] < v[i-1]``): ``increase`` is ``last - first + Σ v[i-1]`` over the
  resets inside the window — the same sum, in the same order, as ``fleetd.store.functions``;
* a running count of value changes: ``changes`` is a difference of two counts;
* per-block minima and maxima: ``min``/``max`` scan two partial blocks and the block extremes.

Results are identical to ``Query.window`` on the same samples (a property test compares them).
Assumptions, with the checks that back them:

1. Samples of one series arrive in time order (one writer per series: the poller, the vLLM
   scraper). Samples stamped up to ``late_margin`` before the previous tick but appended after
   it are still picked up.
2. Every ``audit_every`` ticks each group's sample counts are compared with the store's own
   ``count``; a mismatch (a late bulk load, an out-of-order writer) rebuilds that group.
3. A different ``Query`` object, or time going backwards, starts over.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fleetd.logs import get_logger
from fleetd.model import Labels
from fleetd.query import Matcher, Query, WindowFn

BLOCK = 16
_log = get_logger("rules.ranges")


class _Series:
    """One series' recent samples with the derived columns; indices are absolute positions."""

    __slots__ = ("base", "blocks_max", "blocks_min", "changes", "has_nan", "resets", "ts", "values")

    def __init__(self) -> None:
        self.base = 0  # absolute index of ts[0]; stays a multiple of BLOCK
        self.ts = array("d")
        self.values = array("d")
        self.changes = array("q")  # changes[k]: value changes among samples 0..k (absolute base)
        self.resets: list[int] = []  # absolute indices i with values[i] < values[i - 1]
        self.blocks_min = array("d")
        self.blocks_max = array("d")
        self.has_nan = False

    @property
    def last_ts(self) -> float | None:
        return self.ts[-1] if self.ts else None

    def append(self, ts: float, value: float) -> None:
        values = self.values
        if values:
            previous = values[-1]
            self.changes.append(self.changes[-1] + (value != previous))
            if previous > value:
                self.resets.append(self.base + len(values))
        else:
            self.changes.append(0)
        if value != value:
            self.has_nan = True
        self.ts.append(ts)
        values.append(value)
        if len(values) % BLOCK == 0:
            block = values[len(values) - BLOCK :]
            self.blocks_min.append(min(block))
            self.blocks_max.append(max(block))

    def trim(self, oldest: float) -> None:
        """Forget whole blocks of samples at or before ``oldest``."""
        keep_from = bisect_right(self.ts, oldest)
        drop = (keep_from // BLOCK) * BLOCK
        if drop == 0 or drop < len(self.ts) // 2:
            return
        del self.ts[:drop]
        del self.values[:drop]
        del self.changes[:drop]
        del self.blocks_min[: drop // BLOCK]
        del self.blocks_max[: drop // BLOCK]
        self.base += drop
        cut = bisect_right(self.resets, self.base)
        del self.resets[:cut]

    def evaluate(self, fn: WindowFn, start: float, now: float) -> float | None:
        """``fn`` over the samples in ``(start, now]``, exactly as fleetd.store.functions does."""
        ts = self.ts
        hi = len(ts) if ts and ts[-1] <= now else bisect_right(ts, now)
        lo = bisect_right(ts, start, 0, hi)
        n = hi - lo
        if n <= 0:
            return None
        values = self.values
        if fn == "last":
            return values[hi - 1]
        if fn == "count":
            return float(n)
        if fn == "avg":
            return sum(values[lo:hi]) / n
        if fn in ("min", "max"):
            return self._extreme(fn, lo, hi)
        if fn == "changes":
            return float(self.changes[hi - 1] - self.changes[lo])
        if n < 2:
            return None
        if fn == "delta":
            return values[hi - 1] - values[lo]
        grown = values[hi - 1] - values[lo] + self._pre_reset_sum(lo, hi)
        if fn == "increase":
            return grown
        span = ts[hi - 1] - ts[lo]
        return grown / span if span > 0 else None

    def _pre_reset_sum(self, lo: int, hi: int) -> float:
        resets = self.resets
        if not resets:
            return 0
        base = self.base
        first = bisect_right(resets, base + lo)  # a reset at lo pairs with a sample outside
        last = bisect_right(resets, base + hi - 1)
        values = self.values
        return sum(values[i - base - 1] for i in resets[first:last])

    def _extreme(self, fn: str, lo: int, hi: int) -> float:
        pick = min if fn == "min" else max
        values = self.values
        if self.has_nan or hi - lo <= 3 * BLOCK:
            return pick(values[lo:hi])
        first_full = -(-lo // BLOCK)
        last_full = hi // BLOCK
        blocks = self.blocks_min if fn == "min" else self.blocks_max
        parts = [pick(blocks[first_full:last_full])]
        if lo < first_full * BLOCK:
            parts.append(pick(values[lo : first_full * BLOCK]))
        if last_full * BLOCK < hi:
            parts.append(pick(values[last_full * BLOCK : hi]))
        return pick(parts)


def _stalest_newest(series: Iterable[_Series]) -> float | None:
    """The oldest of the series' newest samples (None: no series, or one without samples)."""
    stalest = math.inf
    for one in series:
        if not one.ts:
            return None
        stalest = min(stalest, one.ts[-1])
    return None if stalest == math.inf else stalest


@dataclass
class _Group:
    metric: str
    matchers: tuple[Matcher, ...]
    horizon: float
    series: dict[Labels, _Series] = field(default_factory=dict)  # one metric: labels suffice
    synced_to: float | None = None
    ticks: int = 0


class RangeMirror:
    """The samples range functions read, kept incrementally across ticks (see module doc).

    Args:
        late_margin_s: how long before the previous tick a sample may be stamped and still
            arrive after it (a poll's duration, with room to spare).
        audit_every: ticks between checks of each group against the store.
    """

    def __init__(self, *, late_margin_s: float = 30.0, audit_every: int = 60) -> None:
        self.late_margin_s = late_margin_s
        self.audit_every = audit_every
        self._groups: dict[tuple[str, tuple[Matcher, ...]], _Group] = {}
        self._horizons: dict[tuple[str, tuple[Matcher, ...]], float] = {}
        self._query: Query | None = None
        self._tick: float | None = None
        self.rebuilds = 0

    def plan(self, needs: dict[tuple[str, tuple[Matcher, ...]], float]) -> None:
        """The longest window each (metric, matchers) group is read over (from the rule set)."""
        self._horizons = dict(needs)
        self._groups = {k: g for k, g in self._groups.items() if self._horizons.get(k) == g.horizon}

    def window(
        self,
        query: Query,
        fn: WindowFn,
        metric: str,
        matchers: Sequence[Matcher],
        *,
        window: float,
        now: float,
    ) -> dict[Labels, float]:
        """``Query.window`` semantics (keyed by labels), answered from the mirror."""
        key = (metric, tuple(matchers))
        horizon = self._horizons.get(key)
        if horizon is None or window > horizon:
            found = query.window(fn, metric, matchers, window=window, now=now)
            return {series_key.labels: value for series_key, value in found.items()}
        if query is not self._query or (self._tick is not None and now < self._tick):
            if self._query is not None:
                _log.info(
                    "range_mirror_restarted",
                    reason="new query" if query is not self._query else "time went back",
                )
            self._groups.clear()
            self._query = query
        self._tick = now
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(metric, tuple(matchers), horizon)
        if group.synced_to != now:
            self._sync(query, group, now)
        start = now - window
        out: dict[Labels, float] = {}
        for labels, series in group.series.items():
            value = series.evaluate(fn, start, now)
            if value is not None:
                out[labels] = value
        return out

    def _sync(self, query: Query, group: _Group, now: float) -> None:
        if group.synced_to is not None and now - group.synced_to > group.horizon:
            group.series.clear()
            group.synced_to = None
        if group.synced_to is None:
            since = now - group.horizon
        else:
            since = max(now - group.horizon, group.synced_to - self.late_margin_s)
            # a sample at or before a series' newest one is never appended (one writer, in
            # time order), so nothing older than the stalest series' newest sample is read:
            # one new sample a series at each poll, not the whole late margin again
            stalest = _stalest_newest(group.series.values())
            if stalest is not None:
                since = max(since, stalest)
        fresh = query.range(
            group.metric, group.matchers, start=math.nextafter(since, math.inf), end=now
        )
        known = group.series
        new_keys = [k for k in query.series(group.metric, group.matchers) if k.labels not in known]
        if new_keys and group.synced_to is not None:
            older = query.range(
                group.metric,
                group.matchers,
                start=math.nextafter(now - group.horizon, math.inf),
                end=now,
            )
            fresh = {**fresh, **{k: older[k] for k in new_keys if k in older}}
        for series_key, samples in fresh.items():
            series = known.get(series_key.labels)
            if series is None:
                series = known[series_key.labels] = _Series()
            last = series.last_ts
            for sample in samples:
                if last is None or sample.ts > last:
                    series.append(sample.ts, sample.value)
                    last = sample.ts
        oldest = now - group.horizon
        for series in group.series.values():
            series.trim(oldest)
        group.synced_to = now
        group.ticks += 1
        if group.ticks % self.audit_every == 0:
            self._audit(query, group, now)

    def _audit(self, query: Query, group: _Group, now: float) -> None:
        """Compare sample counts with the store; rebuild the group on any difference."""
        store = query.window("count", group.metric, group.matchers, window=group.horizon, now=now)
        start = now - group.horizon
        mirror: dict[Labels, float] = {}
        for labels, series in group.series.items():
            count = series.evaluate("count", start, now)
            if count is not None:
                mirror[labels] = count
        theirs = {key.labels: count for key, count in store.items()}
        if mirror == theirs:
            return
        differing = sorted(
            str(k) for k in set(theirs) | set(mirror) if theirs.get(k) != mirror.get(k)
        )
        _log.warning("range_mirror_rebuilt", metric=group.metric, series=differing[:5])
        self.rebuilds += 1
        group.series.clear()
        group.synced_to = None
        self._sync(query, group, now)
