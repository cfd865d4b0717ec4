"""Storage corner cases: a lock that must not slow the poll, damage found while running,
immutable files found before SQLite maps them, a state directory that cannot hold the
database at start."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import T0, gpu

from fleetd.errors import StoreError
from fleetd.model import Reading
from fleetd.store.config import StoreConfig
from fleetd.store.db import CHECK_CACHE_KIB, Database, FileGuard, file_problem, sqlite_url
from fleetd.store.resilient import POLL_LOCK_WAIT, ResilientStore, classify

POWER = "fleetd_gpu_power_watts"


def poll(t: float) -> list[Reading]:
    return [Reading(POWER, gpu(0), t, T0 + t)]


def _chattr_works(tmp: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    probe = tmp / "chattr-probe"
    probe.write_text("x")
    done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    if done:
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    return done


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[list[Path]]:
    """Files made immutable during the test (``chattr +i``), made mutable again after."""
    if not _chattr_works(tmp_path):
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_a_lock_held_elsewhere_costs_the_poll_one_short_wait(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    config = StoreConfig(busy_timeout=1.0, retry_interval=1)
    rs = ResilientStore(sqlite_url(path), config, node="n1")
    assert rs.open(T0)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        assert not rs.append(poll(0.0), now=T0)  # the first write finds out: one busy_timeout
        assert rs.health().reason == "database locked by another writer"
        started = time.monotonic()
        for t in range(1, 30):  # retries are due every second or two: each a 50 ms look
            assert not rs.append(poll(float(t)), now=T0 + t)
        assert time.monotonic() - started < 29 * 0.2
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert rs.append(poll(60.0), now=T0 + 60)
    assert not rs.health().degraded
    rs.close()


def test_the_poll_never_waits_behind_maintenance(tmp_path: Path) -> None:
    rs = ResilientStore(sqlite_url(tmp_path / "fleetd.db"), StoreConfig(), node="n1")
    assert rs.open(T0)
    held = threading.Event()
    release = threading.Event()

    def maintenance_stuck() -> None:
        with rs._lock:  # what a maintenance step stuck behind a busy_timeout does
            held.set()
            release.wait(10)

    worker = threading.Thread(target=maintenance_stuck)
    worker.start()
    held.wait(5)
    started = time.monotonic()
    assert not rs.append(poll(1.0), now=T0 + 1)  # kept, not waited for
    assert rs.append_event("alert", now=T0 + 1, message="kept") is None
    assert time.monotonic() - started < 4 * POLL_LOCK_WAIT + 0.5
    release.set()
    worker.join()
    assert rs.append(poll(2.0), now=T0 + 2)  # the kept poll goes with the next
    got = rs.range(POWER, start=T0, end=T0 + 10)
    assert [s.value for samples in got.values() for s in samples] == [1.0, 2.0]
    assert [e.message for e in rs.query_events()] == ["kept"]
    rs.close()


def test_garbage_in_the_wal_is_found_by_the_periodic_check_and_moved_aside(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleetd.db"
    config = StoreConfig(integrity_check_interval=5, maintenance_interval=1)
    rs = ResilientStore(sqlite_url(path), config, node="n1")
    assert rs.open(T0)
    assert rs.db is not None
    # keep a reader open so nothing checkpoints the WAL away, then fill it with samples
    for t in range(50):
        assert rs.append(poll(float(t)), now=T0 + t)
    rs.maintenance(T0 + 50)  # the first check: the file is fine
    assert not rs.health().degraded
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size
    assert size > 4096
    with wal.open("r+b") as f:  # frames after the header: garbage
        f.seek(32)
        f.write(os.urandom(size - 32))
    rs.maintenance(T0 + 60)
    moved = list(tmp_path.glob("fleetd.db.corrupt-*"))
    assert [m.name for m in moved if not m.name.endswith(("-wal", "-shm"))], moved
    assert rs.stats().errors["corrupt"] == 1
    assert rs.append(poll(70.0), now=T0 + 70)  # a fresh database carries on
    rs.close()


def filled_file(path: Path, rows: int, row_bytes: int, *, index: bool = False) -> Database:
    """A checkpointed SQLite file of ``rows`` text rows that the integrity check passes."""
    db = Database.open(sqlite_url(path))
    with db.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE filler (x TEXT)")
        if index:
            conn.exec_driver_sql("CREATE INDEX ix_filler ON filler (x)")
        for n in range(rows):
            conn.exec_driver_sql(f"INSERT INTO filler VALUES ('{n:06d}{'x' * row_bytes}')")
    with db.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    assert db.quick_check() is None
    return db


def assert_check_finds_damage(db: Database, path: Path, at: int, pages: int) -> None:
    """Random bytes over ``pages`` pages from offset ``at``: the check reports a problem, or
    raises what SQLite raises for a corrupt file."""
    with path.open("r+b") as f:
        f.seek(at)
        f.write(os.urandom(4096 * pages))
    try:
        problem = db.quick_check()
    except Exception as exc:
        assert classify(exc).corrupt
    else:
        assert problem is not None
    db.dispose()


def test_quick_check_reports_a_damaged_main_file(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    db = filled_file(path, rows=200, row_bytes=500)
    assert_check_finds_damage(db, path, at=4096 * 3, pages=4)


def test_quick_check_reads_a_file_many_times_its_page_cache_and_finds_late_damage(
    tmp_path: Path,
) -> None:
    """The check's small page cache (``CHECK_CACHE_KIB``) still reads every page: damage in
    the last pages of a file sixteen times the cache is found."""
    path = tmp_path / "fleetd.db"
    db = filled_file(path, rows=4000, row_bytes=1000, index=True)
    size = path.stat().st_size
    assert size > 16 * CHECK_CACHE_KIB * 1024
    assert_check_finds_damage(db, path, at=size - 4096 * 4, pages=3)


def test_file_guard_names_an_immutable_file(tmp_path: Path, immutable: list[Path]) -> None:
    path = tmp_path / "fleetd.db"
    db = Database.open(sqlite_url(path))
    db.dispose()
    guard = FileGuard(path, ttl=0)
    assert guard.problem() is None
    subprocess.run(["chattr", "+i", str(path)], check=True)
    immutable.append(path)
    assert guard.problem() == f"database file {path} is read-only or immutable"


def test_file_guard_names_the_wal_or_the_directory_and_ignores_missing_files(
    tmp_path: Path, immutable: list[Path]
) -> None:
    """The guard's four access(2) checks word the refusal as ``file_problem`` does: the
    first refused of the directory, the file, its -wal and its -shm; a -wal or -shm that does
    not exist is no problem."""
    folder = tmp_path / "state"
    path = folder / "fleetd.db"
    db = Database.open(sqlite_url(path))
    db.dispose()  # the last connection closed: no -wal or -shm left
    guard = FileGuard(path, ttl=0)
    assert not Path(f"{path}-wal").exists() and guard.problem() is None
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    subprocess.run(["chattr", "+i", str(wal)], check=True)
    immutable.append(wal)
    assert guard.problem() == f"database file {wal} is read-only or immutable"
    subprocess.run(["chattr", "+i", str(folder)], check=True)
    immutable.append(folder)
    assert guard.problem() == f"state directory {folder} is read-only or immutable"
    assert guard.problem() == file_problem(path)


def test_immutable_files_degrade_storage_without_touching_sqlite(
    tmp_path: Path, immutable: list[Path]
) -> None:
    path = tmp_path / "fleetd.db"
    rs = ResilientStore(sqlite_url(path), StoreConfig(retry_interval=1), node="n1")
    assert rs.open(T0)
    assert rs.append(poll(0.0), now=T0)
    assert rs.db is not None and rs.db.guard is not None
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if name.exists():
            subprocess.run(["chattr", "+i", str(name)], check=True)
            immutable.append(name)
    rs.db.guard.forget()
    assert not rs.append(poll(1.0), now=T0 + 1)  # no SIGBUS: the guard refused first
    health = rs.health()
    assert health.degraded and "read-only or immutable" in str(health.reason)
    with pytest.raises(StoreError), rs.db.begin() as conn:
        conn.exec_driver_sql("SELECT 1")
    for name in immutable:
        subprocess.run(["chattr", "-i", str(name)], check=True)
    rs.db.guard.forget()
    assert rs.append(poll(5.0), now=T0 + 5)
    assert not rs.health().degraded
    rs.close()


def test_an_unusable_state_directory_at_start_runs_on_memory(
    tmp_path: Path, immutable: list[Path]
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["chattr", "+i", str(state)], check=True)
    immutable.append(state)
    rs = ResilientStore(sqlite_url(state / "fleetd.db"), StoreConfig(), node="n1")
    assert not rs.open(T0)
    assert rs.start(T0)
    assert rs.memory_only is not None
    health = rs.health()
    assert health.degraded and str(health.reason).startswith("running without storage")
    assert rs.append(poll(1.0), now=T0 + 1)  # written, in memory
    assert rs.health().degraded  # for the whole run
    assert rs.stats().degraded
    got = rs.range(POWER, start=T0, end=T0 + 10)
    assert [s.value for samples in got.values() for s in samples] == [1.0]
    assert not (state / "fleetd.db").exists()
    rs.close()


def test_a_missing_parent_at_start_runs_on_memory_too(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    rs = ResilientStore(sqlite_url(blocker / "fleetd.db"), StoreConfig(), node="n1")
    assert rs.start(T0)
    assert rs.memory_only is not None
    rs.close()
