"""Feeding Alertmanagers (API v2) on a fake clock, against loopback stand-ins: every
Alertmanager gets every update; firing alerts are re-sent with a lease; resolved ones are
re-sent for a while with endsAt at the resolve, then dropped."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pytest_httpserver import HTTPServer

from tests.alert.support import Harness, Recorder, config, fire, resolve


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def am_config(httpserver: HTTPServer) -> dict[str, Any]:
    return {
        "external_url": "http://node7.example:9477",
        "receivers": [
            {
                "name": "am",
                "alertmanager": [
                    {
                        "url": httpserver.url_for("/am1"),
                        "resend_interval": "1m",
                        "resolved_retention": "5m",
                    },
                    {
                        "url": httpserver.url_for("/am2"),
                        "resend_interval": "1m",
                        "resolved_retention": "5m",
                    },
                ],
            }
        ],
        "route": {"receiver": "am", "group_wait": "30s"},
        "inhibit_rules": [],
    }


def test_push_resend_resolve_and_retention(harness: Harness, httpserver: HTTPServer) -> None:
    am1, am2 = Recorder(), Recorder()
    httpserver.expect_request("/am1/api/v2/alerts", method="POST").respond_with_handler(am1)
    httpserver.expect_request("/am2/api/v2/alerts", method="POST").respond_with_handler(am2)
    d = harness.dispatcher(config(am_config(httpserver)))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=1, annotations={"summary": "hot"})], t0)
    d.tick(t0)  # no group_wait: Alertmanager groups by itself
    for recorder in (am1, am2):
        (body,) = recorder.bodies()
        (item,) = body
        assert item["labels"] == {
            "alertname": "GpuHot",
            "gpu": "1",
            "node": "node7",
            "severity": "critical",
        }
        assert item["annotations"] == {"summary": "hot"}
        assert ts(item["startsAt"]) == t0
        assert ts(item["endsAt"]) == t0 + 240  # lease: 4 resend intervals
        assert item["generatorURL"].startswith("http://node7.example:9477/")
    for step in range(1, 181):
        d.tick(t0 + step)
    sends = [ts(b[0]["endsAt"]) - 240 for b in am1.bodies()]
    assert sends == [t0, t0 + 60, t0 + 120, t0 + 180]  # re-sent every minute while firing

    d.submit([resolve("GpuHot", at=t0 + 200, fired_at=t0, gpu=1)], t0 + 200)
    d.tick(t0 + 200)
    last = am1.bodies()[-1][0]
    assert ts(last["endsAt"]) == t0 + 200  # resolved: endsAt is the resolve time
    for step in range(201, 1000):
        d.tick(t0 + step)
    resolved_sends = [b for b in am1.bodies() if ts(b[0]["endsAt"]) == t0 + 200]
    assert len(resolved_sends) == 5  # at 200, 260, 320, 380, 440; retention ends at 500
    assert len(am2.bodies()) == len(am1.bodies())
    assert d.status(t0 + 1000)["alerts"] == {"firing": 0, "resolved": 0}


def test_one_alertmanager_down_does_not_hold_up_the_other(
    harness: Harness, httpserver: HTTPServer
) -> None:
    am1, am2 = Recorder((503, "down", {})), Recorder()
    httpserver.expect_request("/am1/api/v2/alerts").respond_with_handler(am1)
    httpserver.expect_request("/am2/api/v2/alerts").respond_with_handler(am2)
    d = harness.dispatcher(config(am_config(httpserver)))
    t0 = harness.clock.now()
    d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(50)], t0)
    for step in range(0, 120):
        d.tick(t0 + step)
    assert len(am2.bodies()) == 2 and len(am2.bodies()[0]) == 50  # batched: 1 request per push
    am1.default = (200, "", {})
    for step in range(120, 200):
        d.tick(t0 + step)
    latest = am1.bodies()[-1]
    assert len(latest) == 50
    assert ts(latest[0]["endsAt"]) > t0 + 120  # the lease was renewed when it finally went
