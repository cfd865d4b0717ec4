"""MemoryWindow against hand-computed answers."""

from __future__ import annotations

import pytest

from fleetd.model import Reading, Sample, SeriesKey, make_labels
from fleetd.query import Matcher
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
POWER = "fleetd_gpu_power_watts"
ECC = "fleetd_gpu_ecc_errors_total"


def gpu(i: int, **extra: object) -> tuple[tuple[str, str], ...]:
    return make_labels({"gpu": i, "uuid": f"u{i}", **extra})


def feed(mem: MemoryWindow, metric: str, labels: tuple[tuple[str, str], ...], points) -> None:
    for offset, value in points:
        mem.append([Reading(metric, labels, value, T0 + offset)])


@pytest.fixture
def mem() -> MemoryWindow:
    m = MemoryWindow(retention=3600)
    # gpu 0 power: 100, 110, 120, 130, 140 at t = 0..40 step 10
    feed(m, POWER, gpu(0), [(0, 100.0), (10, 110.0), (20, 120.0), (30, 130.0), (40, 140.0)])
    # gpu 1 power: constant 50 with a missing reading at t=20
    feed(m, POWER, gpu(1), [(0, 50.0), (10, 50.0), (20, None), (30, 50.0), (40, 50.0)])
    # gpu 0 correctable ECC: 10, 15, reset to 3, 8, 8
    feed(
        m,
        ECC,
        gpu(0, type="correctable"),
        [(0, 10.0), (10, 15.0), (20, 3.0), (30, 8.0), (40, 8.0)],
    )
    return m


def key(metric: str, labels) -> SeriesKey:
    return SeriesKey(metric, labels)


def test_missing_reading_is_not_stored(mem: MemoryWindow) -> None:
    got = mem.range(POWER, [Matcher("gpu", "=", "1")], start=T0, end=T0 + 40)
    assert [s.ts - T0 for s in got[key(POWER, gpu(1))]] == [0, 10, 30, 40]
    assert mem.sample_count() == 14


def test_latest_at_or_before_now_and_max_age(mem: MemoryWindow) -> None:
    got = mem.latest(POWER, now=T0 + 25)
    assert got == {
        key(POWER, gpu(0)): Sample(T0 + 20, 120.0),
        key(POWER, gpu(1)): Sample(T0 + 10, 50.0),
    }
    # gpu 1's reading at 20 was missing: with max_age 10 only gpu 0 is fresh enough
    assert list(mem.latest(POWER, now=T0 + 25, max_age=10)) == [key(POWER, gpu(0))]
    # age exactly equal to max_age still counts
    assert list(mem.latest(POWER, now=T0 + 30, max_age=10)) == [
        key(POWER, gpu(0)),
        key(POWER, gpu(1)),
    ]
    assert mem.latest(POWER, now=T0 - 1) == {}


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        # window (T0+5, T0+40] on gpu 0: 110, 120, 130, 140
        ("avg", 125.0),
        ("min", 110.0),
        ("max", 140.0),
        ("last", 140.0),
        ("count", 4.0),
        ("changes", 3.0),
        ("delta", 30.0),
        ("increase", 30.0),
        ("rate", 1.0),  # 30 over the 30 s the samples span
    ],
)
def test_window_functions(mem: MemoryWindow, fn, expected: float) -> None:
    got = mem.window(fn, POWER, [Matcher("gpu", "=", "0")], window=35, now=T0 + 40)
    assert got == {key(POWER, gpu(0)): pytest.approx(expected)}


def test_window_is_open_at_the_start_and_closed_at_the_end(mem: MemoryWindow) -> None:
    # (T0+10, T0+30] holds 120 and 130 only
    got = mem.window("count", POWER, [Matcher("gpu", "=", "0")], window=20, now=T0 + 30)
    assert got == {key(POWER, gpu(0)): 2.0}
    got = mem.window("avg", POWER, [Matcher("gpu", "=", "0")], window=20, now=T0 + 30)
    assert got == {key(POWER, gpu(0)): 125.0}


def test_increase_and_rate_across_a_counter_reset(mem: MemoryWindow) -> None:
    ecc = key(ECC, gpu(0, type="correctable"))
    # 10 → 15 (+5), reset → 3 (+3), 3 → 8 (+5), 8 → 8 (+0): 13 over 40 s
    assert mem.window("increase", ECC, window=60, now=T0 + 40) == {ecc: 13.0}
    assert mem.window("rate", ECC, window=60, now=T0 + 40) == {ecc: pytest.approx(13 / 40)}
    # window (T0+10, T0+40]: 3, 8, 8 → 5 (the reset itself is outside the pairs)
    assert mem.window("increase", ECC, window=30, now=T0 + 40) == {ecc: 5.0}
    # window (T0+5, T0+20]: 15 → 3 is a reset, which counts the 3
    assert mem.window("increase", ECC, window=15, now=T0 + 20) == {ecc: 3.0}
    assert mem.window("delta", ECC, window=15, now=T0 + 20) == {ecc: -12.0}


def test_increase_needs_two_samples(mem: MemoryWindow) -> None:
    ecc = key(ECC, gpu(0, type="correctable"))
    assert mem.window("increase", ECC, window=5, now=T0 + 40) == {}
    assert mem.window("rate", ECC, window=5, now=T0 + 40) == {}
    assert mem.window("last", ECC, window=5, now=T0 + 40) == {ecc: 8.0}


def test_label_matchers(mem: MemoryWindow) -> None:
    assert mem.series(POWER, [Matcher("gpu", "!=", "0")]) == [key(POWER, gpu(1))]
    assert sorted(map(str, mem.series(POWER, [Matcher("uuid", "=~", "u.*")]))) == sorted(
        [str(key(POWER, gpu(0))), str(key(POWER, gpu(1)))]
    )
    assert mem.series(POWER, [Matcher("uuid", "!~", "u[01]")]) == []
    # an absent label matches the empty string, as in PromQL
    assert len(mem.series(POWER, [Matcher("type", "=", "")])) == 2
    assert mem.series("fleetd_no_such_metric") == []


def test_selection_sees_series_added_after_a_cached_lookup(mem: MemoryWindow) -> None:
    matchers = [Matcher("gpu", "=~", "[0-9]")]
    assert len(mem.series(POWER, matchers)) == 2
    feed(mem, POWER, gpu(2), [(40, 75.0)])
    assert len(mem.series(POWER, matchers)) == 3


def test_range_without_step_is_inclusive(mem: MemoryWindow) -> None:
    got = mem.range(POWER, [Matcher("gpu", "=", "0")], start=T0 + 10, end=T0 + 30)
    assert got == {
        key(POWER, gpu(0)): [Sample(T0 + 10, 110.0), Sample(T0 + 20, 120.0), Sample(T0 + 30, 130.0)]
    }


def test_range_with_step_reduces_each_bucket(mem: MemoryWindow) -> None:
    sel = [Matcher("gpu", "=", "0")]
    # T0 is a multiple of 20 s; buckets (T0-20, T0], (T0, T0+20], (T0+20, T0+40]
    last = mem.range(POWER, sel, start=T0, end=T0 + 40, step=20)
    assert last[key(POWER, gpu(0))] == [
        Sample(T0, 100.0),
        Sample(T0 + 20, 120.0),
        Sample(T0 + 40, 140.0),
    ]
    avg = mem.range(POWER, sel, start=T0 + 1, end=T0 + 40, step=20, agg="avg")
    assert avg[key(POWER, gpu(0))] == [Sample(T0 + 20, 115.0), Sample(T0 + 40, 135.0)]
    mx = mem.range(ECC, start=T0, end=T0 + 40, step=40, agg="max")
    assert list(mx.values()) == [[Sample(T0, 10.0), Sample(T0 + 40, 15.0)]]


def test_out_of_order_and_repeated_timestamps(mem: MemoryWindow) -> None:
    feed(mem, POWER, gpu(0), [(25, 125.0), (40, 141.0)])
    got = mem.range(POWER, [Matcher("gpu", "=", "0")], start=T0 + 20, end=T0 + 40)
    assert [s.value for s in got[key(POWER, gpu(0))]] == [120.0, 125.0, 130.0, 141.0]


def test_timestamps_are_kept_to_the_millisecond() -> None:
    m = MemoryWindow(retention=60)
    m.append([Reading(POWER, gpu(0), 1.0, T0 + 0.0004), Reading(POWER, gpu(1), 2.0, T0 + 1.2346)])
    got = m.latest(POWER, now=T0 + 2)
    assert sorted(s.ts for s in got.values()) == [T0, T0 + 1.235]


def test_prune_forgets_old_samples_and_empty_series() -> None:
    m = MemoryWindow(retention=30)
    feed(m, POWER, gpu(0), [(0, 1.0), (10, 2.0), (20, 3.0), (30, 4.0)])
    feed(m, POWER, gpu(1), [(0, 9.0)])
    assert m.complete_after == T0 - 0.001
    m.prune(T0 + 40)  # horizon T0+10: drops t <= 10
    assert m.series(POWER) == [key(POWER, gpu(0))]
    assert m.range(POWER, start=T0, end=T0 + 40)[key(POWER, gpu(0))] == [
        Sample(T0 + 20, 3.0),
        Sample(T0 + 30, 4.0),
    ]
    assert m.sample_count() == 2
    assert m.complete_after == T0 + 10
    assert m.covers(T0 + 10) and not m.covers(T0 + 9)


def test_load_warms_the_window_and_sets_coverage() -> None:
    m = MemoryWindow(retention=3600)
    k = key(POWER, gpu(0))
    m.load(
        {k: [Sample(T0 - 20, 5.0), Sample(T0 - 10, 6.0), Sample(T0, 7.0)]}, complete_after=T0 - 15
    )
    m.append([Reading(POWER, gpu(0), 8.0, T0 + 10)])
    assert m.complete_after == T0 - 15
    assert [s.value for s in m.range(POWER, start=T0 - 100, end=T0 + 100)[k]] == [6.0, 7.0, 8.0]
    assert m.window("increase", POWER, window=15, now=T0 + 10) == {k: 1.0}


def test_summaries_match_the_window(mem: MemoryWindow) -> None:
    ecc = key(ECC, gpu(0, type="correctable"))
    summary = mem.summaries(ECC, start=T0 - 1, end=T0 + 40)[ecc]
    assert (summary.count, summary.inc, summary.changes, summary.min, summary.max) == (
        5,
        13.0,
        3,
        3.0,
        15.0,
    )


def test_rejects_non_positive_retention() -> None:
    with pytest.raises(ValueError):
        MemoryWindow(retention=0)
