"""ResilientStore bookkeeping: a bounded backlog, events kept for later, maintenance, stats."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from store_helpers import T0, gpu

from fleetd.model import Reading
from fleetd.store.config import StoreConfig
from fleetd.store.db import sqlite_url
from fleetd.store.resilient import OPS, ResilientStore

POWER = "fleetd_gpu_power_watts"


def poll(t: float) -> list[Reading]:
    return [Reading(POWER, gpu(0), t, T0 + t), Reading(POWER, gpu(1), None, T0 + t)]


def locked(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_backlog_is_bounded_and_counts_what_it_drops(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    config = StoreConfig(busy_timeout=0.02, retry_interval=1, backlog_polls=3)
    rs = ResilientStore(sqlite_url(path), config, node="n1")
    assert rs.open(T0)
    other = locked(path)
    for t in range(5):
        assert not rs.append(poll(float(t)), now=T0 + t)
    other.execute("ROLLBACK")
    other.close()
    assert rs.stats().backlog_polls == 3 and rs.stats().backlog_dropped_polls == 2
    assert rs.append(poll(10.0), now=T0 + 10)
    got = rs.range(POWER, start=T0, end=T0 + 10)
    assert [s.value for samples in got.values() for s in samples] == [2.0, 3.0, 4.0, 10.0]
    rs.close()


def test_events_wait_for_the_database(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    rs = ResilientStore(sqlite_url(path), StoreConfig(busy_timeout=0.02), node="n1")
    assert rs.open(T0)
    assert isinstance(rs.append_event("alert", now=T0, gpu=1, message="first"), int)
    other = locked(path)
    assert rs.append_event("reset", now=T0 + 1, gpu=1, message="during", actor="fleetd") is None
    other.execute("ROLLBACK")
    other.close()
    assert rs.append(poll(20.0), now=T0 + 20)  # the retry time has come: both are written
    events = rs.query_events(gpu=1)
    assert [(e.message, e.ts, e.actor) for e in events] == [
        ("first", T0, None),
        ("during", T0 + 1, "fleetd"),
    ]
    assert rs.stats().errors["event"] == 1
    rs.close()


def test_maintenance_and_stats(tmp_path: Path) -> None:
    rs = ResilientStore(sqlite_url(tmp_path / "fleetd.db"), StoreConfig(), node="n1")
    assert rs.open(T0)
    for t in range(0, 1200, 10):
        rs.append(poll(float(t)), now=T0 + t)
    report = rs.maintenance(T0 + 1300)
    assert report is not None and report.compacted_rows > 0
    stats = rs.stats()
    assert set(stats.errors) == set(OPS) and not any(stats.errors.values())
    assert stats.samples_written == 120
    assert stats.disk_bytes is not None and stats.disk_bytes > 0
    assert not stats.degraded and stats.budget_dropped_bytes == 0
    rs.close()
