"""Window functions over a series' samples, shared by the in-memory window and the database.

Pure: they take samples sorted by time and return a number or None. Counter semantics follow
Prometheus: a decrease is a counter reset (GPU reset, driver reload) and the post-reset value
counts from zero; ``rate`` is per second over the time the samples actually span (no
extrapolation, so a window that opens mid-series is never over-counted).
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetd.model import Sample


def increase(samples: Sequence[Sample]) -> float | None:
    """Total growth of a counter across the samples, reset-aware; None with fewer than two."""
    if len(samples) < 2:
        return None
    total = 0.0
    previous = samples[0].value
    for sample in samples[1:]:
        value = sample.value
        total += value - previous if value >= previous else value
        previous = value
    return total


def rate(samples: Sequence[Sample]) -> float | None:
    """Per-second growth of a counter over the span the samples cover."""
    grown = increase(samples)
    if grown is None:
        return None
    span = samples[-1].ts - samples[0].ts
    return grown / span if span > 0 else None


def delta(samples: Sequence[Sample]) -> float | None:
    """Last minus first, for gauges."""
    if len(samples) < 2:
        return None
    return samples[-1].value - samples[0].value


def changes(samples: Sequence[Sample]) -> float | None:
    """How many times the value changed."""
    if not samples:
        return None
    count = 0
    previous = samples[0].value
    for sample in samples[1:]:
        if sample.value != previous:
            count += 1
        previous = sample.value
    return float(count)


def avg(samples: Sequence[Sample]) -> float | None:
    if not samples:
        return None
    return sum(s.value for s in samples) / len(samples)


def minimum(samples: Sequence[Sample]) -> float | None:
    return min((s.value for s in samples), default=None)


def maximum(samples: Sequence[Sample]) -> float | None:
    return max((s.value for s in samples), default=None)


def last(samples: Sequence[Sample]) -> float | None:
    return samples[-1].value if samples else None


def count(samples: Sequence[Sample]) -> float | None:
    return float(len(samples)) if samples else None


WINDOW_FUNCTIONS = {
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
