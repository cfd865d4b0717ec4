"""Schema versions: a real version-1 file upgrades in place; newer-than-code is refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from store_helpers import T0, gpu

from fleetd.errors import StoreError
from fleetd.model import Sample, SeriesKey
from fleetd.store import schema
from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, sqlite_url
from fleetd.store.events import EventLog
from fleetd.store.maintenance import Maintenance
from fleetd.store.samples import SampleStore

V1_DDL = """
CREATE TABLE fleetd_schema_version (
    id INTEGER PRIMARY KEY, version INTEGER NOT NULL, fleetd_version VARCHAR(32) NOT NULL);
CREATE TABLE fleetd_series (
    id INTEGER PRIMARY KEY AUTOINCREMENT, metric VARCHAR(200) NOT NULL, labels TEXT NOT NULL,
    CONSTRAINT uq_fleetd_series_metric_labels UNIQUE (metric, labels));
CREATE TABLE fleetd_samples (
    series_id INTEGER NOT NULL, ts FLOAT NOT NULL, value FLOAT NOT NULL,
    PRIMARY KEY (series_id, ts));
CREATE TABLE fleetd_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts FLOAT NOT NULL, node VARCHAR(200) NOT NULL,
    gpu INTEGER, kind VARCHAR(64) NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX ix_fleetd_events_ts ON fleetd_events (ts);
CREATE INDEX ix_fleetd_events_node_gpu_ts ON fleetd_events (node, gpu, ts);
CREATE INDEX ix_fleetd_events_kind_ts ON fleetd_events (kind, ts);
INSERT INTO fleetd_schema_version VALUES (1, 1, '0.0.9');
"""

ECC = "fleetd_gpu_ecc_errors_total"
POWER = "fleetd_gpu_power_watts"


def make_v1(path: Path, *, with_events: bool = True) -> None:
    """A version-1 database as fleetd 0.0.9 wrote it: one row per sample, float seconds."""
    conn = sqlite3.connect(path)
    statements = [stmt for stmt in V1_DDL.split(";") if stmt.strip()]
    if not with_events:
        statements = [stmt for stmt in statements if "fleetd_events" not in stmt]
    conn.executescript(";".join(statements) + ";")
    labels = json.dumps([list(p) for p in gpu(0, type="correctable")], separators=(",", ":"))
    power = json.dumps([list(p) for p in gpu(0)], separators=(",", ":"))
    conn.execute("INSERT INTO fleetd_series (id, metric, labels) VALUES (1, ?, ?)", (ECC, labels))
    conn.execute("INSERT INTO fleetd_series (id, metric, labels) VALUES (2, ?, ?)", (POWER, power))
    counter = (10.0, 15.0, 3.0, 8.0, 8.0)
    for i, value in enumerate(counter):
        conn.execute("INSERT INTO fleetd_samples VALUES (1, ?, ?)", (T0 + 10 * i, value))
        conn.execute("INSERT INTO fleetd_samples VALUES (2, ?, ?)", (T0 + 10 * i, 600.5 + i))
    if with_events:
        conn.execute(
            "INSERT INTO fleetd_events (ts, node, gpu, kind, message, data) "
            "VALUES (?, 'n1', 3, 'reset', 'hive reset', '{\"hive\": \"h0\"}')",
            (T0 + 5,),
        )
    conn.commit()
    conn.close()


def test_version_one_file_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    make_v1(path)
    db = Database.open(sqlite_url(path))
    try:
        assert db.schema_version() == schema.SCHEMA_VERSION
        store = SampleStore(db)
        ecc = SeriesKey(ECC, gpu(0, type="correctable"))
        # the old samples answer every query, counter reset included
        assert store.window("increase", ECC, window=60, now=T0 + 40) == {ecc: 13.0}
        assert store.latest(POWER, now=T0 + 100) == {
            SeriesKey(POWER, gpu(0)): Sample(T0 + 40, 604.5)
        }
        # old events survive and gained an (empty) actor; new ones carry theirs
        events = EventLog(db)
        [old] = events.query()
        assert (old.kind, old.gpu, old.data, old.actor) == ("reset", 3, {"hive": "h0"}, None)
        events.append("operator_action", now=T0 + 50, node="n1", message="drain", actor="sre")
        assert [e.actor for e in events.query()] == [None, "sre"]
        # and maintenance carries the migrated rows through compaction into chunks
        jobs = Maintenance(store, StoreConfig())
        while jobs.compact(T0 + 3600):
            pass
        with db.read() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM fleetd_samples_head").scalar() == 0
        assert store.window("increase", ECC, window=60, now=T0 + 40) == {ecc: 13.0}
        with db.read() as conn:
            tables = set(
                conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table'").scalars()
            )
        assert "fleetd_samples" not in tables
    finally:
        db.dispose()
    # opening again is a no-op: already current
    db = Database.open(sqlite_url(path))
    assert db.schema_version() == schema.SCHEMA_VERSION
    db.dispose()


def test_failed_migration_leaves_version_one_intact(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    make_v1(path, with_events=False)  # the step's ALTER TABLE fleetd_events cannot run
    with pytest.raises(Exception, match="fleetd_events"):
        Database.open(sqlite_url(path))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM fleetd_schema_version").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM fleetd_samples").fetchone() == (10,)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "fleetd_samples_head" not in tables  # the half-done step was rolled back
    conn.close()


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    Database.open(sqlite_url(path)).dispose()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE fleetd_schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 99 is newer than this fleetd"):
        Database.open(sqlite_url(path))


@pytest.mark.postgres
def test_fresh_postgresql_schema_is_current(pg_url: str) -> None:
    db = Database.open(pg_url)
    try:
        assert db.schema_version() == schema.SCHEMA_VERSION
        assert db.size_bytes() is not None and db.size_bytes() > 0
    finally:
        db.dispose()
