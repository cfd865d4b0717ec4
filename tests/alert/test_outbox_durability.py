"""The durable outbox on SQLite and PostgreSQL: outages, restarts and crashes lose nothing and
deliver nothing twice."""

from __future__ import annotations

import io
import random
from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.outbox_store import OutboxStore
from fleetd.clock import FakeClock
from fleetd.store.db import Database
from tests.alert.support import NODE, Recorder, Seen, config, fire, resolve


def cfg(url: str) -> dict[str, Any]:
    return {
        "receivers": [{"name": "hook", "webhook": [{"url": url}]}],
        "route": {
            "receiver": "hook",
            "group_by": ["alertname"],
            "group_wait": "10s",
            "group_interval": "1m",
        },
        "inhibit_rules": [],
        "delivery": {"initial_backoff": "1s", "max_backoff": "30s"},
    }


def dispatcher(url: str, db_url: str, clock: FakeClock) -> tuple[Dispatcher, Database]:
    db = Database.open(db_url)
    d = Dispatcher(
        config(cfg(url)), db, node=NODE, now=clock.now(), rng=random.Random(3), stream=io.StringIO()
    )
    return d, db


class Outage:
    """A receiver that answers 503 while ``down`` and records what it accepted."""

    def __init__(self) -> None:
        self.down = False
        self.accepted: list[Any] = []
        self.recorder = Recorder()
        self.recorder.replies = self._reply

    def _reply(self, seen: Seen) -> tuple[int, str, dict[str, str]]:
        if self.down:
            return 503, "maintenance", {}
        self.accepted.append(seen.body)
        return 200, "", {}


def summary(body: Any) -> list[tuple[str, str, str]]:
    return [(a["labels"]["alertname"], a["labels"]["gpu"], a["status"]) for a in body["alerts"]]


def test_outage_then_recovery_delivers_everything_once_in_order(
    any_db_url: str, clock: FakeClock, httpserver: HTTPServer
) -> None:
    outage = Outage()
    httpserver.expect_request("/hook").respond_with_handler(outage.recorder)
    d, db = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    t0 = clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=0)], t0)
    d.tick(t0 + 10)
    outage.down = True
    # during the outage: another rule fires, the first resolves, a second GPU gets hot
    events = {
        20: [fire("EccErrors", at=t0 + 20, gpu=1)],
        40: [resolve("GpuHot", at=t0 + 40, fired_at=t0, gpu=0)],
        80: [fire("GpuHot", at=t0 + 80, gpu=2)],
    }
    for step in range(11, 600):
        d.submit(events.get(step, []), t0 + step)
        d.tick(t0 + step)
    queued = [e for e in OutboxStore(db).entries() if e.status == "pending"]
    assert len(queued) >= 3
    assert d.status(t0 + 600)["outbox_pending"] == len(queued)
    outage.down = False
    for step in range(600, 700):
        d.tick(t0 + step)

    entries = OutboxStore(db).entries()
    assert {e.status for e in entries} == {"delivered"}
    delivered = [summary(b) for b in outage.accepted]
    expected = [summary(_webhook_body(e.payload)) for e in entries]
    assert delivered == expected  # each entry once, in the order it was queued
    assert delivered[0] == [("GpuHot", "0", "firing")]
    flat = [item for body in delivered for item in body]
    assert ("GpuHot", "0", "resolved") in flat
    assert flat.index(("EccErrors", "1", "firing")) < flat.index(("GpuHot", "0", "resolved"))
    db.dispose()


def _webhook_body(payload: str) -> dict[str, Any]:
    from fleetd.alert.notification import Notification
    from fleetd.alert.webhook import webhook_payload

    return webhook_payload(Notification.from_json(payload))


def test_restart_with_pending_outbox_resumes(
    any_db_url: str, clock: FakeClock, httpserver: HTTPServer
) -> None:
    outage = Outage()
    outage.down = True
    httpserver.expect_request("/hook").respond_with_handler(outage.recorder)
    d1, db1 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    t0 = clock.now()
    d1.submit([fire("GpuHot", at=t0, gpu=g) for g in range(3)], t0)
    d1.submit([fire("EccErrors", at=t0, gpu=5)], t0)
    d1.tick(t0 + 10)
    assert len(OutboxStore(db1).entries()) == 2
    d1.close()
    db1.dispose()  # the process dies with two notifications pending

    outage.down = False
    d2, db2 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    d2.submit([fire("GpuHot", at=t0, gpu=g) for g in range(3)], t0 + 30)  # engine re-reports
    for step in range(30, 400):
        d2.tick(t0 + step)
    assert sorted(len(b["alerts"]) for b in outage.accepted) == [1, 3]
    assert {e.status for e in OutboxStore(db2).entries()} == {"delivered"}
    assert len(outage.accepted) == 2  # the re-reported alerts were known: nothing new
    db2.dispose()


def test_crash_right_after_submit_loses_nothing(
    any_db_url: str, clock: FakeClock, httpserver: HTTPServer
) -> None:
    outage = Outage()
    httpserver.expect_request("/hook").respond_with_handler(outage.recorder)
    d1, db1 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    t0 = clock.now()
    d1.submit([fire("GpuHot", at=t0, gpu=1)], t0)
    db1.dispose()  # no tick ever ran

    d2, db2 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    d2.tick(t0 + 9)
    assert outage.accepted == []  # group_wait still counts from the first submit
    d2.tick(t0 + 10)
    (body,) = outage.accepted
    assert summary(body) == [("GpuHot", "1", "firing")]
    db2.dispose()


def test_interrupted_send_is_resumed(
    any_db_url: str, clock: FakeClock, httpserver: HTTPServer, captured_logs: io.StringIO
) -> None:
    """An attempt recorded as under way when the process died is sent again after restart."""
    outage = Outage()
    httpserver.expect_request("/hook").respond_with_handler(outage.recorder)
    d1, db1 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    t0 = clock.now()
    d1.submit([fire("GpuHot", at=t0, gpu=1)], t0)
    outage.down = True
    d1.tick(t0 + 10)  # flushed into the outbox, first attempt failed
    (entry,) = OutboxStore(db1).entries()
    OutboxStore(db1).mark_sending(entry.id, t0 + 12)  # the next attempt started... and crash
    db1.dispose()

    outage.down = False
    d2, db2 = dispatcher(httpserver.url_for("/hook"), any_db_url, clock)
    d2.tick(t0 + 60)
    assert len(outage.accepted) == 1
    (entry,) = OutboxStore(db2).entries()
    assert entry.status == "delivered" and entry.attempts == 3
    assert "notify_resumed_interrupted_send" in captured_logs.getvalue()
    db2.dispose()


def test_reload_after_fixing_a_receiver_and_after_removing_one(
    sqlite_db: Database, clock: FakeClock, httpserver: HTTPServer
) -> None:
    broken = Recorder((404, "no_service", {}))
    fixed = Recorder((200, "", {}))
    flaky = Recorder((503, "down", {}))
    httpserver.expect_request("/broken").respond_with_handler(broken)
    httpserver.expect_request("/fixed").respond_with_handler(fixed)
    httpserver.expect_request("/flaky").respond_with_handler(flaky)
    stream = io.StringIO()

    def make(*paths: str) -> Any:
        hooks = [{"url": httpserver.url_for(p)} for p in paths]
        return config(
            {
                "receivers": [{"name": "ops", "console": [{}], "webhook": hooks}],
                "route": {"receiver": "ops", "group_wait": "0s", "group_interval": "1m"},
                "inhibit_rules": [],
            }
        )

    d = Dispatcher(make("/broken"), sqlite_db, node=NODE, now=clock.now(), stream=stream)
    t0 = clock.now()
    d.submit([fire("GpuHot", at=t0)], t0)
    d.tick(t0)
    assert len(broken.seen) == 1  # rejected: a configuration error
    printed = len(stream.getvalue().splitlines())

    # the operator fixes the URL and reloads: the receiver learns the current state
    d.reload(make("/fixed"), t0 + 30)
    d.tick(t0 + 30)
    (body,) = fixed.bodies()
    assert "GpuHot" in [a["labels"]["alertname"] for a in body["alerts"]]
    for step in range(31, 200):
        d.tick(t0 + step)
    # the next message reports the self-alert resolved (the receiver works again)
    last = {a["labels"]["alertname"]: a["status"] for a in fixed.bodies()[-1]["alerts"]}
    assert last == {"GpuHot": "firing", "FleetdNotificationsRejected": "resolved"}
    # the console saw GpuHot once, and the self-alert fire and resolve
    lines = stream.getvalue().splitlines()
    assert sum("GpuHot" in line for line in lines) == 1
    assert printed == 1 and any("RESOLVED" in line for line in lines)

    # a second webhook is down with a notification pending, then removed from the config
    d.reload(make("/fixed", "/flaky"), t0 + 200)
    d.tick(t0 + 200)
    assert d.status(t0 + 200)["outbox_pending"] == 1
    d.reload(make("/fixed"), t0 + 210)
    assert d.status(t0 + 210)["outbox_pending"] == 0
    (dropped,) = [e for e in OutboxStore(sqlite_db).entries() if e.integration == "ops/webhook/1"]
    assert dropped.status == "failed" and "removed" in (dropped.last_error or "")
