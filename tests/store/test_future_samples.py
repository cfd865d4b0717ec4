"""A database holding samples stamped after the clock's ``now`` (a clock that was ahead).

fleetd's steady clock never writes such samples while it runs, and a restart resumes from
the last run's time when that is less than a day ahead (SteadyClock.resume). Beyond that (or
a database from elsewhere) the new samples land before stored ones. Then nothing may be
lost or stall: writes and queries work, ``now``-bounded queries never return what lies
after ``now``, and the rollups built while the clock was ahead are rolled again, from both
runs' samples, instead of leaving the new ones out of the 1-minute tier for good.
"""

from __future__ import annotations

from sqlalchemy import func, select
from store_helpers import T0, gpu, settle

from fleetd.model import Reading, SeriesKey
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database
from fleetd.store.maintenance import Maintenance
from fleetd.store.samples import SampleStore
from fleetd.store.tables import head_table

HOUR = 3600.0
DAY = 86_400.0
METRIC = "fleetd_gpu_temperature_celsius"
KEY = SeriesKey(METRIC, gpu(0))


def write(store: SampleStore, jobs: Maintenance, start: float, end: float, value: float) -> None:
    """A sample every 10 s in [start, end), maintenance every 10 minutes, as the daemon."""
    t = start
    while t < end:
        store.append([Reading(METRIC, gpu(0), value, t)])
        if round(t - start) % 600 == 0:
            settle(jobs, t)
        t += 10.0


def test_samples_ahead_of_the_clock_are_kept_and_rolled_up_with_the_new_ones(
    any_db: Database,
) -> None:
    config = StoreConfig()
    ahead = SampleStore(any_db)
    ahead_jobs = Maintenance(ahead, config)
    # the first run's clock was 1.5 h ahead: it stamped [1 h, 4 h) over real [-0.5 h, 2.5 h)
    write(ahead, ahead_jobs, T0 + HOUR, T0 + 4 * HOUR, 1.0)
    settle(ahead_jobs, T0 + 4 * HOUR)
    assert ahead.marks.rolled_until(60) / 1000 == T0 + 3 * HOUR

    # the restart is on the right clock, 1.5 h behind the stored samples, and does not
    # resume from them (as when they are over a day ahead, or the alert state is gone)
    store = SampleStore(any_db)
    jobs = Maintenance(store, config)
    now = T0 + 2.5 * HOUR
    write(store, jobs, now + 5, now + 30 * 60, 2.0)  # 5 s off the first run's grid
    now += 30 * 60
    latest = store.latest(METRIC, now=now)[KEY]
    assert latest.value == 2.0 and latest.ts <= now  # never a sample from after ``now``
    window = store.window("count", METRIC, window=600, now=now)
    assert window[KEY] == 120  # both runs' samples of the last 10 minutes (60 each)

    write(store, jobs, now + 5, T0 + 5 * HOUR, 2.0)
    settle(jobs, T0 + 5 * HOUR)
    assert store.marks.rolled_until(60) / 1000 == T0 + 4 * HOUR
    # the 1-minute tier of the overlap holds both runs: 6 + 6 samples a minute
    counts = store.range(METRIC, start=T0 + 2.5 * HOUR, end=T0 + 4 * HOUR, step=60, agg="count")
    both = [s for s in counts[KEY] if T0 + 2.5 * HOUR < s.ts < T0 + 4 * HOUR]  # whole minutes
    assert len(both) == 89 and {s.value for s in both} == {12.0}
    # and the raw samples are all still there
    raw = store.range(METRIC, start=T0 + 2.5 * HOUR, end=T0 + 4 * HOUR)[KEY]
    assert len([s for s in raw if s.value == 1.0]) == len([s for s in raw if s.value == 2.0])


def test_maintenance_keeps_going_after_its_clock_went_back(any_db: Database) -> None:
    """A clock re-anchored two days back: the head rows written since are compacted and
    rolled up on the new clock's schedule, not two days later. (With raw samples kept a
    week: a step back past ``raw_retention`` lands before data retention already deleted,
    which the tiers cannot answer for; docs/operations.md says so.)"""
    config = StoreConfig(raw_retention=7 * DAY)
    store = SampleStore(any_db)
    jobs = Maintenance(store, config)
    later = T0 + 2 * DAY
    write(store, jobs, later, later + HOUR, 1.0)
    settle(jobs, later + HOUR + 30)  # the last, still open span waits: idle until it closes
    write(store, jobs, T0, T0 + HOUR, 2.0)
    settle(jobs, T0 + 2 * HOUR)
    with any_db.read() as conn:
        first = conn.execute(select(func.min(head_table.c.ts))).scalar()
    assert first is None or first >= to_ms(later), "head rows of the new clock left in head"
    counts = store.range(METRIC, start=T0 + 60, end=T0 + HOUR - 60, step=60, agg="count")
    assert {s.value for s in counts[KEY]} == {6.0}


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)
