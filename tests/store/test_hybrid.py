"""HybridQuery: memory when it holds the window, the database for the older part, memory
alone when the database fails; and warming the memory window at start-up."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from store_helpers import T0, gpu

from fleetd.errors import StoreError
from fleetd.model import Reading, Sample, SeriesKey
from fleetd.query import Matcher
from fleetd.store.db import Database
from fleetd.store.functions import Summary
from fleetd.store.hybrid import HybridQuery, warm_memory
from fleetd.store.memory import MemoryWindow
from fleetd.store.samples import SampleStore

ECC = "fleetd_gpu_ecc_errors_total"
K = SeriesKey(ECC, gpu(0))


def poll(t: float, value: float) -> list[Reading]:
    return [Reading(ECC, gpu(0), value, T0 + t)]


class Failing:
    """A database that is down: every read raises StoreError, as ResilientStore does."""

    def __getattr__(self, name: str) -> object:
        def fail(*args: object, **kwargs: object) -> object:
            raise StoreError("storage unavailable: disk full")

        return fail


@pytest.fixture
def store(sqlite_db: Database) -> SampleStore:
    return SampleStore(sqlite_db)


def test_memory_answers_when_it_covers_the_window(store: SampleStore) -> None:
    mem = MemoryWindow(retention=3600)
    for t, v in ((0, 1.0), (10, 2.0), (20, 4.0)):
        mem.append(poll(t, v))  # never written to the database
    hybrid = HybridQuery(mem, store)
    assert hybrid.window("increase", ECC, window=25, now=T0 + 20) == {K: 3.0}
    assert hybrid.latest(ECC, now=T0 + 20, max_age=30) == {K: Sample(T0 + 20, 4.0)}


def test_older_part_from_the_database_newer_from_memory(store: SampleStore) -> None:
    # the daemon restarted at T0+100: the database holds the past, memory only what came since
    for t, v in ((0, 10.0), (30, 20.0), (60, 2.0), (90, 5.0)):  # a reset at 60
        store.append(poll(t, v))
    mem = MemoryWindow(retention=3600)
    for t, v in ((100, 7.0), (110, 1.0), (120, 4.0)):  # another reset at 110
        mem.append(poll(t, v))  # not in the database (writes failing, say)
    assert mem.complete_after == pytest.approx(T0 + 99.999)
    hybrid = HybridQuery(mem, store)
    # 10→20 (+10), →2 reset (+2), →5 (+3), →7 (+2), →1 reset (+1), →4 (+3)
    assert hybrid.window("increase", ECC, window=200, now=T0 + 120) == {K: 21.0}
    assert hybrid.window("count", ECC, window=200, now=T0 + 120) == {K: 7.0}
    assert hybrid.window("max", ECC, window=200, now=T0 + 120) == {K: 20.0}
    got = hybrid.range(ECC, start=T0, end=T0 + 120)[K]
    assert [s.value for s in got] == [10.0, 20.0, 2.0, 5.0, 7.0, 1.0, 4.0]
    assert hybrid.latest(ECC, now=T0 + 95) == {K: Sample(T0 + 90, 5.0)}
    assert hybrid.latest(ECC, now=T0 + 125) == {K: Sample(T0 + 120, 4.0)}


def test_step_ranges_take_fresh_buckets_from_memory(store: SampleStore) -> None:
    for t, v in ((0, 1.0), (30, 2.0)):
        store.append(poll(t, v))
    mem = MemoryWindow(retention=3600)
    for t, v in ((61, 3.0), (100, 5.0)):
        mem.append(poll(t, v))
    hybrid = HybridQuery(mem, store)
    got = hybrid.range(ECC, start=T0, end=T0 + 120, step=60, agg="max")[K]
    assert got == [Sample(T0, 1.0), Sample(T0 + 60, 2.0), Sample(T0 + 120, 5.0)]


def test_a_failing_database_leaves_memory_answering() -> None:
    mem = MemoryWindow(retention=3600)
    for t, v in ((100, 7.0), (110, 9.0)):
        mem.append(poll(t, v))
    errors: list[Exception] = []
    hybrid = HybridQuery(mem, Failing(), on_error=errors.append)  # type: ignore[arg-type]
    assert hybrid.window("increase", ECC, window=3600, now=T0 + 110) == {K: 2.0}
    assert hybrid.range(ECC, start=T0, end=T0 + 200) == {
        K: [Sample(T0 + 100, 7.0), Sample(T0 + 110, 9.0)]
    }
    assert hybrid.latest(ECC, now=T0 + 110) == {K: Sample(T0 + 110, 9.0)}
    assert hybrid.series(ECC, [Matcher("gpu", "=", "0")]) == [K]
    assert len(errors) == 4 and all(isinstance(e, StoreError) for e in errors)


def test_warm_memory_from_the_database(store: SampleStore) -> None:
    for t in range(0, 7200, 60):
        store.append(poll(t, float(t // 60)))
    mem = MemoryWindow(retention=3600)
    now = T0 + 7200
    loaded = warm_memory(mem, store, now=now)
    assert loaded == 59  # samples in (now - 1h, now]: t = 3660 .. 7140
    assert mem.complete_after == now - 3600
    assert mem.window("increase", ECC, window=3600, now=now) == {K: 119.0 - 61.0}
    # and the hybrid answers a window within retention from memory alone
    hybrid = HybridQuery(mem, Failing())  # type: ignore[arg-type]
    assert hybrid.window("count", ECC, window=1800, now=now) == {K: 29.0}


class Recording:
    """Wraps a store and records which parts of a window the hybrid asks it for."""

    def __init__(self, inner: SampleStore) -> None:
        self.inner = inner
        self.asked: list[tuple[float, float]] = []

    def summaries(
        self, metric: str, matchers: Sequence[Matcher] = (), *, start: float, end: float
    ) -> dict[SeriesKey, Summary]:
        self.asked.append((start - T0, end - T0))
        return self.inner.summaries(metric, matchers, start=start, end=end)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_database_is_asked_only_for_what_memory_lacks(store: SampleStore) -> None:
    for t, v in ((0, 1.0), (50, 2.0)):
        store.append(poll(t, v))
    mem = MemoryWindow(retention=3600)
    mem.append(poll(100, 3.0))
    rec = Recording(store)
    hybrid = HybridQuery(mem, rec)  # type: ignore[arg-type]
    assert hybrid.window("last", ECC, window=1000, now=T0 + 100) == {K: 3.0}
    assert rec.asked == [(-900.0, pytest.approx(99.999))]


@pytest.mark.parametrize("db_until", [600.0, 450.0], ids=["db-current", "db-behind"])
def test_hybrid_matches_one_complete_window(store: SampleStore, db_until: float) -> None:
    """Memory holds (300, 600], the database [0, db_until]: every answer equals what one
    window holding everything gives, whether or not the database has the newest polls."""
    everything = MemoryWindow(retention=10**6)
    mem = MemoryWindow(retention=300)
    value = 0.0
    for i in range(0, 86):
        t = i * 7.0
        value = 1.0 if i % 23 == 0 else value + (i % 5)
        p = poll(t, value)
        everything.append(p)
        mem.append(p)
        if t <= db_until:
            store.append(p)
    mem.prune(T0 + 600)
    assert mem.complete_after == T0 + 300
    hybrid = HybridQuery(mem, store)
    now = T0 + 600
    for fn in ("avg", "min", "max", "last", "count", "changes", "increase", "rate", "delta"):
        for window in (100.0, 450.0, 600.0):
            got = hybrid.window(fn, ECC, window=window, now=now)
            want = everything.window(fn, ECC, window=window, now=now)
            assert got.keys() == want.keys() and all(
                got[k] == pytest.approx(want[k]) for k in want
            ), (fn, window)
    assert hybrid.range(ECC, start=T0, end=now) == everything.range(ECC, start=T0, end=now)
    for step in (20.0, 60.0, 120.0):
        for agg in ("last", "first", "avg", "min", "max", "count"):
            got_r = hybrid.range(ECC, start=T0, end=now, step=step, agg=agg)
            want_r = everything.range(ECC, start=T0, end=now, step=step, agg=agg)
            assert [s.ts for s in got_r[K]] == [s.ts for s in want_r[K]], (step, agg)
            assert [s.value for s in got_r[K]] == pytest.approx([s.value for s in want_r[K]])


class CountingLatest:
    """Wraps a store and counts the ``latest`` reads the hybrid sends it."""

    def __init__(self, inner: SampleStore) -> None:
        self.inner = inner
        self.latest_reads = 0

    def latest(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        now: float,
        max_age: float | None = None,
    ) -> dict[SeriesKey, Sample]:
        self.latest_reads += 1
        return self.inner.latest(metric, matchers, now=now, max_age=max_age)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_latest_without_an_age_reads_samples_from_the_database_only_when_memory_lacks_them(
    store: SampleStore,
) -> None:
    """``latest`` with no age limit (``stale()``) is answered by memory when every series the
    database knows has a sample in memory after the split, and by both otherwise: a series
    that stopped reporting before memory's window, or a time before the window."""
    other = SeriesKey(ECC, gpu(1))
    for t, v in ((0, 1.0), (50, 2.0)):
        store.append(poll(t, v))
    mem = MemoryWindow(retention=3600)
    for t, v in ((100, 3.0), (110, 4.0)):
        mem.append(poll(t, v))
        store.append(poll(t, v))
    counted = CountingLatest(store)
    hybrid = HybridQuery(mem, counted)  # type: ignore[arg-type]
    assert hybrid.latest(ECC, now=T0 + 115) == {K: Sample(T0 + 110, 4.0)}
    assert counted.latest_reads == 0
    # the same answer the database gives alone
    assert store.latest(ECC, now=T0 + 115) == {K: Sample(T0 + 110, 4.0)}
    # before memory's window only the database has the answer
    assert hybrid.latest(ECC, now=T0 + 60) == {K: Sample(T0 + 50, 2.0)}
    assert counted.latest_reads == 1
    # a series the database knows and memory does not hold (it stopped reporting)
    store.append([Reading(ECC, gpu(1), 9.0, T0 + 20)])
    assert hybrid.latest(ECC, now=T0 + 115) == {
        K: Sample(T0 + 110, 4.0),
        other: Sample(T0 + 20, 9.0),
    }
    assert counted.latest_reads == 2
    # a series only memory holds (its database write failed) is answered too
    mem.append([Reading(ECC, gpu(2), 5.0, T0 + 112)])
    got = hybrid.latest(ECC, [Matcher("gpu", "!=", "1")], now=T0 + 115)
    assert got == {K: Sample(T0 + 110, 4.0), SeriesKey(ECC, gpu(2)): Sample(T0 + 112, 5.0)}
    assert counted.latest_reads == 2
