"""The stand-ins themselves: they reject what the real services reject, so a green e2e run
means something. Fast (no daemon)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.standins.pagerduty import PagerDutyStandIn, change_problems
from tests.e2e.standins.slack import SlackStandIn
from tests.e2e.standins.vllm import WorkerFleet, WorkerOptions
from tests.e2e.standins.webhook import WebhookStandIn

KEY = "a" * 32


def trigger(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "routing_key": KEY,
        "event_action": "trigger",
        "dedup_key": "fleetd/node/gpu3/Rule/abc",
        "payload": {
            "summary": "node GPU 3: 1 new uncorrectable ECC error",
            "source": "node",
            "severity": "critical",
            "timestamp": "2026-01-01T00:00:00.000Z",
        },
    }
    payload = overrides.pop("payload", {})
    event["payload"].update(payload)
    event.update(overrides)
    return event


@pytest.fixture
def pagerduty() -> Iterator[PagerDutyStandIn]:
    server = PagerDutyStandIn(KEY, per_minute=3)
    yield server
    server.close()


def post(url: str, body: Any) -> requests.Response:
    return requests.post(url, json=body, timeout=5)


@pytest.mark.parametrize(
    "bad",
    [
        {"event_action": "fire"},
        {"routing_key": "short"},
        {"dedup_key": "k" * 256},
        {"payload": {"summary": "s" * 1025}},
        {"payload": {"severity": "page"}},
        {"payload": {"source": ""}},
        {"payload": {"timestamp": "yesterday"}},
        {"links": [{"text": "no href"}]},
    ],
)
def test_pagerduty_rejects_what_events_v2_rejects(
    pagerduty: PagerDutyStandIn, bad: dict[str, Any]
) -> None:
    answer = post(pagerduty.url + "/v2/enqueue", trigger(**bad))
    assert answer.status_code == 400
    assert answer.json()["status"] == "invalid event" and answer.json()["errors"]
    assert pagerduty.accepted() == []


def test_pagerduty_accepts_valid_events_resolves_and_rate_limits(
    pagerduty: PagerDutyStandIn,
) -> None:
    assert post(pagerduty.url + "/v2/enqueue", trigger()).status_code == 202
    resolve = {"routing_key": KEY, "event_action": "resolve", "dedup_key": trigger()["dedup_key"]}
    assert post(pagerduty.url + "/v2/enqueue", resolve).status_code == 202
    change = {"routing_key": KEY, "payload": {"summary": "drained", "source": "node",
                                              "timestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
    assert post(pagerduty.url + "/v2/change/enqueue", change).status_code == 202
    assert post(pagerduty.url + "/v2/change/enqueue", change).status_code == 429  # 4th in 60 s
    assert [e.kind for e in pagerduty.accepted()] == ["trigger", "resolve", "change"]
    assert pagerduty.resolves()[0].closed_alert
    no_timestamp = {"routing_key": KEY, "payload": {"summary": "x", "source": "node"}}
    assert change_problems(no_timestamp, KEY) == ["'payload.timestamp' is not an ISO 8601 "
                                                  "timestamp: None"]  # fmt: skip


def test_slack_answers_429_with_retry_after_above_one_message_per_second() -> None:
    slack = SlackStandIn(webhook_path="/services/T/B/x", bot_token="xoxb-t")
    try:
        first = post(slack.webhook_url, {"text": "one"})
        second = post(slack.webhook_url, {"text": "two"})
        assert (first.status_code, first.text) == (200, "ok")
        assert second.status_code == 429 and second.headers["Retry-After"] == "1"
        assert post(slack.webhook_url, {}).status_code == 400
        headers = {"Authorization": "Bearer xoxb-t"}
        body = {"channel": "#c", "text": "hi"}
        ok = requests.post(slack.api_url + "/chat.postMessage", json=body, headers=headers,
                           timeout=5)  # fmt: skip
        assert ok.json()["ok"] is True and ok.json()["ts"]
        again = requests.post(slack.api_url + "/chat.postMessage", json=body, headers=headers,
                              timeout=5)  # fmt: skip
        assert again.status_code == 429
        assert [m.text for m in slack.accepted()] == ["one", "hi"]
    finally:
        slack.close()


def test_webhook_rejects_what_is_not_alertmanagers_format() -> None:
    hook = WebhookStandIn("/audit")
    try:
        assert post(hook.hook_url, {"version": "3"}).status_code == 400
        good = {"version": "4", "groupKey": "g", "status": "firing", "receiver": "audit",
                "alerts": [{"status": "firing", "labels": {}, "annotations": {},
                            "startsAt": "x", "endsAt": "y", "generatorURL": ""}]}  # fmt: skip
        assert post(hook.hook_url, good).status_code == 200
        assert hook.payloads("4") == [good]
    finally:
        hook.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[WorkerFleet]:
    options = WorkerOptions(concurrency=2, max_running=2, request_s=0.3, startup_s=0.2,
                            enforce_drain=True)  # fmt: skip
    f = WorkerFleet(tmp_path, [("gpu0", "vllm@0.service")], options)
    yield f
    f.close()


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip


def test_worker_drains_over_time_and_its_units_follow_systemctl(fleet: WorkerFleet) -> None:
    worker = fleet.workers["gpu0"]
    completion = {"model": worker.options.model, "prompt": "ping", "max_tokens": 1}
    assert post(worker.url + "/v1/completions", completion).status_code == 200
    assert worker.load() == (2, 0)
    assert run(fleet.rotation, "out", "gpu0", worker.url).returncode == 0
    assert post(worker.url + "/v1/completions", completion).status_code == 503  # its own drain
    assert worker.load() != (0, 0)  # in flight, finishing over time
    deadline = time.monotonic() + 5
    while worker.load() != (0, 0):  # the model runs on real time
        assert time.monotonic() < deadline, "the worker never drained"
        time.sleep(0.05)
    assert "vllm:num_requests_running" in requests.get(worker.url + "/metrics", timeout=5).text
    assert (run(fleet.systemctl, "is-active", "vllm@0.service").stdout.strip()) == "active"
    assert run(fleet.systemctl, "stop", "vllm@0.service").returncode == 0
    stopped = run(fleet.systemctl, "is-active", "vllm@0.service")
    assert (stopped.returncode, stopped.stdout.strip()) == (3, "inactive")
    with pytest.raises(requests.ConnectionError):
        requests.get(worker.url + "/health", timeout=5)
    assert run(fleet.systemctl, "start", "vllm@0.service").returncode == 0
    assert run(fleet.systemctl, "--now", "restart", "vllm@0.service").returncode == 2
    assert run(fleet.systemctl, "stop", "vllm@9.service").returncode == 5
    assert worker.stats.aborted == 0 and worker.stats.stops == 1
    refused = [c.problem for c in fleet.recorded("systemctl")][-2:]
    assert all(refused), f"a bad argument vector or unit was not refused: {refused}"
