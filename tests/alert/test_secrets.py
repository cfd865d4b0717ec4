"""Secrets never leak (Alertmanager's AssertNotifyLeaksNoSecret, applied to the whole path):
not in NotifyError texts, logs, ``status()``, metrics, the outbox, or the self-alert."""

from __future__ import annotations

import io
import json
import socket
from typing import Any

import pytest
import requests
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from fleetd.alert.config import PagerDutyConfig, SlackConfig, WebhookConfig
from fleetd.alert.outbox_store import OutboxStore
from fleetd.alert.pagerduty import PagerDutyNotifier
from fleetd.alert.slack import SlackNotifier
from fleetd.alert.webhook import WebhookNotifier
from fleetd.errors import NotifyError
from tests.alert.support import Harness, config, fire
from tests.alert.test_delivery_retry import NOTIFICATION

MARK = "S3CR3Tzz"  # part of every secret below
PD_KEY = f"pdkey{MARK}0123456789abcdefghijk"[:32]
TOKEN = f"xoxb-1-2-{MARK}"
BEARER = f"am-{MARK}"


ECHOED: list[str] = []


def echo(status: int) -> Any:
    """A server that repeats everything it was sent (path, headers, body) in its answer."""

    def handler(request: Request) -> Response:
        text = f"{request.full_path} {dict(request.headers)} {request.get_data(as_text=True)}"
        ECHOED.append(text)
        return Response(text, status=status)

    return handler


@pytest.fixture(autouse=True)
def _fresh_echoes() -> None:
    ECHOED.clear()


@pytest.mark.parametrize("status", [400, 500])
def test_notifier_errors_do_not_contain_secrets(httpserver: HTTPServer, status: int) -> None:
    httpserver.expect_request(f"/services/{MARK}").respond_with_handler(echo(status))
    httpserver.expect_request("/pd").respond_with_handler(echo(status))
    httpserver.expect_request("/api/chat.postMessage").respond_with_handler(echo(status))
    url = httpserver.url_for(f"/services/{MARK}") + f"?token={MARK}"
    with requests.Session() as session:
        notifiers = [
            PagerDutyNotifier(
                PagerDutyConfig(routing_key=PD_KEY, url=httpserver.url_for("/pd")),
                session,
                source="n",
            ),
            SlackNotifier(SlackConfig(webhook_url=url), session),
            SlackNotifier(
                SlackConfig(bot_token=TOKEN, channel="#c", api_url=httpserver.url_for("/api")),
                session,
            ),
            WebhookNotifier(WebhookConfig(url=url), session),
        ]
        for notifier in notifiers:
            with pytest.raises(NotifyError) as caught:
                notifier.send(NOTIFICATION)
            assert MARK in ECHOED[-1]  # the answer did repeat the secret
            assert MARK not in str(caught.value) and MARK not in repr(caught.value)
            assert caught.value.__cause__ is None
            assert caught.value.__context__ is None or caught.value.__suppress_context__


def test_network_errors_do_not_contain_secret_urls() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/services/T0/B0/{MARK}"
    with requests.Session() as session:
        for notifier in (
            SlackNotifier(SlackConfig(webhook_url=url), session),
            WebhookNotifier(WebhookConfig(url=url), session),
        ):
            with pytest.raises(NotifyError) as caught:
                notifier.send(NOTIFICATION)
            assert MARK not in str(caught.value)
            assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_nothing_the_dispatcher_shows_contains_a_secret(
    harness: Harness, httpserver: HTTPServer, captured_logs: io.StringIO
) -> None:
    for path in ("/pd", f"/services/{MARK}", "/api/chat.postMessage", "/am/api/v2/alerts"):
        httpserver.expect_request(path).respond_with_handler(echo(400))
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{refused.getsockname()[1]}/hook/{MARK}"
    refused.close()
    cfg = {
        "receivers": [
            {
                "name": "all",
                "pagerduty": [{"routing_key": PD_KEY, "url": httpserver.url_for("/pd")}],
                "slack": [
                    {"webhook_url": httpserver.url_for(f"/services/{MARK}")},
                    {"bot_token": TOKEN, "channel": "#c", "api_url": httpserver.url_for("/api")},
                ],
                "webhook": [{"url": dead}],
                "alertmanager": [{"url": httpserver.url_for("/am"), "bearer_token": BEARER}],
                "console": [{}],
            }
        ],
        "route": {"receiver": "all", "group_wait": "0s", "group_interval": "10s"},
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0)], t0)
    for step in range(0, 60):
        d.tick(t0 + step)
    assert sum(MARK in text for text in ECHOED) >= 4  # answers repeated the secrets
    status = d.status(t0 + 60)
    assert all(i["last_error"] for i in status["integrations"] if i["kind"] != "console")  # type: ignore[index,union-attr]
    shown = [
        json.dumps(status),
        repr(d.alerts(t0 + 60)),
        repr(d.metrics(t0 + 60)),
        captured_logs.getvalue(),
        harness.stream.getvalue(),  # the console printed the self-alerts
        repr(OutboxStore(harness.db).entries()),
        repr(cfg := config(cfg)) + cfg.model_dump_json(),
    ]
    assert "FleetdNotificationsRejected" in harness.stream.getvalue()
    for text in shown:
        assert MARK not in text
        for secret in (PD_KEY, TOKEN, BEARER):
            assert secret not in text
