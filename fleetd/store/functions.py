"""Window maths shared by the in-memory window and the database, so both answer identically.

Pure: everything takes time-sorted timestamps and values and returns numbers. Counter
semantics follow Prometheus: a decrease is a counter reset (GPU reset, driver reload) and the
post-reset value counts from zero; ``rate`` is per second over the time the samples actually
span (no extrapolation, so a window that opens mid-series is never over-counted).

Three layers:

* array functions (``evaluate(fn, ts, values)``) over the raw samples of a window — what the
  memory window and the database's raw tier use;
* ``Summary``: everything a window function needs from a stretch of samples (count, sum, min,
  max, first/last and their times, reset-aware increase, changes). Rollup rows *are*
  summaries, and two adjacent summaries combine exactly, so ``increase`` over 30 days of
  1-minute rollups is still correct across counter resets;
* time helpers: timestamps are kept at millisecond resolution everywhere (``to_ms``), and
  step buckets are ``(end - step, end]`` on a grid aligned to multiples of the step.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, islice
from typing import TypeVar

from fleetd.model import Sample
from fleetd.query import RangeAgg

"""How a step bucket of a range query is reduced to one sample."""

AGG_FIELDS: dict[str, tuple[str, ...]] = {
    "last": ("last",),
    "first": ("first",),
    "avg": ("sum", "count"),
    "min": ("min",),
    "max": ("max",),
    "count": ("count",),
}
"""The ``Buckets`` columns each range aggregation reads."""

WINDOW_FUNCTION_NAMES = (
    "avg",
    "min",
    "max",
    "last",
    "count",
    "changes",
    "increase",
    "rate",
    "delta",
)


# ------------------------------------------------------------------------------------ time
def to_ms(ts: float) -> int:
    """Seconds → integer milliseconds, the resolution every stored timestamp has."""
    return round(ts * 1000.0)


def from_ms(ms: int) -> float:
    return ms / 1000.0


def at_ms(ts: float) -> float:
    """``ts`` rounded to the millisecond, exactly as the database gives it back. Queries use
    it too, so a sample stored at ``t`` is never "after" a query at the same ``t``."""
    return round(ts * 1000.0) / 1000.0


def window_slice(ts: Sequence[float], start: float, end: float) -> tuple[int, int]:
    """Indices ``lo, hi`` of the samples with ``start < t <= end`` (a window's half-open span)."""
    return bisect_right(ts, start), bisect_right(ts, end)


def bucket_end_ms(ts_ms: int, step_ms: int) -> int:
    """End of the step bucket ``(end - step, end]`` holding ``ts_ms``."""
    return -(-ts_ms // step_ms) * step_ms


# ----------------------------------------------------------------------- array functions
def increase_of(values: Sequence[float]) -> float | None:
    """Total growth of a counter across ``values``, reset-aware; None with fewer than two.

    Each pair adds ``v - prev``, or ``v`` after a reset (``v < prev``); summed, that is
    ``last - first`` plus every value just before a reset — computed at C speed.
    """
    if len(values) < 2:
        return None
    before_reset = compress(values, map(operator.gt, values, islice(values, 1, None)))
    return values[-1] - values[0] + sum(before_reset)


def changes_of(values: Sequence[float]) -> int:
    """How many times consecutive values differ."""
    return sum(map(operator.ne, values, islice(values, 1, None)))


def evaluate(fn: str, ts: Sequence[float], values: Sequence[float]) -> float | None:
    """Window function ``fn`` over time-sorted ``values``; None when it is undefined.

    Only ``ts[0]`` and ``ts[-1]`` are read (``rate`` needs the span), so callers holding
    columns may pass just ``(first_ts, last_ts)``.
    """
    n = len(values)
    if n == 0:
        return None
    if fn == "avg":
        return sum(values) / n
    if fn == "max":
        return max(values)
    if fn == "min":
        return min(values)
    if fn == "last":
        return values[-1]
    if fn == "count":
        return float(n)
    if fn == "increase":
        return increase_of(values)
    if fn == "rate":
        grown = increase_of(values)
        if grown is None:
            return None
        span = ts[-1] - ts[0]
        return grown / span if span > 0 else None
    if fn == "delta":
        return values[-1] - values[0] if n >= 2 else None
    if fn == "changes":
        return float(changes_of(values))
    raise ValueError(f"unknown window function {fn!r}; known: {', '.join(WINDOW_FUNCTION_NAMES)}")


# --------------------------------------------------------------------------- summaries
@dataclass(frozen=True, slots=True)
class Summary:
    """What every window function needs from a run of samples; rollup rows are summaries."""

    count: int
    sum: float
    min: float
    max: float
    first: float
    last: float
    first_ts: float
    last_ts: float
    inc: float  # reset-aware increase between the first and the last sample
    changes: int

    def then(self, later: Summary) -> Summary:
        """This summary followed by ``later`` (which starts after this one ends)."""
        step = later.first - self.last if later.first >= self.last else later.first
        return Summary(
            count=self.count + later.count,
            sum=self.sum + later.sum,
            min=self.min if self.min <= later.min else later.min,
            max=self.max if self.max >= later.max else later.max,
            first=self.first,
            last=later.last,
            first_ts=self.first_ts,
            last_ts=later.last_ts,
            inc=self.inc + step + later.inc,
            changes=self.changes + later.changes + (later.first != self.last),
        )

    def value(self, fn: str) -> float | None:
        """Window function ``fn`` of the summarised samples."""
        if fn == "avg":
            return self.sum / self.count
        if fn == "max":
            return self.max
        if fn == "min":
            return self.min
        if fn == "last":
            return self.last
        if fn == "first":
            return self.first
        if fn == "count":
            return float(self.count)
        if fn == "changes":
            return float(self.changes)
        if self.count < 2:
            return None
        if fn == "increase":
            return self.inc
        if fn == "rate":
            span = self.last_ts - self.first_ts
            return self.inc / span if span > 0 else None
        if fn == "delta":
            return self.last - self.first
        raise ValueError(f"unknown window function {fn!r}")


class Buckets:
    """Bucket summaries as parallel columns (ends ascending), the shape rollup chunks decode
    to; merging runs of buckets works on column slices at C speed."""

    __slots__ = (
        "changes",
        "count",
        "ends",
        "first",
        "first_ts",
        "inc",
        "last",
        "last_ts",
        "max",
        "min",
        "sum",
    )

    FIELDS = (
        "count",
        "sum",
        "min",
        "max",
        "first",
        "last",
        "first_ts",
        "last_ts",
        "inc",
        "changes",
    )

    def __init__(self) -> None:
        self.ends: list[int] = []
        self.count: list[int] = []
        self.sum: list[float] = []
        self.min: list[float] = []
        self.max: list[float] = []
        self.first: list[float] = []
        self.last: list[float] = []
        self.first_ts: list[float] = []
        self.last_ts: list[float] = []
        self.inc: list[float] = []
        self.changes: list[int] = []

    def __len__(self) -> int:
        return len(self.ends)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[int, Summary]]) -> Buckets:
        out = cls()
        for end_ms, s in pairs:
            out.append(end_ms, s)
        return out

    def append(self, end_ms: int, s: Summary) -> None:
        self.ends.append(end_ms)
        self.count.append(s.count)
        self.sum.append(s.sum)
        self.min.append(s.min)
        self.max.append(s.max)
        self.first.append(s.first)
        self.last.append(s.last)
        self.first_ts.append(s.first_ts)
        self.last_ts.append(s.last_ts)
        self.inc.append(s.inc)
        self.changes.append(s.changes)

    def extend(self, other: Buckets) -> None:
        for name in ("ends", *self.FIELDS):
            getattr(self, name).extend(getattr(other, name))

    def slice(self, lo: int, hi: int) -> Buckets:
        out = Buckets()
        for name in ("ends", *self.FIELDS):
            setattr(out, name, getattr(self, name)[lo:hi])
        return out

    def between(self, lo_end_ms: int, hi_end_ms: int) -> Buckets:
        """The buckets whose end lies in ``[lo_end_ms, hi_end_ms]``."""
        lo = bisect_left(self.ends, lo_end_ms)
        hi = bisect_right(self.ends, hi_end_ms)
        return self if (lo, hi) == (0, len(self.ends)) else self.slice(lo, hi)

    def summary(self, lo: int = 0, hi: int | None = None) -> Summary:
        """Buckets ``[lo, hi)`` merged into one summary (there must be at least one)."""
        if hi is None:
            hi = len(self.ends)
        lasts = self.last[lo : hi - 1]
        firsts = self.first[lo + 1 : hi]
        resets = sum(compress(lasts, map(operator.gt, lasts, firsts)))
        return Summary(
            count=sum(self.count[lo:hi]),
            sum=sum(self.sum[lo:hi]),
            min=min(self.min[lo:hi]),
            max=max(self.max[lo:hi]),
            first=self.first[lo],
            last=self.last[hi - 1],
            first_ts=self.first_ts[lo],
            last_ts=self.last_ts[hi - 1],
            inc=sum(self.inc[lo:hi]) + (sum(firsts) - sum(lasts) + resets),
            changes=sum(self.changes[lo:hi]) + sum(map(operator.ne, lasts, firsts)),
        )

    def aggregate(self, step_ms: int, agg: RangeAgg) -> list[tuple[int, float]]:
        """``agg`` per step bucket ``(end - step, end]`` — reading only the columns ``agg``
        needs (``AGG_FIELDS``), so a range query decodes and touches little."""
        ends = self.ends
        targets = [-(-e // step_ms) * step_ms for e in ends]
        if targets == ends:  # buckets already at the step: the column is the answer
            if agg == "avg":
                return list(zip(ends, map(operator.truediv, self.sum, self.count), strict=True))
            if agg == "count":
                return list(zip(ends, map(float, self.count), strict=True))
            return list(zip(ends, getattr(self, agg), strict=True))
        out: list[tuple[int, float]] = []
        n = len(ends)
        i = 0
        while i < n:
            target = targets[i]
            j = bisect_right(targets, target, i)
            if agg == "last":
                value = self.last[j - 1]
            elif agg == "first":
                value = self.first[i]
            elif agg == "avg":
                value = sum(self.sum[i:j]) / sum(self.count[i:j])
            elif agg == "min":
                value = min(self.min[i:j])
            elif agg == "max":
                value = max(self.max[i:j])
            else:
                value = float(sum(self.count[i:j]))
            out.append((target, value))
            i = j
        return out

    def pairs(self) -> list[tuple[int, Summary]]:
        return [(self.ends[i], self.summary(i, i + 1)) for i in range(len(self.ends))]

    def regroup(self, step_ms: int) -> list[tuple[int, Summary]]:
        """Merged into coarser step buckets ``(end - step, end]`` (step a multiple of theirs)."""
        out: list[tuple[int, Summary]] = []
        ends = self.ends
        n = len(ends)
        i = 0
        while i < n:
            target = bucket_end_ms(ends[i], step_ms)
            j = bisect_right(ends, target, i)
            out.append((target, self.summary(i, j)))
            i = j
        return out


def add_buckets(out: dict[int, Buckets], sid: int, buckets: Buckets) -> None:
    """Append ``buckets`` to series ``sid``'s in ``out`` (the first ones become its own)."""
    have = out.get(sid)
    if have is None:
        out[sid] = buckets
    else:
        have.extend(buckets)


def summarize(ts: Sequence[float], values: Sequence[float]) -> Summary | None:
    """The summary of parallel, time-sorted samples; None when there are none."""
    n = len(values)
    if n == 0:
        return None
    inc = increase_of(values)
    return Summary(
        count=n,
        sum=sum(values),
        min=min(values),
        max=max(values),
        first=values[0],
        last=values[-1],
        first_ts=ts[0],
        last_ts=ts[-1],
        inc=0.0 if inc is None else inc,
        changes=changes_of(values),
    )


def combine(parts: Sequence[Summary | None]) -> Summary | None:
    """Adjacent summaries in time order folded into one."""
    out: Summary | None = None
    for part in parts:
        if part is None:
            continue
        out = part if out is None else out.then(part)
    return out


K = TypeVar("K")  # a series key, or a series id


def combine_by_key(
    older: Mapping[K, Summary], newer: Mapping[K, Summary]
) -> dict[K, Summary | None]:
    """Each key's summaries of two adjacent spans folded into one (keys of either)."""
    return {
        key: combine([older.get(key), newer.get(key)]) for key in dict.fromkeys([*older, *newer])
    }


def summary_values(fn: str, summaries: Mapping[K, Summary | None]) -> dict[K, float]:
    """``fn`` of each key's summary; a key without one, or whose summary has no such value
    (``rate`` of a single sample), is left out."""
    out: dict[K, float] = {}
    for key, summary in summaries.items():
        value = None if summary is None else summary.value(fn)
        if value is not None:
            out[key] = value
    return out


def bucket_summaries(
    ts: Sequence[float], values: Sequence[float], step_ms: int
) -> list[tuple[int, Summary]]:
    """Raw samples grouped into step buckets ``(end - step, end]``: ``(end_ms, summary)`` pairs."""
    out: list[tuple[int, Summary]] = []
    n = len(ts)
    i = 0
    while i < n:
        end_ms = bucket_end_ms(to_ms(ts[i]), step_ms)
        j = bisect_right(ts, end_ms / 1000.0, i)
        # guard against float rounding at the edge: every sample in [i, j) must map to end_ms
        while j > i + 1 and bucket_end_ms(to_ms(ts[j - 1]), step_ms) != end_ms:
            j -= 1
        while j < n and bucket_end_ms(to_ms(ts[j]), step_ms) == end_ms:
            j += 1
        summary = summarize(ts[i:j], values[i:j])
        assert summary is not None
        out.append((end_ms, summary))
        i = j
    return out


def regroup(buckets: Sequence[tuple[int, Summary]], step_ms: int) -> list[tuple[int, Summary]]:
    """Finer ``(end_ms, summary)`` buckets merged into coarser step buckets (step a multiple)."""
    out: list[tuple[int, Summary]] = []
    for end_ms, summary in buckets:
        target = bucket_end_ms(end_ms, step_ms)
        if out and out[-1][0] == target:
            out[-1] = (target, out[-1][1].then(summary))
        else:
            out.append((target, summary))
    return out


def step_samples(
    buckets: Sequence[tuple[int, Summary]], start: float, end: float, agg: RangeAgg
) -> list[Sample]:
    """Step buckets whose end lies in ``[start, end]`` as samples stamped with the bucket end."""
    lo_ms = to_ms(start)
    hi_ms = to_ms(end)
    out: list[Sample] = []
    for end_ms, summary in buckets:
        if lo_ms <= end_ms <= hi_ms:
            value = summary.value(agg)
            if value is not None:
                out.append(Sample(end_ms / 1000.0, value))
    return out


def downsample(
    ts: Sequence[float],
    values: Sequence[float],
    *,
    start: float,
    end: float,
    step: float,
    agg: RangeAgg = "last",
) -> list[Sample]:
    """Raw samples reduced to one sample per step bucket ending in ``[start, end]``."""
    step_ms = step_to_ms(step)
    lo = bisect_right(ts, (bucket_end_ms(to_ms(start), step_ms) - step_ms) / 1000.0)
    hi = bisect_right(ts, end)
    return step_samples(bucket_summaries(ts[lo:hi], values[lo:hi], step_ms), start, end, agg)


def step_to_ms(step: float) -> int:
    step_ms = round(step * 1000.0)
    if step_ms <= 0:
        raise ValueError(f"step must be at least 1 ms, got {step!r}")
    return step_ms


# ----------------------------------------------------------------- sample-list functions
def _columns(samples: Sequence[Sample]) -> tuple[list[float], list[float]]:
    return [s.ts for s in samples], [s.value for s in samples]


def _sample_fn(name: str) -> Callable[[Sequence[Sample]], float | None]:
    def fn(samples: Sequence[Sample]) -> float | None:
        ts, values = _columns(samples)
        return evaluate(name, ts, values)

    fn.__name__ = name
    fn.__doc__ = f"``{name}`` over time-sorted samples (see ``evaluate``)."
    return fn


increase = _sample_fn("increase")
rate = _sample_fn("rate")
delta = _sample_fn("delta")
changes = _sample_fn("changes")
avg = _sample_fn("avg")
minimum = _sample_fn("min")
maximum = _sample_fn("max")
last = _sample_fn("last")
count = _sample_fn("count")

WINDOW_FUNCTIONS: dict[str, Callable[[Sequence[Sample]], float | None]] = {
    "avg": avg,
    "min": minimum,
    "max": maximum,
    "last": last,
    "count": count,
    "changes": changes,
    "increase": increase,
    "rate": rate,
    "delta": delta,
}
