"""Delivery self-metrics: every name in the catalog, values that follow what happened."""

from __future__ import annotations

import json

from pytest_httpserver import HTTPServer

from fleetd.alert.notification import ChangeEvent
from fleetd.collect.catalog import ALERT_METRICS, CATALOG
from fleetd.model import make_labels
from tests.alert.support import Harness, Recorder, config, fire


def test_metrics_are_in_the_catalog_and_count(harness: Harness, httpserver: HTTPServer) -> None:
    recorder = Recorder((503, "down", {}))
    httpserver.expect_request("/hook").respond_with_handler(recorder)
    cfg = {
        "receivers": [
            {"name": "hook", "webhook": [{"url": httpserver.url_for("/hook")}]},
            {"name": "console", "console": [{}]},
        ],
        "route": {
            "receiver": "hook",
            "group_wait": "0s",
            "routes": [{"matchers": ['alertname=~"Fleetd.*"'], "receiver": "console"}],
        },
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0)], t0)
    for step in range(0, 100):
        d.tick(t0 + step)
    readings = d.metrics(t0 + 100)
    names = {r.metric for r in readings}
    assert names == {spec.name for spec in ALERT_METRICS}
    for r in readings:
        assert tuple(k for k, _ in r.labels) == tuple(sorted(CATALOG[r.metric].labels))
    values = {(r.metric, dict(r.labels)["receiver"]): r.value for r in readings}
    assert values[("fleetd_alert_outbox_pending", "hook")] == 1
    assert values[("fleetd_alert_outbox_oldest_pending_age_seconds", "hook")] == 100
    assert values[("fleetd_alert_notifications_retried_total", "hook")] >= 5
    assert values[("fleetd_alert_notifications_sent_total", "hook")] == 0
    recorder.default = (200, "", {})
    for step in range(100, 200):
        d.tick(t0 + step)
    values = {(r.metric, dict(r.labels)["receiver"]): r.value for r in d.metrics(t0 + 200)}
    assert values[("fleetd_alert_notifications_sent_total", "hook")] == 1
    assert values[("fleetd_alert_outbox_pending", "hook")] == 0
    assert values[("fleetd_alert_outbox_oldest_pending_age_seconds", "hook")] == 0
    assert values[("fleetd_alert_notifications_failed_total", "hook")] == 0


def test_console_prints_changes_and_json(harness: Harness) -> None:
    cfg = {
        "receivers": [{"name": "c", "console": [{}, {"format": "json"}]}],
        "route": {"receiver": "c", "group_wait": "0s"},
        "inhibit_rules": [],
    }
    d = harness.dispatcher(config(cfg))
    t0 = harness.clock.now()
    d.submit_change(ChangeEvent("GPU 3 reset finished", at=t0, labels=make_labels({"gpu": 3})), t0)
    d.submit([fire("GpuHot", at=t0, value=101.5)], t0)
    d.tick(t0)
    text_lines = [line for line in harness.lines() if not line.startswith("{")]
    json_lines = [json.loads(line) for line in harness.lines() if line.startswith("{")]
    # the page goes first although the change event was queued first (its lane is slower)
    assert text_lines[1] == "2026-01-01T00:00:00.000Z CHANGE   GPU 3 reset finished gpu=3"
    assert text_lines[0].startswith("2026-01-01T00:00:00.000Z FIRING   critical GpuHot gpu=3")
    assert "value=101.5" in text_lines[0]
    assert [j["type"] for j in json_lines] == ["alert", "change"]
    assert json_lines[0]["labels"]["alertname"] == "GpuHot"
