"""Retry classification per status code for every HTTP notifier, and the dispatcher's retry
policy: capped exponential backoff with jitter, Retry-After, configuration errors, giving up.
"""

from __future__ import annotations

import io
import json
import random
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from pytest_httpserver import HTTPServer

from fleetd.alert.alertmanager import AlertmanagerNotifier
from fleetd.alert.base import Notifier, parse_retry_after
from fleetd.alert.config import (
    AlertmanagerConfig,
    PagerDutyConfig,
    SlackConfig,
    WebhookConfig,
)
from fleetd.alert.dispatch import SELF_ALERT
from fleetd.alert.notification import AlertRecord, Notification
from fleetd.alert.outbox_store import OutboxStore
from fleetd.alert.pagerduty import PagerDutyNotifier
from fleetd.alert.retry import TokenBucket, backoff_delay
from fleetd.alert.slack import SlackNotifier
from fleetd.alert.webhook import WebhookNotifier
from fleetd.errors import NotifyError
from fleetd.model import make_labels
from tests.alert.support import Harness, Recorder, config, fire

# status → may a retry help?  (5xx, 429 and 408 yes; every other 4xx is a permanent error)
RETRY_TABLE = {
    400: False,
    401: False,
    403: False,
    404: False,
    408: True,
    410: False,
    413: False,
    422: False,
    429: True,
    500: True,
    502: True,
    503: True,
    504: True,
}

ALERT = AlertRecord(
    fingerprint="0123456789abcdef",
    rule="GpuHot",
    status="firing",
    severity="critical",
    labels=make_labels({"alertname": "GpuHot", "gpu": "3", "severity": "critical"}),
    annotations=make_labels({"summary": "hot"}),
    value=101.0,
    starts_at=1_767_225_600.0,
    received_at=1_767_225_600.0,
)
NOTIFICATION = Notification(
    receiver="r",
    integration="r/x/0",
    action="notify",
    status="firing",
    node="node7",
    created_at=1_767_225_600.0,
    group_key="{}:{}",
    alerts=(ALERT,),
)

NotifierFactory = Callable[[str, requests.Session], Notifier]

NOTIFIERS: dict[str, NotifierFactory] = {
    "pagerduty": lambda url, s: PagerDutyNotifier(
        PagerDutyConfig(routing_key="k" * 32, url=url), s, source="node7"
    ),
    "slack": lambda url, s: SlackNotifier(SlackConfig(webhook_url=url), s),
    "webhook": lambda url, s: WebhookNotifier(WebhookConfig(url=url), s),
    "alertmanager": lambda url, s: AlertmanagerNotifier(
        AlertmanagerConfig(url=url.removesuffix("/api/v2/alerts")), s
    ),
}


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.mark.parametrize("kind", sorted(NOTIFIERS))
def test_retry_classification_per_status(
    kind: str, httpserver: HTTPServer, session: requests.Session
) -> None:
    """Every notifier sorts every status code the same way (Alertmanager's RetryTests)."""
    path = "/api/v2/alerts"
    notifier = NOTIFIERS[kind](httpserver.url_for(path), session)
    for status, retryable in RETRY_TABLE.items():
        httpserver.clear()
        httpserver.expect_request(path).respond_with_data("nope", status=status)
        with pytest.raises(NotifyError) as caught:
            notifier.send(NOTIFICATION)
        assert caught.value.retryable is retryable, (kind, status)
    for status in (200, 202):
        httpserver.clear()
        httpserver.expect_request(path).respond_with_data("ok", status=status)
        if kind == "slack" and status != 200:
            continue  # an incoming webhook answers exactly 200 "ok"
        notifier.send(NOTIFICATION)


@pytest.mark.parametrize("kind", sorted(NOTIFIERS))
def test_unreachable_and_silent_servers_are_retryable(kind: str, session: requests.Session) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    notifier = NOTIFIERS[kind](f"http://127.0.0.1:{port}/api/v2/alerts", session)
    with pytest.raises(NotifyError) as refused:
        notifier.send(NOTIFICATION)
    assert refused.value.retryable

    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        notifier = _with_timeout(kind, f"http://127.0.0.1:{port}/api/v2/alerts", session)
        with pytest.raises(NotifyError) as timed_out:
            notifier.send(NOTIFICATION)
    assert timed_out.value.retryable
    assert "no answer within 0.2s" in str(timed_out.value)


def _with_timeout(kind: str, url: str, session: requests.Session) -> Notifier:
    if kind == "pagerduty":
        return PagerDutyNotifier(
            PagerDutyConfig(routing_key="k" * 32, url=url, timeout=0.2), session, source="n"
        )
    if kind == "slack":
        return SlackNotifier(SlackConfig(webhook_url=url, timeout=0.2), session)
    if kind == "webhook":
        return WebhookNotifier(WebhookConfig(url=url, timeout=0.2), session)
    base = url.removesuffix("/api/v2/alerts")
    return AlertmanagerNotifier(AlertmanagerConfig(url=base, timeout=0.2), session)


def test_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after({"Retry-After": "120"}) == 120.0
    assert (
        parse_retry_after(
            {
                "Retry-After": "Wed, 21 Oct 2026 07:28:30 GMT",
                "Date": "Wed, 21 Oct 2026 07:28:00 GMT",
            }
        )
        == 30.0
    )
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_capped_exponential_with_jitter() -> None:
    rng = random.Random(1)
    delays = [backoff_delay(n, initial=1.0, cap=60.0, rng=rng) for n in range(1, 12)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(60.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= 60.0
    assert len({round(d, 6) for d in delays[-4:]}) == 4  # jitter: capped delays still differ


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=1.0, burst=3)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.take(100.5) is False
    assert bucket.take(101.0) is True
    assert bucket.available(110.0) == 3


# ------------------------------------------------------------------------ dispatcher policy
def hook_config(url: str, **delivery: Any) -> dict[str, Any]:
    return {
        "receivers": [
            {"name": "hook", "webhook": [{"url": url}]},
            {"name": "console", "console": [{}]},
        ],
        "route": {
            "receiver": "hook",
            "group_by": ["alertname"],
            "group_wait": "0s",
            "routes": [{"matchers": [f'alertname="{SELF_ALERT}"'], "receiver": "console"}],
        },
        "inhibit_rules": [],
        "delivery": {"initial_backoff": "2s", "max_backoff": "60s", **delivery},
    }


class TestDispatcherRetries:
    def test_backoff_schedule_uses_the_injected_random_source(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        recorder = Recorder((503, "busy", {}))
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        d = harness.dispatcher(config(hook_config(httpserver.url_for("/hook"))))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        expected_rng = random.Random(harness.seed)
        now = t0
        for attempt in range(1, 8):
            report = d.tick(now)
            assert report.retried == 1
            delay = backoff_delay(attempt, initial=2.0, cap=60.0, rng=expected_rng)
            (entry,) = OutboxStore(harness.db).entries()
            assert entry.due_at == pytest.approx(now + delay)
            assert entry.attempts == attempt
            assert d.tick(entry.due_at - 0.01).retried == 0  # not before it is due
            now = entry.due_at
        recorder.default = (200, "", {})
        assert d.tick(now).delivered == 1
        assert len(recorder.seen) == 8

    def test_429_honours_retry_after(self, harness: Harness, httpserver: HTTPServer) -> None:
        recorder = Recorder()
        recorder.script = [(429, "slow down", {"Retry-After": "120"})]
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        d = harness.dispatcher(config(hook_config(httpserver.url_for("/hook"))))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        assert d.tick(t0).retried == 1
        for step in range(1, 120):
            d.tick(t0 + step)
        assert len(recorder.seen) == 1
        assert d.tick(t0 + 120).delivered == 1
        status = d.status(t0 + 120)["integrations"][0]  # type: ignore[index]
        assert (status["sent"], status["retried"], status["failed"]) == (1, 1, 0)

    def test_4xx_is_a_configuration_error(
        self, harness: Harness, httpserver: HTTPServer, captured_logs: io.StringIO
    ) -> None:
        """Failed at once, logged once, counted, shown in status and raised as a fleetd alert."""
        recorder = Recorder((404, "no_service", {}))
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        d = harness.dispatcher(config(hook_config(httpserver.url_for("/hook"))))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0), fire("EccErrors", at=t0)], t0)
        report = d.tick(t0)
        assert (report.failed, report.retried) == (2, 0)
        for step in range(1, 600, 5):
            d.tick(t0 + step)
        assert len(recorder.seen) == 2  # never retried
        status = d.status(t0 + 600)["integrations"][0]  # type: ignore[index]
        assert status["rejecting"] is True
        assert status["config_errors"] == 2
        assert "HTTP 404: no_service" in status["last_error"]
        events = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
        rejected = [e for e in events if e["event"] == "notify_rejected"]
        assert [e["level"] for e in rejected] == ["error", "debug"]
        assert any(SELF_ALERT in line and "FIRING" in line for line in harness.lines())
        metrics = {(r.metric, dict(r.labels)["receiver"]): r.value for r in d.metrics(t0 + 600)}
        assert metrics[("fleetd_alert_config_errors_total", "hook")] == 2
        assert metrics[("fleetd_alert_receiver_rejecting", "hook")] == 1

        # the receiver is fixed: the next notification goes through and the alert resolves
        recorder.default = (200, "", {})
        d.submit([fire("PcieDowngrade", at=t0 + 600)], t0 + 600)
        assert d.tick(t0 + 600).delivered == 1
        d.tick(t0 + 601)
        assert any(SELF_ALERT in line and "RESOLVED" in line for line in harness.lines())
        assert d.status(t0 + 601)["integrations"][0]["rejecting"] is False  # type: ignore[index]

    def test_retryable_failures_give_up_after_the_limit(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        recorder = Recorder((500, "down", {}))
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        cfg = hook_config(httpserver.url_for("/hook"), give_up_after="10m")
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        for step in range(0, 900, 5):
            d.tick(t0 + step)
        (entry,) = OutboxStore(harness.db).entries()
        assert entry.status == "failed"
        assert entry.last_status_code == 500
        assert 600 <= entry.finished_at - t0 <= 600 + 60  # type: ignore[operator]
        assert d.status(t0 + 900)["integrations"][0]["failed"] == 1  # type: ignore[index]
