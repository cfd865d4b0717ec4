"""Links and ids receivers rely on: every PagerDuty "fleetd" link and every generatorURL is
``{external_url}/api/v1/alerts/{fingerprint}`` (none without external_url), and every webhook
payload carries an ``eventId`` that stays the same across retries and restarts."""

from __future__ import annotations

import io
import random
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.notification import ChangeEvent, Notification
from fleetd.alert.outbox_store import OutboxStore
from fleetd.alert.webhook import webhook_payload
from fleetd.clock import FakeClock
from fleetd.store.db import Database
from tests.alert.support import NODE, Harness, Recorder, config, fire

KEY = "R0UT1NGKEY0123456789abcdefABCDEF"


def receivers(httpserver: HTTPServer, external_url: str | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "receivers": [
            {
                "name": "all",
                "pagerduty": [{"routing_key": KEY, "url": httpserver.url_for("/pd")}],
                "webhook": [{"url": httpserver.url_for("/hook")}],
                "alertmanager": [{"url": httpserver.url_for("/am")}],
            }
        ],
        "route": {"receiver": "all", "group_wait": "0s"},
        "inhibit_rules": [],
    }
    if external_url is not None:
        cfg["external_url"] = external_url
    return cfg


@pytest.mark.parametrize(
    ("external_url", "base"),
    [
        ("https://node7.example:9477", "https://node7.example:9477"),
        ("https://node7.example:9477/", "https://node7.example:9477"),
        ("https://gw.example/fleetd/node7", "https://gw.example/fleetd/node7"),
        (None, None),
    ],
)
def test_alert_links_have_the_api_shape_or_are_absent(
    harness: Harness, httpserver: HTTPServer, external_url: str | None, base: str | None
) -> None:
    seen = {
        name: Recorder((202 if name == "pd" else 200, "{}", {})) for name in ("pd", "hook", "am")
    }
    httpserver.expect_request("/pd").respond_with_handler(seen["pd"])
    httpserver.expect_request("/hook").respond_with_handler(seen["hook"])
    httpserver.expect_request("/am/api/v2/alerts").respond_with_handler(seen["am"])
    d = harness.dispatcher(config(receivers(httpserver, external_url)))
    t0 = harness.clock.now()
    transition = fire("GpuEccUncorrectableError", at=t0, gpu=3)
    d.submit([transition], t0)
    d.tick(t0)
    fp = transition.alert.key.fingerprint()
    (page,) = seen["pd"].bodies()
    (hook,) = seen["hook"].bodies()
    ((am,),) = seen["am"].bodies()
    fleetd_links = [link for link in page.get("links", []) if link["text"] == "fleetd"]
    if base is None:
        assert fleetd_links == [] and "client_url" not in page
        assert hook["alerts"][0]["generatorURL"] == "" and hook["externalURL"] == ""
        assert "generatorURL" not in am
        return
    url = f"{base}/api/v1/alerts/{fp}"
    assert fleetd_links == [{"href": url, "text": "fleetd"}]
    assert hook["alerts"][0]["generatorURL"] == url
    assert am["generatorURL"] == url


class Flaky(Recorder):
    """Answers 503 ``failures`` times, then 200."""

    def __init__(self, failures: int) -> None:
        super().__init__((200, "", {}))
        self.script = [(503, "busy", {})] * failures


def hook_cfg(url: str) -> dict[str, Any]:
    return {
        "receivers": [{"name": "hook", "webhook": [{"url": url, "send_changes": True}]}],
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "0s"},
        "inhibit_rules": [],
        "delivery": {"initial_backoff": "1s", "max_backoff": "2s"},
    }


def test_event_id_is_the_same_on_every_retry_and_after_a_restart(
    sqlite_db: Database, clock: FakeClock, httpserver: HTTPServer
) -> None:
    hook = Flaky(failures=2)
    httpserver.expect_request("/hook").respond_with_handler(hook)

    def dispatcher() -> Dispatcher:
        return Dispatcher(
            config(hook_cfg(httpserver.url_for("/hook"))),
            sqlite_db,
            node=NODE,
            now=clock.now(),
            rng=random.Random(2),
            stream=io.StringIO(),
        )

    d1 = dispatcher()
    t0 = clock.now()
    d1.submit([fire("GpuHot", at=t0, gpu=1)], t0)
    d1.submit_change(ChangeEvent("draining GPU 1", at=t0, id="run-1/drain", thread="run-1"), t0)
    d1.tick(t0)  # the alert's first attempt fails
    d1.close()  # and the process restarts
    d2 = dispatcher()
    for step in range(1, 30):
        d2.tick(t0 + step)
    bodies = hook.bodies()
    alert_ids = [b["eventId"] for b in bodies if b["version"] == "4"]
    change_ids = [b["eventId"] for b in bodies if b["version"] == "fleetd-change-1"]
    assert len(alert_ids) == 3 and len(set(alert_ids)) == 1  # two 503s, then accepted
    assert len(change_ids) == 1 and change_ids[0] != alert_ids[0]
    assert all(isinstance(i, str) and len(i) == 32 for i in alert_ids + change_ids)
    stored = {Notification.from_json(e.payload).id for e in OutboxStore(sqlite_db).entries()}
    assert stored == {alert_ids[0], change_ids[0]}


def test_an_entry_stored_without_an_id_gets_one_that_does_not_change() -> None:
    old = Notification(
        receiver="hook",
        integration="hook/webhook/0",
        action="notify",
        status="firing",
        node=NODE,
        created_at=1.0,
    )
    stored = old.to_json().replace('"id":"",', "")  # as a fleetd before event ids wrote it
    assert '"id"' not in stored
    first = webhook_payload(Notification.from_json(stored))["eventId"]
    again = webhook_payload(Notification.from_json(stored))["eventId"]
    assert first == again and len(first) == 32
    other = webhook_payload(Notification.from_json(stored.replace("1.0", "2.0")))["eventId"]
    assert other != first
