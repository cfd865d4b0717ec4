"""The disk budget: over it, the oldest data of every tier goes first, with a log line, a
counter and a storage event, and the newest data stays exact."""

from __future__ import annotations

import random

from store_helpers import T0, gpu, settle
from structlog.testing import capture_logs

from fleetd.model import Reading, SeriesKey
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database
from fleetd.store.events import EventLog
from fleetd.store.maintenance import Maintenance
from fleetd.store.samples import SampleStore

METRIC = "fleetd_gpu_power_watts"
SERIES = 20
POLLS = 1500  # one a minute: 25 hours
BUDGET = 1024 * 1024


def test_budget_drops_the_oldest_data_first(sqlite_db: Database) -> None:
    store = SampleStore(sqlite_db)
    events = EventLog(sqlite_db)
    config = StoreConfig(
        raw_retention=7 * 86400,
        rollup_1m_retention=7 * 86400,
        disk_budget_bytes=BUDGET,
        maintenance_rows=200_000,
    )
    jobs = Maintenance(store, config, events, node="n1")
    rng = random.Random(3)
    expected: dict[float, float] = {}
    batch: list[Reading] = []
    for i in range(POLLS):
        ts = T0 + 60 * i
        for s in range(SERIES):
            value = rng.random() * 1000  # incompressible: about 8 bytes a sample
            batch.append(Reading(METRIC, gpu(s), value, ts))
            if s == 0:
                expected[ts] = value
        if len(batch) >= 100 * SERIES:
            store.append(batch)
            batch = []
    store.append(batch)
    now = T0 + 60 * POLLS
    with capture_logs() as logs:
        settle(jobs, now)
    size = sqlite_db.size_bytes()
    assert size is not None and size <= BUDGET
    assert jobs.budget_dropped_bytes_total > 0
    assert any(e["event"] == "store_disk_budget_exceeded" for e in logs)
    # one event per pass that had to drop data (more tables, more passes): each says why
    recorded = events.query(kinds=["storage"])
    assert recorded
    assert all("disk budget" in e.message and e.data["budget_bytes"] == BUDGET for e in recorded)

    # the oldest went, the newest is intact and exact
    kept = store.range(METRIC, start=T0, end=now)[SeriesKey(METRIC, gpu(0))]
    assert kept, "everything was dropped"
    first_kept = kept[0].ts
    assert first_kept >= T0 + 3600  # at least the oldest hour went
    assert [(s.ts, s.value) for s in kept] == [
        (t, v) for t, v in expected.items() if t >= first_kept
    ]
    assert kept[-1].ts == now - 60
    # and no tier answers for the dropped time
    assert store.range(METRIC, start=T0, end=first_kept - 3600, step=3600) == {}
    assert store.window("count", METRIC, window=now - T0 + 60, now=now)[
        SeriesKey(METRIC, gpu(0))
    ] <= len(kept)
