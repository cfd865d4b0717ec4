"""Pages before chatter, and one 429 per burst at most: the outbox's lanes and a receiver's
rate limit, against loopback stand-ins that enforce a vendor's limit on the fake clock."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.entries import INFORMATIONAL, URGENT, priority
from fleetd.alert.notification import AlertRecord, ChangeEvent, Notification
from fleetd.alert.outbox_store import OutboxStore
from fleetd.alert.retry import MIN_PACE, RECOVERY_SECONDS, TokenBucket
from fleetd.clock import FakeClock
from fleetd.model import Severity, make_labels
from tests.alert.support import Harness, Recorder, Seen, config, fire

KEY = "R0UT1NGKEY0123456789abcdefABCDEF"


class SlidingLimit(Recorder):
    """A receiver that accepts at most ``limit`` requests in any ``window`` seconds of the
    fake clock and answers the rest 429 with the Retry-After that frees a slot."""

    def __init__(
        self, clock: FakeClock, limit: int, window: float, ok: tuple[int, str, dict[str, str]]
    ) -> None:
        super().__init__(ok)
        self.clock, self.limit, self.window, self.ok = clock, limit, window, ok
        self.accepted: list[tuple[float, Seen]] = []
        self.limited: list[tuple[float, Seen]] = []
        self.retry_after: list[int] = []
        self._guard = threading.Lock()
        self.replies = self._limit

    def _limit(self, seen: Seen) -> tuple[int, str, dict[str, str]]:
        now = self.clock.now()
        with self._guard:
            recent = [t for t, _ in self.accepted if now - t < self.window]
            if len(recent) >= self.limit:
                self.limited.append((now, seen))
                wait = max(1, math.ceil(min(recent) + self.window - now))
                self.retry_after.append(wait)
                return 429, "rate limited", {"Retry-After": str(wait)}
            self.accepted.append((now, seen))
            return self.ok


def pd_cfg(httpserver: HTTPServer) -> dict[str, Any]:
    return {
        "receivers": [
            {
                "name": "oncall",
                "pagerduty": [
                    {
                        "routing_key": KEY,
                        "url": httpserver.url_for("/v2/enqueue"),
                        "change_url": httpserver.url_for("/v2/change/enqueue"),
                    }
                ],
            }
        ],
        "route": {"receiver": "oncall", "group_by": ["alertname", "gpu"], "group_wait": "10s"},
        "inhibit_rules": [],
    }


def test_a_page_is_the_first_request_after_60_queued_change_events(
    harness: Harness, httpserver: HTTPServer
) -> None:
    """PagerDuty stand-in at 20 requests a minute; a remediation run queued 60 change events;
    the uncorrectable-ECC page must not wait behind them."""
    clock = harness.clock
    pd = SlidingLimit(clock, limit=20, window=60.0, ok=(202, '{"status":"success"}', {}))
    httpserver.expect_request("/v2/enqueue").respond_with_handler(pd)
    httpserver.expect_request("/v2/change/enqueue").respond_with_handler(pd)
    d = harness.dispatcher(config(pd_cfg(httpserver)))
    t0 = clock.now()
    for step in range(60):
        d.submit_change(ChangeEvent(f"step {step}", at=t0, id=f"run-1/{step}"), t0)
    d.tick(t0)
    clock.advance(1)
    d.tick(clock.now())  # the 21st request of the minute: 429, Retry-After 59
    assert (len(pd.accepted), len(pd.limited)) == (20, 1)
    clock.advance(1)
    d.submit([fire("GpuEccUncorrectableError", at=t0 + 2, gpu=3)], t0 + 2)
    queued_at = None
    while clock.now() < t0 + 400:
        clock.advance(0.5)
        d.tick(clock.now())
        if queued_at is None and any(
            e.action == "notify" for e in OutboxStore(harness.db).entries()
        ):
            queued_at = clock.now()
    assert queued_at == t0 + 12  # group_wait
    after = [(t, s) for t, s in pd.accepted + pd.limited if t >= queued_at]
    first_time, first = min(after, key=lambda item: item[0])
    assert first.path == "/v2/enqueue" and first.body["event_action"] == "trigger"
    assert first_time == t0 + 60  # the moment the receiver's Retry-After allows
    # a 429 pauses everything until its Retry-After: one 429 per minute of the receiver's
    # limit, never a series of them (61 events at 20 a minute: three more windows)
    assert len(pd.limited) <= 4
    for (t, _), wait in zip(pd.limited, pd.retry_after, strict=True):
        assert not [s for u, s in pd.accepted + pd.limited if t < u < t + wait]
    changes = [s.body["payload"]["summary"] for _, s in pd.accepted if "change" in s.path]
    assert changes == [f"step {n}" for n in range(60)]  # the change lane kept its order


class OnePerSecond(Recorder):
    """Slack's incoming webhook: 429 (Retry-After: 1) for a message within 1 s of the last."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__((200, "ok", {}))
        self.clock = clock
        self.last: float | None = None
        self.statuses: list[int] = []
        self.replies = self._limit

    def _limit(self, seen: Seen) -> tuple[int, str, dict[str, str]]:
        now = self.clock.now()
        if self.last is not None and now - self.last < 1.0:
            self.statuses.append(429)
            return 429, "rate_limited", {"Retry-After": "1"}
        self.last = now
        self.statuses.append(200)
        return 200, "ok", {}


@pytest.mark.parametrize("rate_limit", [None, {"per_second": 1, "burst": 5}])
def test_a_burst_of_20_messages_meets_at_most_one_429(
    harness: Harness, httpserver: HTTPServer, rate_limit: dict[str, Any] | None
) -> None:
    """The default bucket stays inside Slack's 1/s; a bucket configured for bursts meets one
    429, after which the whole integration waits for Retry-After and resumes at the rate."""
    clock = harness.clock
    slack = OnePerSecond(clock)
    httpserver.expect_request("/slack").respond_with_handler(slack)
    integration: dict[str, Any] = {"webhook_url": httpserver.url_for("/slack")}
    if rate_limit is not None:
        integration["rate_limit"] = rate_limit
    cfg = {
        "receivers": [{"name": "chat", "slack": [integration]}],
        "route": {"receiver": "chat"},
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = clock.now()
    for n in range(20):
        d.submit_change(ChangeEvent(f"GPU 3 step {n}", at=t0), t0)
    while clock.now() < t0 + 40:
        d.tick(clock.now())
        clock.advance(0.25)
    assert slack.statuses.count(200) == 20
    assert slack.statuses.count(429) == (0 if rate_limit is None else 1)
    texts = [b["text"] for b, status in zip(slack.bodies(), slack.statuses, strict=True)]
    delivered = [t for t, status in zip(texts, slack.statuses, strict=True) if status == 200]
    assert delivered == [f"node7: GPU 3 step {n}" for n in range(20)]


def test_a_429_pause_survives_a_restart(harness: Harness, httpserver: HTTPServer) -> None:
    recorder = Recorder()
    recorder.script = [(429, "slow down", {"Retry-After": "120"})]
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    cfg = {
        "receivers": [{"name": "hook", "webhook": [{"url": httpserver.url_for("/hook")}]}],
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "0s"},
        "inhibit_rules": [],
    }
    d1 = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d1.submit([fire("GpuHot", at=t0)], t0)
    d1.tick(t0)
    d1.close()
    d2 = harness.dispatcher(config(cfg))  # the process restarted
    d2.submit([fire("GpuEccUncorrectableError", at=t0 + 5)], t0 + 5)  # a new page meanwhile
    for step in range(5, 120):
        d2.tick(t0 + step)
    assert len(recorder.seen) == 1
    d2.tick(t0 + 120)
    d2.tick(t0 + 121)
    assert len(recorder.seen) == 3
    assert {e.status for e in OutboxStore(harness.db).entries()} == {"delivered"}


def _record(severity: str, status: str = "firing") -> AlertRecord:
    return AlertRecord(
        fingerprint=severity,
        rule="R",
        status="firing" if status == "firing" else "resolved",
        severity=severity,
        labels=make_labels({"alertname": "R"}),
    )


@pytest.mark.parametrize(
    ("action", "alerts", "lane"),
    [
        ("notify", [_record("critical")], URGENT),
        ("notify", [_record("warning", "resolved")], URGENT),
        ("acknowledge", [_record("critical")], URGENT),
        ("notify", [_record("info"), _record("warning")], URGENT),
        ("notify", [_record("info")], INFORMATIONAL),
        ("notify", [_record("info", "resolved")], INFORMATIONAL),
        ("update", [_record("critical")], INFORMATIONAL),
        ("change", [], INFORMATIONAL),
    ],
)
def test_lanes(action: Any, alerts: list[AlertRecord], lane: int) -> None:
    notification = Notification(
        receiver="r",
        integration="r/x/0",
        action=action,
        status="firing",
        node="n",
        created_at=0.0,
        alerts=tuple(alerts),
        change=ChangeEvent("s", at=0.0) if action == "change" else None,
    )
    assert priority(notification) == lane


def test_resolves_and_acknowledgements_overtake_change_events(
    harness: Harness, httpserver: HTTPServer
) -> None:
    seen = Recorder((202, '{"status":"success"}', {}))
    httpserver.expect_request("/v2/enqueue").respond_with_handler(seen)
    httpserver.expect_request("/v2/change/enqueue").respond_with_handler(seen)
    cfg = pd_cfg(httpserver)
    cfg["receivers"][0]["pagerduty"][0]["rate_limit"] = {"per_second": 1, "burst": 1}
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, severity=Severity.WARNING)], t0)
    d.tick(t0 + 10)
    (fp,) = [a.alert.fingerprint for a in d.alerts(t0 + 10)]
    for step in range(5):
        d.submit_change(ChangeEvent(f"step {step}", at=t0 + 10), t0 + 10)
    d.acknowledge(fp, author="alice", comment="mine", now=t0 + 10)
    for step in range(11, 20):
        d.tick(t0 + step)
    actions = [b.get("event_action", "change") for b in seen.bodies()]
    assert actions == ["trigger", "acknowledge", *["change"] * 5]


def test_a_429_empties_the_bucket_and_halves_its_pace_for_a_while() -> None:
    bucket = TokenBucket(rate=2.0, burst=10)
    assert bucket.available(100.0) == 10
    bucket.hold(130.0)  # Retry-After: 30
    assert bucket.available(129.9) == 0 and not bucket.take(129.9)
    assert bucket.take(130.0)  # one at the end of the pause...
    assert not bucket.take(130.4)  # ...then half the rate: the next after 1 s, not 0.5 s
    assert bucket.take(131.0)
    assert bucket.pace > 0.5
    bucket.available(131.0 + RECOVERY_SECONDS)
    assert bucket.pace == 1.0  # recovered
    for _ in range(10):  # repeated 429s slow it down further, never to a stop
        bucket.hold(200.0)
    assert bucket.pace == MIN_PACE > 0
