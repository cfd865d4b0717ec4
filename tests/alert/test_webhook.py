"""The generic webhook receives Alertmanager's webhook payload (version 4) over real HTTP."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pytest_httpserver import HTTPServer

from fleetd.alert.notification import ChangeEvent
from fleetd.model import make_labels
from tests.alert.support import Harness, Recorder, config, fire, resolve

WEBHOOK_KEYS = {
    "version",
    "eventId",  # fleetd's addition: the receiver's de-duplication key
    "groupKey",
    "truncatedAlerts",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
}
ALERT_KEYS = {
    "status",
    "labels",
    "annotations",
    "startsAt",
    "endsAt",
    "generatorURL",
    "fingerprint",
}


def webhook_config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "external_url": "http://node7.example:9477",
        "receivers": [{"name": "hook", "webhook": [{"url": url, **extra}]}],
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "10s"},
        "inhibit_rules": [],
    }


def rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_firing_then_resolved_in_alertmanager_format(
    harness: Harness, httpserver: HTTPServer
) -> None:
    recorder = Recorder()
    httpserver.expect_request("/hook", method="POST").respond_with_handler(recorder)
    d = harness.dispatcher(config(webhook_config(httpserver.url_for("/hook"))))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=1), fire("GpuHot", at=t0, gpu=2)], t0)
    d.tick(t0 + 10)
    d.submit([resolve("GpuHot", at=t0 + 20, fired_at=t0, gpu=1)], t0 + 20)
    d.tick(t0 + 310)

    first, second = recorder.bodies("/hook")
    assert set(first) == WEBHOOK_KEYS
    assert first["version"] == "4"
    assert first["status"] == "firing"
    assert first["receiver"] == "hook"
    assert first["groupLabels"] == {"alertname": "GpuHot"}
    assert first["commonLabels"] == {"alertname": "GpuHot", "node": "node7", "severity": "critical"}
    assert first["externalURL"] == "http://node7.example:9477"
    assert first["truncatedAlerts"] == 0
    assert first["groupKey"].endswith(':{alertname="GpuHot"}')
    assert sorted(a["labels"]["gpu"] for a in first["alerts"]) == ["1", "2"]
    for item in first["alerts"]:
        assert set(item) == ALERT_KEYS
        assert item["status"] == "firing"
        assert rfc3339(item["startsAt"]) == t0
        assert item["endsAt"] == "0001-01-01T00:00:00Z"
        assert item["generatorURL"].startswith("http://node7.example:9477/")
        assert len(item["fingerprint"]) == 16

    # the webhook wants resolves by default: gpu1 resolved, gpu2 still firing
    assert second["status"] == "firing"
    by_gpu = {a["labels"]["gpu"]: a for a in second["alerts"]}
    assert by_gpu["1"]["status"] == "resolved"
    assert rfc3339(by_gpu["1"]["endsAt"]) == t0 + 20
    assert by_gpu["2"]["status"] == "firing"
    assert second["groupKey"] == first["groupKey"]


def test_max_alerts_truncates_and_counts(harness: Harness, httpserver: HTTPServer) -> None:
    recorder = Recorder()
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    d = harness.dispatcher(config(webhook_config(httpserver.url_for("/hook"), max_alerts=3)))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(8)], t0)
    d.tick(t0 + 10)
    (body,) = recorder.bodies()
    assert len(body["alerts"]) == 3
    assert body["truncatedAlerts"] == 5


def test_change_events_only_when_asked(harness: Harness, httpserver: HTTPServer) -> None:
    recorder = Recorder()
    httpserver.expect_request("/plain").respond_with_handler(recorder)
    httpserver.expect_request("/changes").respond_with_handler(recorder)
    cfg = webhook_config(httpserver.url_for("/plain"))
    cfg["receivers"][0]["webhook"].append(
        {"url": httpserver.url_for("/changes"), "send_changes": True}
    )
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    event = ChangeEvent(
        summary="GPU 3 drained for reset",
        at=t0,
        labels=make_labels({"gpu": 3, "plan": "hive_reset"}),
        details={"step": "drain", "workers": 1},
        id="run-1/drain",
    )
    d.submit_change(event, t0)
    d.submit_change(event, t0 + 1)  # the same step again: queued once
    d.tick(t0 + 1)
    assert recorder.bodies("/plain") == []
    (body,) = recorder.bodies("/changes")
    assert body["version"] == "fleetd-change-1"
    assert body["summary"] == "GPU 3 drained for reset"
    assert body["labels"] == {"gpu": "3", "plan": "hive_reset"}
    assert body["details"] == {"step": "drain", "workers": 1}
