"""Opening SQLite: WAL, durable commits, reclaimable space, writers that wait for the lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from fleetd.store.db import Database, sqlite_url


def pragma(db: Database, name: str) -> object:
    with db.engine.connect() as conn:
        return conn.exec_driver_sql(f"PRAGMA {name}").scalar()


def test_sqlite_settings(sqlite_db: Database) -> None:
    assert pragma(sqlite_db, "journal_mode") == "wal"
    assert pragma(sqlite_db, "synchronous") == 2  # FULL
    assert pragma(sqlite_db, "auto_vacuum") == 2  # INCREMENTAL
    assert sqlite_db.path is not None and sqlite_db.path.name == "fleetd.db"


def test_creates_the_state_directory(tmp_path: Path) -> None:
    db = Database.open(sqlite_url(tmp_path / "a" / "b" / "fleetd.db"))
    assert (tmp_path / "a" / "b" / "fleetd.db").exists()
    db.dispose()


def test_a_writer_waits_for_the_lock_then_fails_clearly(sqlite_path: Path) -> None:
    db = Database.open(sqlite_url(sqlite_path), busy_timeout=0.1)
    other = sqlite3.connect(sqlite_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="locked"), db.begin() as conn:
            conn.exec_driver_sql("DELETE FROM fleetd_store_state")
        with db.read() as conn:  # readers are never blocked by a writer (WAL)
            assert conn.exec_driver_sql("SELECT count(*) FROM fleetd_series").scalar() == 0
    finally:
        other.execute("ROLLBACK")
        other.close()
    with db.begin() as conn:
        conn.exec_driver_sql("DELETE FROM fleetd_store_state")
    db.dispose()


def test_ddl_is_transactional(sqlite_db: Database) -> None:
    with pytest.raises(RuntimeError), sqlite_db.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE scratch (x INTEGER)")
        raise RuntimeError("roll back")
    with sqlite_db.read() as conn:
        names = conn.exec_driver_sql("SELECT name FROM sqlite_master").scalars().all()
    assert "scratch" not in names


def checkpoint(db: Database) -> None:
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def test_size_and_free_pages(sqlite_db: Database) -> None:
    with sqlite_db.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE filler (b BLOB)")
        conn.exec_driver_sql("INSERT INTO filler VALUES (zeroblob(2000000))")
    checkpoint(sqlite_db)
    full = sqlite_db.size_bytes()
    assert full is not None and full > 2_000_000
    with sqlite_db.begin() as conn:
        conn.exec_driver_sql("DELETE FROM filler")
    checkpoint(sqlite_db)
    assert (sqlite_db.size_bytes() or 0) < 1_000_000  # free pages do not count
    assert (sqlite_db.file_bytes() or 0) > 2_000_000  # but the file still holds them
    assert sqlite_db.release_free_pages(10_000) > 0
    checkpoint(sqlite_db)
    assert (sqlite_db.file_bytes() or 0) < 1_000_000  # now back with the file system
