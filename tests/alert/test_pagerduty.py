"""PagerDuty Events API v2 against a loopback stand-in that checks the documented format.

Format (PagerDuty developer-docs, events-API-v2 02-Trigger-Events.md and 03-Change-Events.md):
routing_key and event_action required; dedup_key ≤ 255; trigger payload needs summary
(≤ 1024), source and severity (critical|error|warning|info); timestamp ISO 8601; links are
{href, text}; change events carry payload.summary (≤ 1024), source, timestamp, custom_details.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.notification import ChangeEvent
from fleetd.model import make_labels
from tests.alert.support import Harness, Recorder, config, fire, resolve

ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"  # 32 characters, like a real integration key


def check_alert_event(body: dict[str, Any]) -> None:
    """Raise AssertionError unless ``body`` is a valid Events API v2 alert event."""
    assert set(body) <= {
        "routing_key",
        "event_action",
        "dedup_key",
        "payload",
        "images",
        "links",
        "client",
        "client_url",
    }
    assert body["routing_key"] == ROUTING_KEY
    assert body["event_action"] in {"trigger", "acknowledge", "resolve"}
    assert isinstance(body["dedup_key"], str) and 0 < len(body["dedup_key"]) <= 255
    if body["event_action"] != "trigger":
        return
    payload = body["payload"]
    assert set(payload) <= {
        "summary",
        "source",
        "severity",
        "timestamp",
        "component",
        "group",
        "class",
        "custom_details",
    }
    assert 0 < len(payload["summary"]) <= 1024
    assert payload["source"]
    assert payload["severity"] in {"critical", "error", "warning", "info"}
    datetime.fromisoformat(payload["timestamp"].replace("Z", "+00:00"))
    assert isinstance(payload.get("custom_details", {}), dict)
    for link in body.get("links", []):
        assert set(link) <= {"href", "text"} and link["href"].startswith("http")


def check_change_event(body: dict[str, Any]) -> None:
    assert set(body) <= {"routing_key", "payload", "links"}
    assert body["routing_key"] == ROUTING_KEY
    payload = body["payload"]
    assert set(payload) <= {"summary", "source", "timestamp", "custom_details"}
    assert 0 < len(payload["summary"]) <= 1024
    datetime.fromisoformat(payload["timestamp"].replace("Z", "+00:00"))


@pytest.fixture
def pagerduty(httpserver: HTTPServer) -> Recorder:
    """PagerDuty's stand-in: 202 and the documented success body, checking every event."""
    recorder = Recorder()

    def reply(seen: Any) -> tuple[int, str, dict[str, str]]:
        if seen.path == "/v2/enqueue":
            check_alert_event(seen.body)
            body = {"status": "success", "message": "Event processed"}
            body["dedup_key"] = seen.body["dedup_key"]
        else:
            check_change_event(seen.body)
            body = {"status": "success", "message": "Change event processed"}
        return 202, json.dumps(body), {"Content-Type": "application/json"}

    recorder.replies = reply
    httpserver.expect_request("/v2/enqueue", method="POST").respond_with_handler(recorder)
    httpserver.expect_request("/v2/change/enqueue", method="POST").respond_with_handler(recorder)
    return recorder


def pd_config(httpserver: HTTPServer, **extra: Any) -> dict[str, Any]:
    return {
        "external_url": "https://node7.example:9477",
        "receivers": [
            {
                "name": "oncall",
                "pagerduty": [
                    {
                        "routing_key": ROUTING_KEY,
                        "url": httpserver.url_for("/v2/enqueue"),
                        "change_url": httpserver.url_for("/v2/change/enqueue"),
                        **extra,
                    }
                ],
            }
        ],
        "route": {"receiver": "oncall", "group_by": ["node"], "group_wait": "30s"},
        "inhibit_rules": [],
    }


ANNOTATIONS = {
    "summary": "hotspot 105 °C for 5m",
    "description": "GPU 3 junction temperature above the critical limit",
    "evidence": "avg_over_time(temp[5m]) = 105.2",
    "runbook_url": "https://runbooks.example/gpu-hot",
}


class TestAlertEvents:
    def test_trigger_then_resolve_with_the_same_key(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, annotations=ANNOTATIONS, value=105.2)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 100, fired_at=t0, annotations=ANNOTATIONS)], t0 + 100)
        d.tick(t0 + 330)
        trigger, resolved = pagerduty.bodies("/v2/enqueue")
        assert trigger["event_action"] == "trigger"
        payload = trigger["payload"]
        assert payload["summary"] == "node7 GPU 3: hotspot 105 °C for 5m"
        assert payload["source"] == "node7"
        assert payload["severity"] == "critical"
        assert payload["component"] == "gpu3"
        assert payload["class"] == "GpuHot"
        details = payload["custom_details"]
        assert details["value"] == 105.2
        assert details["evidence"] == ANNOTATIONS["evidence"]
        assert details["runbook_url"] == ANNOTATIONS["runbook_url"]
        assert details["labels"]["gpu"] == "3"
        assert {"href": ANNOTATIONS["runbook_url"], "text": "Runbook"} in trigger["links"]
        assert trigger["dedup_key"].startswith("fleetd/node7/gpu3/GpuHot/")
        assert resolved == {
            "routing_key": ROUTING_KEY,
            "event_action": "resolve",
            "dedup_key": trigger["dedup_key"],
        }

    def test_one_event_per_alert_with_distinct_stable_keys(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(4)], t0)
        d.tick(t0 + 30)
        keys = [b["dedup_key"] for b in pagerduty.bodies()]
        assert len(keys) == len(set(keys)) == 4
        # a restart (new dispatcher, same database) computes the same keys and sends no repeat
        d2 = harness.dispatcher(config(pd_config(httpserver)))
        d2.submit([fire("GpuHot", at=t0, gpu=g) for g in range(4)], t0 + 40)
        for step in range(40, 900, 10):
            d2.tick(t0 + step)
        assert len(pagerduty.bodies()) == 4
        d2.submit([resolve("GpuHot", at=t0 + 900, fired_at=t0, gpu=g) for g in range(4)], t0 + 900)
        for step in range(900, 1300, 10):
            d2.tick(t0 + step)
        resolves = [b["dedup_key"] for b in pagerduty.bodies() if b["event_action"] == "resolve"]
        assert sorted(resolves) == sorted(keys)

    def test_summary_is_cut_to_1024_characters(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, annotations={"summary": "x" * 5000})], t0)
        d.tick(t0 + 30)
        (body,) = pagerduty.bodies()
        assert len(body["payload"]["summary"]) == 1024
        assert body["payload"]["summary"].endswith("…")

    def test_oversized_event_drops_custom_details(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, annotations={"evidence": "e" * 600_000})], t0)
        d.tick(t0 + 30)
        (body,) = pagerduty.bodies()
        assert len(json.dumps(body).encode()) <= 512_000
        assert "evidence" not in body["payload"]["custom_details"]

    def test_warning_and_info_severities(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        from fleetd.model import Severity

        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit(
            [
                fire("Warm", at=t0, severity=Severity.WARNING),
                fire("Note", at=t0, severity=Severity.INFO, gpu=None),
            ],
            t0,
        )
        d.tick(t0 + 30)
        by_class = {b["payload"]["class"]: b["payload"] for b in pagerduty.bodies()}
        assert by_class["Warm"]["severity"] == "warning"
        assert by_class["Note"]["severity"] == "info"
        assert by_class["Note"]["component"] == "node"

    def test_acknowledge_is_sent_with_the_alert_key(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        (fp,) = [a.alert.fingerprint for a in d.alerts(t0 + 31)]
        d.acknowledge(fp, author="alice", comment="on it", now=t0 + 31)
        d.tick(t0 + 31)
        trigger, ack = pagerduty.bodies()
        assert ack == {
            "routing_key": ROUTING_KEY,
            "event_action": "acknowledge",
            "dedup_key": trigger["dedup_key"],
        }


class TestChangeEvents:
    def test_remediation_step_goes_to_change_enqueue(
        self, harness: Harness, httpserver: HTTPServer, pagerduty: Recorder
    ) -> None:
        d = harness.dispatcher(config(pd_config(httpserver)))
        t0 = harness.clock.now()
        event = ChangeEvent(
            summary="node7: GPU 3 drained for a hive reset",
            at=t0,
            labels=make_labels({"gpu": 3}),
            details={"step": "drain", "run": "r-42"},
            links=(("https://node7.example:9477/api/v1/remediations/r-42", "run"),),
            id="r-42/drain",
        )
        assert d.submit_change(event, t0) == 1
        d.tick(t0)
        (body,) = pagerduty.bodies("/v2/change/enqueue")
        assert pagerduty.bodies("/v2/enqueue") == []
        assert "event_action" not in body  # a change event never pages
        assert body["payload"]["summary"] == event.summary
        assert body["payload"]["source"] == "node7"
        assert body["payload"]["custom_details"]["step"] == "drain"
        assert body["links"] == [{"href": event.links[0][0], "text": "run"}]
