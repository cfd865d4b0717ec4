"""Rollup tiers and retention over 40 days of (sparse) data, on SQLite and PostgreSQL.

Every six hours for 40 days: a gauge ``g_k = k % 7`` and a counter that counts ``k`` and is
reset on day 10 (to 5). Default tiers: raw 24 h, 1-minute rollups 30 days, 1-hour rollups a
year. At day 40 the raw samples older than a day and the 1-minute rollups older than 30 days
are gone, and every query still answers exactly from the tiers that remain.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from sqlalchemy import func, select
from store_helpers import T0, gpu, pg_schema, settle

from fleetd.model import Reading, Sample, SeriesKey
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, sqlite_url
from fleetd.store.maintenance import BUCKET_NUMBERS, SAMPLE_NUMBERS, Maintenance
from fleetd.store.samples import SampleStore
from fleetd.store.tables import chunk_table, rollup_table

DAY = 86_400.0
STEP = 21_600.0
N = 160  # 40 days of samples every 6 hours
NOW = T0 + 40 * DAY
GAUGE = "fleetd_gpu_temperature_celsius"
COUNTER = "fleetd_gpu_pcie_replays_total"
G = SeriesKey(GAUGE, gpu(0))
C = SeriesKey(COUNTER, gpu(0))


def t(k: int) -> float:
    return T0 + k * STEP


def gauge(k: int) -> float:
    return float(k % 7)


def counter(k: int) -> float:
    return float(k if k < 40 else k - 35)  # t(40) = day 10: a reset to 5


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def aged(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SampleStore, Maintenance]]:
    """40 days of data with maintenance keeping up as time passes (built once per backend)."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = sqlite_url(tmp_path_factory.mktemp("tiers") / "fleetd.db")
        else:
            request.getfixturevalue("pg_available")
            url = stack.enter_context(pg_schema())
        db = Database.open(url)
        stack.callback(db.dispose)
        store = SampleStore(db)
        jobs = Maintenance(store, StoreConfig())
        for k in range(N):
            store.append(
                [
                    Reading(GAUGE, gpu(0), gauge(k), t(k)),
                    Reading(COUNTER, gpu(0), counter(k), t(k)),
                ]
            )
            if k % 20 == 19:
                settle(jobs, t(k))
        settle(jobs, NOW)
        yield store, jobs


def test_watermarks_and_retention(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    marks = store.marks
    assert marks.rolled_until(60) == round((NOW - 3600) * 1000)  # last closed hour
    assert marks.rolled_until(3600) == round((NOW - DAY) * 1000)  # last closed day
    assert marks.deleted_until(0) >= round((NOW - DAY) * 1000)
    assert marks.deleted_until(60) == round((NOW - 30 * DAY) * 1000)
    with store.db.read() as conn:
        raw_oldest = conn.execute(select(func.min(chunk_table.c.first_ts))).scalar()
        minute_oldest = conn.execute(
            select(func.min(rollup_table.c.first_ts)).where(rollup_table.c.tier == 60)
        ).scalar()
        hour_oldest = conn.execute(
            select(func.min(rollup_table.c.first_ts)).where(rollup_table.c.tier == 3600)
        ).scalar()
    assert raw_oldest > (NOW - DAY) * 1000 - 600_000  # at most one chunk span older
    assert minute_oldest > (NOW - 30 * DAY) * 1000
    assert hour_oldest == round(t(0) * 1000)  # the bucket (t0 - 1h, t0] holds sample 0


def test_raw_range_holds_only_the_last_day(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    got = store.range(GAUGE, start=T0, end=NOW)[G]
    assert got == [Sample(t(k), gauge(k)) for k in range(N) if t(k) > NOW - DAY]


def test_hourly_range_over_40_days_uses_every_tier_exactly(
    aged: tuple[SampleStore, Maintenance],
) -> None:
    store, _ = aged
    # each sample sits exactly on an hour boundary: bucket (t - 1h, t] holds just it
    want = [Sample(t(k), gauge(k)) for k in range(N)]
    assert store.range(GAUGE, start=T0, end=NOW, step=3600)[G] == want
    assert store.range(GAUGE, start=T0, end=NOW, step=3600, agg="avg")[G] == want
    six_hourly = store.range(COUNTER, start=T0, end=NOW, step=STEP, agg="max")[C]
    assert six_hourly == [Sample(t(k), counter(k)) for k in range(N)]


def test_minute_range_where_minute_rollups_remain(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    start = NOW - 20 * DAY
    got = store.range(GAUGE, start=start, end=NOW, step=60)[G]
    assert got == [Sample(t(k), gauge(k)) for k in range(N) if t(k) >= start]
    # older than the 1-minute tier: nothing at a minute step (the hour tier is too coarse)
    assert store.range(GAUGE, start=T0, end=T0 + 5 * DAY, step=60) == {}


def test_increase_across_a_reset_at_a_tier_boundary(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    # window (day 5, day 40]: samples k = 21..159. 39 - 21 = 18 before the reset at day 10
    # (the boundary between the hour and the minute tier), +5 for the reset, 124 - 5 after
    window = 35 * DAY
    assert store.window("increase", COUNTER, window=window, now=NOW) == {C: 18 + 5 + 119}
    assert store.window("rate", COUNTER, window=window, now=NOW)[C] == pytest.approx(
        142 / (t(159) - t(21))
    )
    assert store.window("changes", COUNTER, window=window, now=NOW) == {C: 138.0}
    assert store.window("count", COUNTER, window=window, now=NOW) == {C: 139.0}


def test_gauge_window_functions_over_rollups(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    values = [gauge(k) for k in range(21, N)]
    window = 35 * DAY
    assert store.window("avg", GAUGE, window=window, now=NOW)[G] == pytest.approx(
        sum(values) / len(values)
    )
    assert store.window("max", GAUGE, window=window, now=NOW) == {G: 6.0}
    assert store.window("min", GAUGE, window=window, now=NOW) == {G: 0.0}
    assert store.window("last", GAUGE, window=window, now=NOW) == {G: gauge(N - 1)}
    assert store.window("delta", GAUGE, window=window, now=NOW) == {G: gauge(N - 1) - gauge(21)}


def test_window_inside_raw_retention_uses_raw_samples(
    aged: tuple[SampleStore, Maintenance],
) -> None:
    store, _ = aged
    # (NOW - 13h, NOW]: samples at NOW - 12h and NOW - 6h (k = 158, 159)
    assert store.window("increase", COUNTER, window=13 * 3600, now=NOW) == {C: 1.0}
    assert store.window("count", GAUGE, window=13 * 3600, now=NOW) == {G: 2.0}


def test_latest_falls_back_to_rollups(aged: tuple[SampleStore, Maintenance]) -> None:
    store, _ = aged
    assert store.latest(GAUGE, now=NOW) == {G: Sample(t(N - 1), gauge(N - 1))}
    when = T0 + 20 * DAY + 1  # raw is long gone; the minute tier still knows
    assert store.latest(GAUGE, now=when) == {G: Sample(t(80), gauge(80))}
    when = T0 + 5 * DAY + 1  # only the hour tier reaches back this far
    assert store.latest(COUNTER, now=when) == {C: Sample(t(20), counter(20))}
    assert store.latest(GAUGE, now=when, max_age=0.5) == {}


def test_raw_samples_stay_until_rolled_up(sqlite_db: Database) -> None:
    store = SampleStore(sqlite_db)
    jobs = Maintenance(store, StoreConfig())
    for k in range(12):
        store.append([Reading(GAUGE, gpu(0), float(k), T0 + k * 3600)])
    later = T0 + 5 * DAY
    while jobs.compact(later):
        pass
    assert jobs.retention(later) == 0  # nothing rolled up yet: raw is all there is
    assert len(store.range(GAUGE, start=T0, end=later)[G]) == 12
    while jobs.rollup(60, later):
        pass
    assert jobs.retention(later) > 0
    assert store.range(GAUGE, start=T0, end=later) == {}
    hourly = store.range(GAUGE, start=T0, end=later, step=3600)[G]
    assert hourly == [Sample(T0 + k * 3600, float(k)) for k in range(12)]


def test_minute_buckets_end_on_the_minute(sqlite_db: Database) -> None:
    store = SampleStore(sqlite_db)
    offsets = (60.0, 60.001, 119.999, 120.0, 120.001)
    store.append([Reading(GAUGE, gpu(0), float(i), T0 + o) for i, o in enumerate(offsets)])
    # bucket (T0, T0+60] holds 60.0; (T0+60, T0+120] holds the next three; then 120.001
    want = [Sample(T0 + 60, 1.0), Sample(T0 + 120, 3.0), Sample(T0 + 180, 1.0)]
    assert store.range(GAUGE, start=T0, end=T0 + 180, step=60, agg="count")[G] == want
    settle(Maintenance(store, StoreConfig()), T0 + 3 * 3600)
    assert store.marks.rolled_until(60) > (T0 + 180) * 1000  # now answered from rollups
    assert store.range(GAUGE, start=T0, end=T0 + 180, step=60, agg="count")[G] == want
    firsts = store.range(GAUGE, start=T0, end=T0 + 180, step=60, agg="first")[G]
    assert [s.value for s in firsts] == [0.0, 1.0, 4.0]


def test_a_step_of_the_hourly_rollup_reads_no_more_than_maintenance_rows_allows(
    sqlite_db: Database,
) -> None:
    """A day of 1-minute buckets is about eleven numbers a minute where a raw sample is two:
    each step of the daily rollup takes as few series as keep it within ``maintenance_rows``
    raw samples' worth, and the hours it writes are whole."""
    store = SampleStore(sqlite_db)
    config = StoreConfig(maintenance_rows=20_000)
    jobs = Maintenance(store, config)
    series = 6
    for minute in range(24 * 60):
        when = T0 + 60 * minute + 30
        store.append([Reading(GAUGE, gpu(g), float(minute % 60), when) for g in range(series)])
    later = T0 + DAY + 2 * 3600
    while jobs.compact(later):
        pass
    while jobs.rollup(60, later):
        pass
    steps = []
    while done := jobs.rollup(3600, later):
        steps.append(done)
    *steps, closing = steps  # the last call only moves the watermark (and returns 1)
    assert closing == 1 and sum(steps) == series and len(steps) > 1
    numbers_per_series = 24 * 60 * BUCKET_NUMBERS
    assert max(steps) * numbers_per_series <= SAMPLE_NUMBERS * config.maintenance_rows
    hourly = store.range(GAUGE, start=T0 + 3600, end=T0 + DAY, step=3600, agg="max")
    assert set(hourly) == {SeriesKey(GAUGE, gpu(g)) for g in range(series)}
    for samples in hourly.values():
        assert [s.value for s in samples] == [59.0] * 24
