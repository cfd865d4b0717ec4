"""The outbox's memory lane: while the database cannot be written, notifications still leave,
in their lanes, and once it can, everything is written back with its state: none is lost and
none is sent twice."""

from __future__ import annotations

import io
import random
import sqlite3
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.memlane import MemoryOutbox
from fleetd.alert.notification import ChangeEvent, Notification
from fleetd.alert.outbox_store import INFORMATIONAL, URGENT, NewEntry, OutboxStore
from fleetd.clock import FakeClock
from fleetd.store.db import Database, sqlite_url
from tests.alert.support import NODE, Recorder, config, fire, resolve


def cfg(url: str) -> dict[str, Any]:
    return {
        "receivers": [{"name": "hook", "webhook": [{"url": url, "send_changes": True}]}],
        "route": {
            "receiver": "hook",
            "group_by": ["alertname", "gpu"],
            "group_wait": "0s",
            "group_interval": "1m",
        },
        "inhibit_rules": [],
        "delivery": {"initial_backoff": "1s", "max_backoff": "5s"},
    }


def build(tmp_path: Path, url: str, clock: FakeClock) -> tuple[Dispatcher, Database, Path]:
    path = tmp_path / "fleetd.db"
    db = Database.open(sqlite_url(path), busy_timeout=0.2)
    d = Dispatcher(
        config(cfg(url)), db, node=NODE, now=clock.now(), rng=random.Random(1), stream=io.StringIO()
    )
    return d, db, path


def hold_lock(path: Path) -> sqlite3.Connection:
    """Another process's writer: BEGIN EXCLUSIVE from a second connection."""
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    other.execute("BEGIN EXCLUSIVE")
    return other


def seen(recorder: Recorder) -> list[tuple[str, str, str]]:
    out = []
    for s in recorder.seen:
        body = s.body
        if body.get("version") == "fleetd-change-1":
            out.append(("change", body["summary"], ""))
            continue
        for a in body["alerts"]:
            out.append((a["labels"]["alertname"], a["labels"]["gpu"], a["status"]))
    return out


def change(n: int, at: float) -> ChangeEvent:
    return ChangeEvent(summary=f"step {n}", at=at, id=f"run-1-step-{n}", thread="run-1")


def test_lock_by_another_process_delivers_from_memory_then_reconciles_once(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer
) -> None:
    recorder = Recorder()
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    d, db, path = build(tmp_path, httpserver.url_for("/hook"), clock)
    t0 = clock.now()
    other = hold_lock(path)
    try:
        d.submit([fire("GpuHot", at=t0, gpu=0, severity="critical")], t0)  # never raises
        assert d.offline
        d.tick(t0 + 1)
        assert seen(recorder) == [("GpuHot", "0", "firing")]  # during the lock
        d.submit([resolve("GpuHot", at=t0 + 2, fired_at=t0, gpu=0, severity="critical")], t0 + 2)
        for step in range(3, 70):
            d.tick(t0 + step)
        assert seen(recorder)[-1] == ("GpuHot", "0", "resolved")
        assert d.offline
    finally:
        other.rollback()
        other.close()
    for step in range(70, 200):
        d.tick(t0 + step)
    assert not d.offline
    assert seen(recorder) == [("GpuHot", "0", "firing"), ("GpuHot", "0", "resolved")]
    stored = OutboxStore(db).entries()
    assert [e.status for e in stored] == ["delivered", "delivered"]  # written as delivered
    ids = [Notification.from_json(e.payload).id for e in stored]
    assert len(set(ids)) == 2 and all(ids)  # each keeps the id it was sent with
    # and the durable outbox carries on after the switch
    d.submit([fire("EccErrors", at=t0 + 300, gpu=1, severity="critical")], t0 + 300)
    d.tick(t0 + 300)
    assert seen(recorder)[-1] == ("EccErrors", "1", "firing")
    assert [e.status for e in OutboxStore(db).entries()] == ["delivered"] * 3
    db.dispose()


def test_undelivered_memory_entries_are_written_pending_and_sent_once(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer
) -> None:
    recorder = Recorder()
    down = {"now": True}

    def reply(s: Any) -> tuple[int, str, dict[str, str]]:
        return (503, "down", {}) if down["now"] else (200, "", {})

    recorder.replies = reply
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    d, db, path = build(tmp_path, httpserver.url_for("/hook"), clock)
    t0 = clock.now()
    other = hold_lock(path)
    try:
        d.submit([fire("GpuHot", at=t0, gpu=0, severity="critical")], t0)
        d.tick(t0 + 1)  # the receiver is down too: the memory entry waits for a retry
    finally:
        other.rollback()
        other.close()
    d.tick(t0 + 3)  # storage is back: written back as pending, with its attempts
    assert not d.offline
    (entry,) = OutboxStore(db).entries()
    assert entry.status == "pending" and entry.attempts >= 1
    down["now"] = False
    for step in range(4, 40):
        d.tick(t0 + step)
    assert [e.status for e in OutboxStore(db).entries()] == ["delivered"]
    # every request carried the one notification; after the first 200 nothing more came
    assert set(seen(recorder)) == {("GpuHot", "0", "firing")}
    calls = len(recorder.seen)
    for step in range(40, 100):
        d.tick(t0 + step)
    assert len(recorder.seen) == calls
    db.dispose()


def test_pages_go_before_change_events_in_the_memory_lane(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer
) -> None:
    recorder = Recorder()
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    d, db, path = build(tmp_path, httpserver.url_for("/hook"), clock)
    t0 = clock.now()
    other = hold_lock(path)
    try:
        for n in range(3):
            d.submit_change(change(n, t0), t0)
        assert d.submit_change(change(0, t0), t0) == 0  # an event id is queued once
        d.submit([fire("GpuHot", at=t0, gpu=0, severity="critical")], t0)
        d.tick(t0 + 1)
    finally:
        other.rollback()
        other.close()
    got = seen(recorder)
    assert got[0] == ("GpuHot", "0", "firing")
    assert [g[1] for g in got[1:]] == ["step 0", "step 1", "step 2"]
    for step in range(2, 10):
        d.tick(t0 + step)
    assert len(recorder.seen) == 4
    assert {e.status for e in OutboxStore(db).entries()} == {"delivered"}
    db.dispose()


def entry(n: int, priority: int = URGENT, dedup: str | None = None) -> NewEntry:
    return NewEntry("i", "r", "webhook", "notify", f"g{n}", f"p{n}", dedup, priority)


def test_memory_outbox_orders_by_lane_and_bounds_itself() -> None:
    box = MemoryOutbox(limit=3)
    box.add([entry(1, INFORMATIONAL), entry(2), entry(3, INFORMATIONAL)], 0.0)
    assert [e.payload for e in box.pending("i", 10)] == ["p2", "p1", "p3"]
    first = box.pending("i", 1)[0]
    box.mark_sending(first.id, 1.0)
    box.mark_delivered(None, first.id, 1.0)
    box.add([entry(4)], 2.0)  # full: the delivered entry goes first
    assert [e.payload for e in box.entries()] == ["p1", "p3", "p4"]
    assert box.dropped == 0
    box.add([entry(5)], 3.0)  # then the oldest informational one
    assert [e.payload for e in box.entries()] == ["p3", "p4", "p5"]
    assert box.dropped == 1
    box.mark_retry(box.pending("i", 1)[0].id, 60.0, "slow down", 429)
    assert box.rate_limited_until("i") == 60.0
    assert box.add([entry(6, dedup="x"), entry(7, dedup="x")], 4.0)[0].dedup_id == "x"
    assert len(box) == 3
    taken = box.take()
    assert len(box) == 0
    box.put_back(taken)
    assert [e.id for e in box.entries()] == [e.id for e in taken]
