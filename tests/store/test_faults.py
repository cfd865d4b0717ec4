"""Storage faults: a database locked by another writer, a full disk, a corrupt file.

In each, ResilientStore never raises into the poll loop: it counts the error, reports
storage as degraded with the reason, keeps the polls in memory, retries with back-off, and
writes everything once the database answers again. A corrupt file is moved aside, never
deleted, and a fresh database is started.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from store_helpers import T0, gpu
from structlog.testing import capture_logs

from fleetd.model import Reading, SeriesKey
from fleetd.store.config import StoreConfig
from fleetd.store.db import sqlite_url
from fleetd.store.hybrid import HybridQuery
from fleetd.store.memory import MemoryWindow
from fleetd.store.resilient import ResilientStore, move_aside

POWER = "fleetd_gpu_power_watts"
K0 = SeriesKey(POWER, gpu(0))
ROOT = Path(__file__).resolve().parents[2]


def poll(t: float) -> list[Reading]:
    return [Reading(POWER, gpu(g), 500.0 + t + g, T0 + t) for g in range(2)]


def stored_times(rs: ResilientStore) -> list[float]:
    return [s.ts - T0 for s in rs.range(POWER, start=T0 - 1, end=T0 + 10**6).get(K0, [])]


def test_locked_database_degrades_keeps_polls_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    config = StoreConfig(busy_timeout=0.05, retry_interval=5, retry_interval_max=20)
    rs = ResilientStore(sqlite_url(path), config, node="n1")
    assert rs.open(T0)
    mem = MemoryWindow(retention=3600)
    hybrid = HybridQuery(mem, rs)
    for t in (0.0,):
        mem.append(poll(t))
        assert rs.append(poll(t), now=T0 + t)

    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    try:
        with capture_logs() as logs:
            mem.append(poll(1))
            assert not rs.append(poll(1), now=T0 + 1)
        health = rs.health()
        assert health.degraded and health.since == T0 + 1
        assert health.reason == "database locked by another writer"
        assert [e["event"] for e in logs if e["event"].startswith("store_")] == ["store_degraded"]
        assert rs.stats().errors["write"] == 1 and rs.stats().degraded

        # backing off: no attempt (and no stall) before the retry time
        mem.append(poll(2))
        assert not rs.append(poll(2), now=T0 + 2)
        assert rs.stats().errors["write"] == 1 and rs.health().backlog_polls == 2
        # rules keep evaluating: memory answers, reads still work (WAL)
        assert hybrid.window("count", POWER, window=60, now=T0 + 2) == {
            K0: 3.0,
            SeriesKey(POWER, gpu(1)): 3.0,
        }
        # the retry at T0+6 fails again: the back-off doubles
        assert not rs.append(poll(6), now=T0 + 6)
        assert rs.stats().errors["write"] == 2
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert not rs.append(poll(8), now=T0 + 8)  # next retry is at T0 + 6 + 10
    with capture_logs() as logs:
        assert rs.append(poll(16), now=T0 + 16)
    assert [e["event"] for e in logs if e["event"].startswith("store_")] == ["store_recovered"]
    assert not rs.health().degraded and rs.health().backlog_polls == 0
    assert stored_times(rs) == [0, 1, 2, 6, 8, 16]
    assert rs.stats().samples_written == 12
    rs.close()


def test_corrupt_file_is_moved_aside_and_a_fresh_one_started(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    garbage = b"this is not a database, it is a bad sector " * 200
    path.write_bytes(garbage)
    rs = ResilientStore(sqlite_url(path), StoreConfig(), node="n1")
    with capture_logs() as logs:
        assert rs.open(T0)
    moved = tmp_path / "fleetd.db.corrupt-20260101T000000Z"
    assert moved.read_bytes() == garbage  # kept, byte for byte
    [line] = [e for e in logs if e["event"] == "store_corrupt_moved_aside"]
    assert line["moved_to"] == str(moved) and line["log_level"] == "error"
    assert rs.stats().errors["corrupt"] == 1
    assert rs.append(poll(0), now=T0)
    assert stored_times(rs) == [0]
    [event] = rs.query_events(kinds=["storage"])
    assert str(moved) in event.message
    rs.close()


def test_corruption_found_while_running(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    rs = ResilientStore(sqlite_url(path), StoreConfig(), node="n1")
    assert rs.open(T0)
    for t in range(5):
        assert rs.append(poll(float(t)), now=T0 + t)
    rs.close()
    with path.open("r+b") as f:  # keep the header, wreck every page after the first
        f.seek(4096)
        f.write(os.urandom(path.stat().st_size - 4096))
    rs = ResilientStore(sqlite_url(path), StoreConfig(), node="n1")
    rs.open(T0 + 10)
    for t in (10.0, 11.0):
        rs.append(poll(t), now=T0 + t)
    assert rs.stats().errors["corrupt"] == 1
    assert list(tmp_path.glob("fleetd.db.corrupt-*"))
    assert stored_times(rs) == [10, 11]
    rs.close()


def test_move_aside_never_overwrites(tmp_path: Path) -> None:
    for _ in range(2):
        (tmp_path / "x.db").write_bytes(b"x")
        (tmp_path / "x.db-wal").write_bytes(b"w")
        move_aside(tmp_path / "x.db", T0)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "x.db.corrupt-20260101T000000Z",
        "x.db.corrupt-20260101T000000Z-2",
        "x.db.corrupt-20260101T000000Z-2-wal",
        "x.db.corrupt-20260101T000000Z-wal",
    ]


def test_unreachable_database_is_degraded_not_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    rs = ResilientStore(sqlite_url(blocker / "fleetd.db"), StoreConfig(), node="n1")
    assert not rs.open(T0)
    assert rs.health().degraded and rs.stats().errors["open"] == 1
    assert not rs.append(poll(0), now=T0)
    assert rs.append_event("alert", now=T0, message="kept for later") is None
    assert rs.maintenance(T0) is None


DISK_FULL_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sqlite3, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not kills
    from fleetd.model import Reading, make_labels
    from fleetd.store.config import StoreConfig
    from fleetd.store.db import sqlite_url
    from fleetd.store.memory import MemoryWindow
    from fleetd.store.resilient import ResilientStore

    T0 = 1_767_225_600.0
    path = sys.argv[1]
    labels = [make_labels({"gpu": g, "n": n}) for g in range(8) for n in range(64)]
    def poll(i):
        return [Reading("fleetd_bench", l, float(os.urandom(1)[0]) + i, T0 + i) for l in labels]
    rs = ResilientStore(sqlite_url(path), StoreConfig(retry_interval=1), node="n")
    assert rs.open(T0)
    mem = MemoryWindow(retention=10**6)
    ok = []
    files = lambda: max(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (files() + 256 * 1024, hard))
    i = 0
    while len(ok) < 400 and (not ok or ok[-1] or len([x for x in ok if not x]) < 5):
        p = poll(i)
        mem.append(p)
        ok.append(rs.append(p, now=T0 + i))
        i += 1
    health = rs.health()
    stats = rs.stats()
    counted = mem.window("count", "fleetd_bench", window=10**6, now=T0 + i)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    recovered_at = None
    while rs.health().degraded or rs.health().backlog_polls:
        p = poll(i)
        mem.append(p)
        if rs.append(p, now=T0 + i + 10) and recovered_at is None:
            recovered_at = i
        i += 1
    rs.close()
    conn = sqlite3.connect(path)
    check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    rs = ResilientStore(sqlite_url(path), StoreConfig(), node="n")
    assert rs.open(T0 + i + 10)
    stored = rs.window("count", "fleetd_bench", window=10**6, now=T0 + i + 10)
    print(json.dumps({
        "first_failure": ok.index(False),
        "degraded": health.degraded,
        "reason": health.reason,
        "write_errors": stats.errors["write"],
        "memory_series_counted": len(counted),
        "integrity": check,
        "polls": i,
        "stored_min": min(stored.values()),
        "stored_max": max(stored.values()),
        "series": len(stored),
    }))
    """
)


def test_disk_full_keeps_polling_from_memory_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fleetd.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", DISK_FULL_CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first_failure"] > 0  # it wrote until the file system said no
    assert result["degraded"] and result["write_errors"] >= 1
    assert result["reason"] in ("disk full", "I/O error (disk full or failing)")
    assert result["memory_series_counted"] == 512  # rules kept their data meanwhile
    assert result["integrity"] == "ok"
    # every poll, including those taken while the disk was full, reached the database
    assert result["series"] == 512
    assert result["stored_min"] == result["stored_max"] == result["polls"]
