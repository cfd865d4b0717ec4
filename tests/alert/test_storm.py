"""A storm: 500 alerts within seconds collapse into a few grouped notifications, and every
receiver stays inside its rate limit (fake clock, real loopback HTTP)."""

from __future__ import annotations

from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.alert.outbox_store import OutboxStore
from fleetd.clock import FakeClock
from tests.alert.support import Harness, Recorder, Seen, config, fire

RULES = ["GpuHot", "HbmHot", "EccErrors", "PcieReplays", "XgmiLinkDown"]
GPUS = 100  # 5 rules × 100 label sets = 500 alerts


class Timed(Recorder):
    """Records the fake-clock time of every request."""

    def __init__(self, clock: FakeClock, reply: tuple[int, str, dict[str, str]]) -> None:
        super().__init__(reply)
        self.times: list[float] = []
        self.replies = self._stamp
        self._clock = clock

    def _stamp(self, seen: Seen) -> None:
        self.times.append(self._clock.now())


def max_in_window(times: list[float], window: float) -> int:
    return max(sum(1 for t in times if start <= t < start + window) for start in times)


def test_storm_of_500_alerts(harness: Harness, httpserver: HTTPServer) -> None:
    clock = harness.clock
    hook = Timed(clock, (200, "", {}))
    slack = Timed(clock, (200, "ok", {}))
    pd = Timed(clock, (202, '{"status":"success"}', {}))
    httpserver.expect_request("/hook").respond_with_handler(hook)
    httpserver.expect_request("/slack").respond_with_handler(slack)
    httpserver.expect_request("/pd").respond_with_handler(pd)
    cfg: dict[str, Any] = {
        "receivers": [
            {
                "name": "team",
                "webhook": [{"url": httpserver.url_for("/hook")}],
                "slack": [{"webhook_url": httpserver.url_for("/slack")}],
            },
            {
                "name": "pager",
                "pagerduty": [{"routing_key": "k" * 32, "url": httpserver.url_for("/pd")}],
            },
        ],
        "route": {
            "receiver": "team",
            "group_by": ["alertname"],
            "group_wait": "30s",
            "routes": [
                {"matchers": ['alertname="GpuHot"'], "receiver": "pager", "continue": True},
                {"receiver": "team"},
            ],
        },
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = clock.now()
    # 500 transitions within 5 seconds, arriving in batches as the rules engine would send them
    for second in range(5):
        batch = [
            fire(rule, at=t0 + second, gpu=gpu)
            for rule in RULES
            for gpu in range(second * GPUS // 5, (second + 1) * GPUS // 5)
        ]
        d.submit(batch, t0 + second)
        clock.advance(1)
        d.tick(clock.now())
    while clock.now() < t0 + 400:
        clock.advance(1)
        d.tick(clock.now())

    # the team receiver: one message per alert group (5), each listing its 100 alerts
    assert len(hook.seen) == len(RULES)
    assert sorted(len(b["alerts"]) for b in hook.bodies()) == [GPUS] * len(RULES)
    assert len(slack.seen) == len(RULES)
    assert max_in_window(slack.times, 1.0) <= 3  # Slack: ~1 message/s, short bursts
    # PagerDuty pages for one rule: one event per alert (a dedup key per node/GPU/rule), at
    # most 20 at once and 1.5/s after that, under "about 120 events a minute per key"
    assert len(pd.seen) == GPUS
    assert len({b["dedup_key"] for b in pd.bodies()}) == GPUS
    assert max_in_window(pd.times, 60.0) <= 120
    assert max_in_window(pd.times, 1.0) <= 20
    assert max(pd.times) - min(pd.times) >= (GPUS - 20) / 1.5 - 1
    assert {e.status for e in OutboxStore(harness.db).entries()} == {"delivered"}
    metrics = {(r.metric, dict(r.labels)["integration"]): r.value for r in d.metrics(t0 + 400)}
    assert metrics[("fleetd_alert_notifications_sent_total", "pagerduty/0")] == GPUS
    assert metrics[("fleetd_alert_outbox_pending", "pagerduty/0")] == 0
