"""The database Query against hand-computed answers, on SQLite and PostgreSQL, with the data
in head rows and after compaction into chunks; and parity with the memory window."""

from __future__ import annotations

import random

import pytest
from store_helpers import T0, gpu, readings, settle

from fleetd.model import Reading, Sample, SeriesKey
from fleetd.query import Matcher
from fleetd.store.config import StoreConfig
from fleetd.store.maintenance import Maintenance
from fleetd.store.memory import MemoryWindow
from fleetd.store.samples import SampleStore

POWER = "fleetd_gpu_power_watts"
ECC = "fleetd_gpu_ecc_errors_total"
G0 = [Matcher("gpu", "=", "0")]


def load(store: SampleStore, compacted: bool) -> None:
    """The dataset of test_memory: gpu 0 power ramps, gpu 1 constant with a gap, ECC reset."""
    polls = [
        readings(POWER, gpu(0), [(t, 100.0 + t)])
        + readings(POWER, gpu(1), [(t, None if t == 20 else 50.0)])
        + readings(ECC, gpu(0, type="correctable"), [(t, v)])
        for t, v in zip(range(0, 50, 10), (10.0, 15.0, 3.0, 8.0, 8.0), strict=True)
    ]
    for poll in polls:
        store.append(poll)
    if compacted:
        jobs = Maintenance(store, StoreConfig(chunk_span=60, compact_delay=0))
        settle(jobs, T0 + 600)
        assert store.db.size_bytes() is None or store.raw_columns([1], T0, T0 + 40)


def key(metric: str, labels) -> SeriesKey:
    return SeriesKey(metric, labels)


@pytest.fixture(params=[False, True], ids=["head", "chunks"])
def loaded(request: pytest.FixtureRequest, store: SampleStore) -> SampleStore:
    load(store, compacted=request.param)
    return store


def test_append_counts_stored_samples_and_skips_missing(store: SampleStore) -> None:
    written = store.append(
        readings(POWER, gpu(0), [(0, 1.0)]) + readings(POWER, gpu(1), [(0, None)])
    )
    assert written == 1
    assert store.series(POWER) == [key(POWER, gpu(0))]


def test_compaction_moves_head_rows_into_chunks(store: SampleStore) -> None:
    load(store, compacted=True)
    with store.db.read() as conn:
        head = conn.exec_driver_sql("SELECT count(*) FROM fleetd_samples_head").scalar()
        chunks = conn.exec_driver_sql("SELECT count(*) FROM fleetd_sample_chunks").scalar()
    assert head == 0
    assert chunks == 3  # one chunk per series: all samples lie in the first minute


def test_latest(loaded: SampleStore) -> None:
    assert loaded.latest(POWER, now=T0 + 25) == {
        key(POWER, gpu(0)): Sample(T0 + 20, 120.0),
        key(POWER, gpu(1)): Sample(T0 + 10, 50.0),
    }
    assert list(loaded.latest(POWER, now=T0 + 25, max_age=10)) == [key(POWER, gpu(0))]
    assert loaded.latest(POWER, now=T0 - 1) == {}


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        ("avg", 125.0),
        ("min", 110.0),
        ("max", 140.0),
        ("last", 140.0),
        ("count", 4.0),
        ("changes", 3.0),
        ("delta", 30.0),
        ("increase", 30.0),
        ("rate", 1.0),
    ],
)
def test_window_functions(loaded: SampleStore, fn, expected: float) -> None:
    got = loaded.window(fn, POWER, G0, window=35, now=T0 + 40)
    assert got == {key(POWER, gpu(0)): pytest.approx(expected)}


def test_window_boundaries(loaded: SampleStore) -> None:
    assert loaded.window("count", POWER, G0, window=20, now=T0 + 30) == {key(POWER, gpu(0)): 2.0}


def test_increase_and_rate_across_a_counter_reset(loaded: SampleStore) -> None:
    ecc = key(ECC, gpu(0, type="correctable"))
    assert loaded.window("increase", ECC, window=60, now=T0 + 40) == {ecc: 13.0}
    assert loaded.window("rate", ECC, window=60, now=T0 + 40) == {ecc: pytest.approx(13 / 40)}
    assert loaded.window("increase", ECC, window=15, now=T0 + 20) == {ecc: 3.0}
    assert loaded.window("increase", ECC, window=5, now=T0 + 40) == {}


def test_label_matchers(loaded: SampleStore) -> None:
    assert loaded.series(POWER, [Matcher("gpu", "!=", "0")]) == [key(POWER, gpu(1))]
    assert len(loaded.series(POWER, [Matcher("uuid", "=~", "u[01]")])) == 2
    assert loaded.series(POWER, [Matcher("uuid", "!~", "u.")]) == []
    assert loaded.series("fleetd_no_such_metric") == []


def test_a_selection_sees_series_added_after_it_was_asked(store: SampleStore) -> None:
    """The registry remembers its selections; a new series of the metric (this process's
    poll, or another process's after ``refresh``) shows in the next answer, and a caller
    changing an answer does not change the next."""
    store.append(readings(POWER, gpu(0), [(0, 1.0)]))
    not_gpu1 = [Matcher("gpu", "!=", "1")]
    assert store.series(POWER, not_gpu1) == [key(POWER, gpu(0))]
    store.append(readings(POWER, gpu(2), [(10, 1.0)]) + readings(POWER, gpu(1), [(10, 1.0)]))
    assert store.series(POWER, not_gpu1) == [key(POWER, gpu(0)), key(POWER, gpu(2))]
    store.registry.select(POWER, not_gpu1).clear()
    assert len(store.registry.select(POWER, not_gpu1)) == 2
    other = SampleStore(store.db)  # another process's view of the same file
    assert other.series(POWER, not_gpu1) == [key(POWER, gpu(0)), key(POWER, gpu(2))]
    store.append(readings(POWER, gpu(3), [(20, 1.0)]))
    assert len(other.series(POWER, not_gpu1)) == 2  # not looked again yet
    other.refresh()
    assert len(other.series(POWER, not_gpu1)) == 3


def test_range_without_step_is_inclusive(loaded: SampleStore) -> None:
    got = loaded.range(POWER, G0, start=T0 + 10, end=T0 + 30)
    assert got == {
        key(POWER, gpu(0)): [Sample(T0 + 10, 110.0), Sample(T0 + 20, 120.0), Sample(T0 + 30, 130.0)]
    }


def test_range_with_a_sub_minute_step(loaded: SampleStore) -> None:
    avg = loaded.range(POWER, G0, start=T0 + 1, end=T0 + 40, step=20, agg="avg")
    assert avg[key(POWER, gpu(0))] == [Sample(T0 + 20, 115.0), Sample(T0 + 40, 135.0)]


def test_range_with_a_minute_step_from_raw(loaded: SampleStore) -> None:
    # bucket (T0, T0+60] holds 110..140; (T0-60, T0] holds 100
    got = loaded.range(POWER, G0, start=T0, end=T0 + 60, step=60, agg="max")
    assert got[key(POWER, gpu(0))] == [Sample(T0, 100.0), Sample(T0 + 60, 140.0)]
    count = loaded.range(ECC, start=T0, end=T0 + 60, step=60, agg="count")
    assert list(count.values()) == [[Sample(T0, 1.0), Sample(T0 + 60, 4.0)]]


def test_memory_and_database_agree(store: SampleStore) -> None:
    """Random gauges and counters with resets: every function, window and range agrees."""
    rng = random.Random(5)
    mem = MemoryWindow(retention=10**6)
    counter = 0.0
    for i in range(400):
        counter = 0.0 if rng.random() < 0.02 else counter + rng.randint(0, 5)
        poll = [
            Reading(POWER, gpu(g), float(rng.randint(400, 700)), T0 + i * 7.3) for g in range(3)
        ] + [Reading(ECC, gpu(0, type="correctable"), counter, T0 + i * 7.3)]
        if rng.random() < 0.05:
            poll[1] = Reading(POWER, gpu(1), None, T0 + i * 7.3)
        mem.append(poll)
        store.append(poll)
    jobs = Maintenance(store, StoreConfig(chunk_span=300, compact_delay=0))
    settle(jobs, T0 + 1500)  # about half the data compacted, the rest in head rows
    now = T0 + 399 * 7.3
    for metric in (POWER, ECC):
        for fn in ("avg", "min", "max", "last", "count", "changes", "increase", "rate", "delta"):
            for window in (30.0, 300.0, 1000.0, 2900.0):
                got = store.window(fn, metric, window=window, now=now - 11)
                want = mem.window(fn, metric, window=window, now=now - 11)
                assert got == want, (metric, fn, window)
        assert store.latest(metric, now=now - 3, max_age=20) == mem.latest(
            metric, now=now - 3, max_age=20
        )
        assert store.range(metric, start=T0 + 100, end=now) == mem.range(
            metric, start=T0 + 100, end=now
        )
        for step, agg in ((15.0, "last"), (60.0, "max"), (120.0, "count"), (60.0, "first")):
            got_r = store.range(metric, start=T0 + 100, end=now, step=step, agg=agg)
            assert got_r == mem.range(metric, start=T0 + 100, end=now, step=step, agg=agg)
