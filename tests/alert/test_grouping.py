"""Grouping and its timers on a fake clock: group_wait, group_interval, repeat_interval,
send_resolved, and that nothing is notified twice.

The receiver has a webhook (one message per group, the notifications counted here) and a
console (one line per alert that fired or resolved).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.notification import Notification
from fleetd.alert.outbox_store import OutboxStore
from tests.alert.support import Harness, Recorder, config, fire, resolve

CONSOLE: dict[str, Any] = {
    "receivers": [{"name": "ops", "console": [{}], "webhook": [{"url": "http://127.0.0.1:1/"}]}],
    "route": {
        "receiver": "ops",
        "group_by": ["alertname"],
        "group_wait": "30s",
        "group_interval": "5m",
        "repeat_interval": "1h",
    },
    "inhibit_rules": [],
}


@pytest.fixture(autouse=True)
def webhook(httpserver: HTTPServer) -> Recorder:
    recorder = Recorder((200, "", {}))
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    CONSOLE["receivers"][0]["webhook"] = [{"url": httpserver.url_for("/hook")}]
    return recorder


def notifications(h: Harness) -> list[Notification]:
    """The group notifications (the webhook's outbox entries)."""
    entries = OutboxStore(h.db).entries()
    return [Notification.from_json(e.payload) for e in entries if e.kind == "webhook"]


class TestGroupWait:
    def test_first_notification_waits_for_group_wait(self, harness: Harness) -> None:
        """Nothing goes out before group_wait; then one line per firing alert."""
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0)
        d.tick(t0 + 29)
        assert harness.lines() == []
        d.tick(t0 + 30)
        (line,) = harness.lines()
        assert "FIRING" in line and "GpuHot" in line and "gpu=3" in line

    def test_alerts_within_group_wait_share_one_notification(self, harness: Harness) -> None:
        """Eight GPUs firing the same rule within group_wait make one notification."""
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        for gpu in range(8):
            d.submit([fire("GpuHot", at=t0 + gpu, gpu=gpu)], t0 + gpu)
        d.tick(t0 + 30)
        (sent,) = notifications(harness)
        assert sorted(a.label("gpu") for a in sent.alerts) == [str(g) for g in range(8)]
        assert dict(sent.group_labels) == {"alertname": "GpuHot"}
        assert sent.reason == "first_notification"

    def test_alert_resolved_within_group_wait_is_never_notified(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.submit([resolve("GpuHot", at=t0 + 10, fired_at=t0)], t0 + 10)
        for dt in (30, 330, 3600):
            d.tick(t0 + dt)
        assert harness.lines() == []
        assert d.status(t0 + 3600)["alerts"] == {"firing": 0, "resolved": 0}

    def test_different_group_labels_make_different_groups(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0), fire("EccErrors", at=t0)], t0)
        d.tick(t0 + 30)
        groups = sorted(dict(n.group_labels)["alertname"] for n in notifications(harness))
        assert groups == ["EccErrors", "GpuHot"]


class TestGroupIntervalAndRepeat:
    def test_new_alert_in_flushed_group_waits_for_group_interval(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, gpu=0)], t0)
        d.tick(t0 + 30)
        d.submit([fire("GpuHot", at=t0 + 40, gpu=1)], t0 + 40)
        d.tick(t0 + 100)
        d.tick(t0 + 329)
        assert len(notifications(harness)) == 1
        d.tick(t0 + 330)
        second = notifications(harness)[1]
        assert second.reason == "new_alerts_firing"
        assert sorted(a.label("gpu") for a in second.alerts) == ["0", "1"]

    def test_unchanged_group_repeats_after_repeat_interval(self, harness: Harness) -> None:
        """repeat_interval (1h) is checked at group_interval (5m) flushes: 30s + 1h + ≤5m."""
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        for step in range(0, 2 * 3600, 10):
            d.tick(t0 + step)
        sent = notifications(harness)
        assert [n.reason for n in sent] == ["first_notification", "repeat_interval_elapsed"]
        assert sent[1].created_at == t0 + 30 + 12 * 300  # the first flush ≥ 1h after the last

    def test_resubmitted_firing_transition_is_not_notified_again(self, harness: Harness) -> None:
        """The rules engine may re-report a firing alert (restart): the log says it is known."""
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([fire("GpuHot", at=t0)], t0 + 60)
        for step in range(60, 1800, 10):
            d.tick(t0 + step)
        assert len(harness.lines()) == 1

    def test_resolve_is_sent_at_the_next_group_interval(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 60, fired_at=t0)], t0 + 60)
        d.tick(t0 + 329)
        assert len(harness.lines()) == 1
        d.tick(t0 + 330)
        assert "RESOLVED" in harness.lines()[1]
        assert d.status(t0 + 330)["groups"] == 0  # nothing left to do: group retired


class TestSendResolved:
    def test_without_send_resolved_no_resolve_goes_out(self, harness: Harness) -> None:
        cfg = json.loads(json.dumps(CONSOLE))
        cfg["receivers"][0]["console"] = [{"send_resolved": False}]
        cfg["receivers"][0]["webhook"][0]["send_resolved"] = False
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 60, fired_at=t0)], t0 + 60)
        for step in range(60, 4000, 30):
            d.tick(t0 + step)
        assert len(harness.lines()) == 1
        assert d.status(t0 + 4000)["alerts"] == {"firing": 0, "resolved": 0}

    def test_refiring_after_resolve_notifies_again(self, harness: Harness) -> None:
        d = harness.dispatcher(config(CONSOLE))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 60, fired_at=t0)], t0 + 60)
        d.tick(t0 + 330)
        d.submit([fire("GpuHot", at=t0 + 400)], t0 + 400)
        d.tick(t0 + 430)
        states = [line.split()[1] for line in harness.lines()]
        assert states == ["FIRING", "RESOLVED", "FIRING"]
