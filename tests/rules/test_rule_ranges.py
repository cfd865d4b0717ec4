"""The incremental range mirror gives exactly what the store's own window functions give."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetd.model import Reading, make_labels
from fleetd.query import Matcher, WindowFn
from fleetd.rules.ranges import RangeMirror
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
FNS: tuple[WindowFn, ...] = (
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
WINDOWS = (5.0, 12.0, 30.0, 61.0)
MATCHERS = (Matcher("gpu", "!=", "9"),)

# one tick: for each of 4 series, None (no sample) or (delay within the poll, value step kind)
_sample = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([0.0, 0.25, 1.0]), st.sampled_from(["up", "same", "reset", "jump"])),
)
_ticks = st.lists(st.lists(_sample, min_size=4, max_size=4), min_size=1, max_size=60)


def _next_value(previous: float, kind: str, draw: int) -> float:
    if kind == "same":
        return previous
    if kind == "reset":
        return float(draw % 3)
    if kind == "jump":
        return previous + 1000.5
    return previous + 1 + (draw % 7) * 0.1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ticks, st.integers(0, 10_000))
def test_mirror_equals_the_store_tick_after_tick(
    ticks: list[list[tuple[float, str] | None]], seed: int
) -> None:
    window = MemoryWindow(retention=3600)
    mirror = RangeMirror(late_margin_s=3.0, audit_every=7)
    mirror.plan({("m", ()): 61.0, ("m", MATCHERS): 30.0})
    values = [0.0] * 4
    for i, tick in enumerate(ticks):
        now = T0 + 2.0 * (i + 1)
        readings = []
        for gpu, sample in enumerate(tick):
            if sample is None or (gpu == 3 and i < 5):  # series 3 appears later
                continue
            delay, kind = sample
            values[gpu] = _next_value(values[gpu], kind, seed + i * 4 + gpu)
            # stamped when its poll started, possibly before the previous evaluation
            readings.append(Reading("m", make_labels({"gpu": gpu}), values[gpu], now - delay - 1.0))
        window.append(readings)
        for fn in FNS:
            for width in WINDOWS:
                for matchers, horizon in (((), 61.0), (MATCHERS, 30.0)):
                    if width > horizon:
                        continue
                    want = {
                        k.labels: v
                        for k, v in window.window(fn, "m", matchers, window=width, now=now).items()
                    }
                    got = mirror.window(window, fn, "m", matchers, window=width, now=now)
                    assert got == want, (fn, width, i)
    assert mirror.rebuilds == 0


def test_long_histories_are_trimmed_and_stay_exact(window: MemoryWindow) -> None:
    mirror = RangeMirror(late_margin_s=5.0, audit_every=50)
    mirror.plan({("c", ()): 300.0})
    value = 0.0
    for i in range(2000):
        now = T0 + 5.0 * i
        value = 0.0 if i % 333 == 0 else value + (i % 5)
        window.append([Reading("c", make_labels({"gpu": 0}), value, now)])
        if i % 97 == 0 or i > 1990:
            for fn in FNS:
                want = {
                    k.labels: v for k, v in window.window(fn, "c", window=300.0, now=now).items()
                }
                assert mirror.window(window, fn, "c", (), window=300.0, now=now) == want
    assert mirror.rebuilds == 0


def test_an_out_of_order_bulk_load_is_caught_by_the_audit(window: MemoryWindow) -> None:
    mirror = RangeMirror(late_margin_s=5.0, audit_every=3)
    mirror.plan({("c", ()): 100.0})
    for i in range(10):
        now = T0 + 5.0 * i
        window.append([Reading("c", make_labels({"gpu": 0}), float(i), now)])
        mirror.window(window, "count", "c", (), window=100.0, now=now)
    # samples arrive long after their time (e.g. a late warm-up): the mirror cannot see them
    window.append(
        [
            Reading("c", make_labels({"gpu": 0}), 0.5, T0 + 2.5),
            Reading("c", make_labels({"gpu": 0}), 1.5, T0 + 7.5),
        ]
    )
    results = []
    for i in range(10, 14):
        now = T0 + 5.0 * i
        window.append([Reading("c", make_labels({"gpu": 0}), float(i), now)])
        results.append(mirror.window(window, "count", "c", (), window=100.0, now=now))
    assert mirror.rebuilds == 1
    assert results[-1] == {
        k.labels: v for k, v in window.window("count", "c", window=100.0, now=T0 + 65.0).items()
    }


def test_a_new_query_object_or_time_going_back_starts_over(window: MemoryWindow) -> None:
    mirror = RangeMirror()
    mirror.plan({("c", ()): 60.0})
    window.append([Reading("c", make_labels({"gpu": 0}), 5.0, T0)])
    assert mirror.window(window, "last", "c", (), window=60.0, now=T0 + 1) == {
        make_labels({"gpu": 0}): 5.0
    }
    other = MemoryWindow(retention=60)
    other.append([Reading("c", make_labels({"gpu": 1}), 7.0, T0)])
    assert mirror.window(other, "last", "c", (), window=60.0, now=T0 + 2) == {
        make_labels({"gpu": 1}): 7.0
    }
    assert mirror.window(other, "last", "c", (), window=60.0, now=T0 - 100) == {}


@pytest.mark.parametrize("fn", FNS)
def test_windows_longer_than_planned_go_to_the_store(window: MemoryWindow, fn: WindowFn) -> None:
    mirror = RangeMirror()
    mirror.plan({("c", ()): 10.0})
    for i in range(30):
        window.append([Reading("c", make_labels({"gpu": 0}), float(i % 4), T0 + i)])
    want = {k.labels: v for k, v in window.window(fn, "c", window=25.0, now=T0 + 29).items()}
    assert mirror.window(window, fn, "c", (), window=25.0, now=T0 + 29) == want


def test_each_tick_reads_only_the_samples_newer_than_the_stalest_series(
    window: MemoryWindow,
) -> None:
    """At 1 s polls with a 7 s late margin, a tick reads each series' one new sample, not
    the margin's seven again; a series that fell behind still gets its late samples."""
    read: list[int] = []
    real_range = window.range

    def counting_range(*args: object, **kwargs: object) -> dict[object, list[object]]:
        found = real_range(*args, **kwargs)  # type: ignore[arg-type]
        read.append(sum(len(samples) for samples in found.values()))
        return found  # type: ignore[return-value]

    window.range = counting_range  # type: ignore[method-assign]
    mirror = RangeMirror(late_margin_s=7.0, audit_every=1000)
    mirror.plan({("c", ()): 60.0})
    for i in range(20):
        window.append([Reading("c", make_labels({"gpu": g}), float(i), T0 + i) for g in range(8)])
        mirror.window(window, "count", "c", (), window=60.0, now=T0 + i)
    assert read[-10:] == [8] * 10
    # GPU 7's samples for two ticks arrive late, after those ticks were evaluated
    for i in (20, 21):
        window.append([Reading("c", make_labels({"gpu": g}), float(i), T0 + i) for g in range(7)])
        mirror.window(window, "count", "c", (), window=60.0, now=T0 + i)
    window.append([Reading("c", make_labels({"gpu": 7}), float(i), T0 + i) for i in (20, 21)])
    window.append([Reading("c", make_labels({"gpu": g}), 22.0, T0 + 22) for g in range(8)])
    got = mirror.window(window, "count", "c", (), window=60.0, now=T0 + 22)
    assert got == {
        k.labels: v for k, v in window.window("count", "c", window=60.0, now=T0 + 22).items()
    }
    assert got[make_labels({"gpu": 7})] == 23.0
