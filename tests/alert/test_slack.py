"""Slack over real loopback HTTP: incoming webhook (Block Kit + text fallback) and the Web API
with a bot token (firing message, resolve in its thread, parent edited).

Documented format checked here: a message has ``text`` and at most 50 ``blocks``; a header
block's plain_text is at most 150 characters, a section's text at most 3000; a context block
has at most 10 elements. A webhook answers 200 ``ok``; the Web API answers
``{"ok": true, "channel", "ts"}`` or ``{"ok": false, "error"}``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.alert.notification import ChangeEvent
from fleetd.alert.outbox_store import OutboxStore
from tests.alert.support import Harness, Recorder, Seen, config, fire, resolve

BOT_TOKEN = "xoxb-000000000000-000000000000-SECRETbottoken42"


def check_message(body: dict[str, Any]) -> None:
    assert isinstance(body["text"], str) and body["text"]
    blocks = body["blocks"]
    assert 0 < len(blocks) <= 50
    for block in blocks:
        if block["type"] == "header":
            assert block["text"]["type"] == "plain_text"
            assert len(block["text"]["text"]) <= 150
        elif block["type"] == "section":
            assert block["text"]["type"] == "mrkdwn"
            assert len(block["text"]["text"]) <= 3000
        elif block["type"] == "context":
            assert 0 < len(block["elements"]) <= 10
        else:
            raise AssertionError(f"unexpected block {block['type']}")


def route(receiver: str) -> dict[str, Any]:
    return {"receiver": receiver, "group_by": ["alertname"], "group_wait": "30s"}


class TestIncomingWebhook:
    def test_message_has_blocks_and_fallback_text(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        recorder = Recorder((200, "ok", {}))
        httpserver.expect_request("/services/T0/B0/XYZ", method="POST").respond_with_handler(
            recorder
        )
        url = httpserver.url_for("/services/T0/B0/XYZ")
        cfg = {
            "receivers": [{"name": "chat", "slack": [{"webhook_url": url}]}],
            "route": route("chat"),
            "inhibit_rules": [],
        }
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(3)], t0)
        d.tick(t0 + 30)
        (body,) = recorder.bodies()
        check_message(body)
        assert body["text"].startswith("[FIRING:3] GpuHot on node7")
        header = body["blocks"][0]["text"]["text"]
        assert header == "[FIRING:3] GpuHot on node7"
        (section,) = [b for b in body["blocks"] if b["type"] == "section"]  # one, not one per alert
        assert len(section["text"]["text"].splitlines()) == 3
        assert d.status(t0 + 30)["integrations"][0]["sent"] == 1  # type: ignore[index]

    def test_large_group_lists_max_alerts_and_counts_the_rest(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        recorder = Recorder((200, "ok", {}))
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        cfg = {
            "receivers": [
                {"name": "chat", "slack": [{"webhook_url": httpserver.url_for("/hook")}]}
            ],
            "route": route("chat"),
            "inhibit_rules": [],
        }
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0, gpu=g) for g in range(120)], t0)
        d.tick(t0 + 30)
        (body,) = recorder.bodies()
        check_message(body)
        (section,) = [b for b in body["blocks"] if b["type"] == "section"]
        assert len(section["text"]["text"].splitlines()) == 20
        assert "and 100 more alerts not listed" in json.dumps(body["blocks"][-1])
        assert body["text"].endswith("(and 100 more alerts not listed)")

    def test_answer_other_than_ok_is_an_error(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        httpserver.expect_request("/hook").respond_with_data("no_text", status=200)
        cfg = {
            "receivers": [
                {"name": "chat", "slack": [{"webhook_url": httpserver.url_for("/hook")}]}
            ],
            "route": route("chat"),
            "inhibit_rules": [],
        }
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        report = d.tick(t0 + 30)
        assert report.failed == 1
        (item,) = d.status(t0 + 30)["integrations"]  # type: ignore[misc]
        assert item["rejecting"] is True
        assert "no_text" in item["last_error"]


@pytest.fixture
def slack_api(httpserver: HTTPServer) -> Recorder:
    """Slack's Web API stand-in: checks the token and the message, hands out ts values."""
    recorder = Recorder()
    counter = itertools.count(1)

    def reply(seen: Seen) -> tuple[int, str, dict[str, str]]:
        assert seen.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
        assert seen.headers["Content-Type"].startswith("application/json")
        check_message(seen.body)
        if seen.path.endswith("chat.postMessage"):
            answer = {"ok": True, "channel": "C024BE91L", "ts": f"1700000000.{next(counter):06d}"}
        else:
            answer = {"ok": True, "channel": seen.body["channel"], "ts": seen.body["ts"]}
        return 200, json.dumps(answer), {"Content-Type": "application/json"}

    recorder.replies = reply
    httpserver.expect_request("/api/chat.postMessage").respond_with_handler(recorder)
    httpserver.expect_request("/api/chat.update").respond_with_handler(recorder)
    return recorder


class TestBotToken:
    def cfg(self, httpserver: HTTPServer) -> dict[str, Any]:
        slack = {
            "bot_token": BOT_TOKEN,
            "channel": "#gpu-alerts",
            "api_url": httpserver.url_for("/api"),
            "send_resolved": True,
        }
        return {
            "receivers": [{"name": "chat", "slack": [slack]}],
            "route": route("chat"),
            "inhibit_rules": [],
        }

    def test_resolve_replies_in_thread_and_updates_parent(
        self, harness: Harness, httpserver: HTTPServer, slack_api: Recorder
    ) -> None:
        d = harness.dispatcher(config(self.cfg(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 60, fired_at=t0)], t0 + 60)
        d.tick(t0 + 330)
        d.tick(t0 + 331)
        paths = [s.path for s in slack_api.seen]
        assert paths == ["/api/chat.postMessage", "/api/chat.postMessage", "/api/chat.update"]
        parent, reply, edit = slack_api.bodies()
        assert parent["channel"] == "#gpu-alerts" and "thread_ts" not in parent
        assert reply["thread_ts"] == "1700000000.000001"
        assert reply["channel"] == "C024BE91L"
        assert reply["text"].startswith("[RESOLVED] GpuHot")
        assert edit["channel"] == "C024BE91L" and edit["ts"] == "1700000000.000001"
        assert edit["blocks"][0]["text"]["text"].startswith("[RESOLVED]")

    def test_new_episode_starts_a_new_thread(
        self, harness: Harness, httpserver: HTTPServer, slack_api: Recorder
    ) -> None:
        d = harness.dispatcher(config(self.cfg(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        d.tick(t0 + 30)
        d.submit([resolve("GpuHot", at=t0 + 60, fired_at=t0)], t0 + 60)
        d.tick(t0 + 330)
        d.tick(t0 + 331)
        d.submit([fire("GpuHot", at=t0 + 400)], t0 + 400)
        d.tick(t0 + 430)
        last = slack_api.bodies()[-1]
        assert "thread_ts" not in last
        assert last["text"].startswith("[FIRING:1]")

    def test_api_error_is_not_retried(self, harness: Harness, httpserver: HTTPServer) -> None:
        httpserver.expect_request("/api/chat.postMessage").respond_with_json(
            {"ok": False, "error": "channel_not_found"}
        )
        d = harness.dispatcher(config(self.cfg(httpserver)))
        t0 = harness.clock.now()
        d.submit([fire("GpuHot", at=t0)], t0)
        report = d.tick(t0 + 30)
        assert (report.failed, report.retried) == (1, 0)
        for step in range(31, 400):
            d.tick(t0 + step)
        entries = OutboxStore(harness.db).entries()
        # the rejection raised a fleetd alert, which went to Slack too and was rejected too;
        # each entry was tried exactly once
        assert [e.status for e in entries] == ["failed", "failed"]
        assert [e.attempts for e in entries] == [1, 1]
        assert len(httpserver.log) == 2
        assert "FleetdNotificationsRejected" in entries[1].payload


class TestChangeEventThreads:
    """A remediation run's steps (``ChangeEvent.thread`` = run id): with a bot token the first
    is a message and the rest reply in its thread, also after a restart; elsewhere each step
    is sent as it comes."""

    def bot(self, httpserver: HTTPServer) -> dict[str, Any]:
        slack = {
            "bot_token": BOT_TOKEN,
            "channel": "#gpu-alerts",
            "api_url": httpserver.url_for("/api"),
            "reply_broadcast": True,
        }
        return {"receivers": [{"name": "chat", "slack": [slack]}], "inhibit_rules": []}

    def run(self, harness: Harness, d: Any, seconds: int) -> None:
        for _ in range(seconds):
            d.tick(harness.clock.now())
            harness.clock.advance(1)

    def test_first_step_is_the_parent_and_later_steps_reply_in_its_thread(
        self, harness: Harness, httpserver: HTTPServer, slack_api: Recorder
    ) -> None:
        d = harness.dispatcher(config(self.bot(httpserver)))
        t0 = harness.clock.now()
        steps = [
            ChangeEvent("draining GPU 3", at=t0, thread="run-1", id="run-1/1"),
            ChangeEvent("resetting the hive", at=t0, thread="run-1", id="run-1/2"),
            ChangeEvent("draining GPU 5", at=t0, thread="run-2", id="run-2/1"),
            ChangeEvent("breaker reset by alice", at=t0),
            ChangeEvent("GPU 3 back in service", at=t0, thread="run-1", id="run-1/3"),
        ]
        for step in steps:
            d.submit_change(step, t0)
        self.run(harness, d, 10)
        bodies = slack_api.bodies()
        assert [b["text"] for b in bodies] == [f"node7: {s.summary}" for s in steps]
        assert [b.get("thread_ts") for b in bodies] == [
            None,
            "1700000000.000001",
            None,
            None,
            "1700000000.000001",
        ]
        assert not any(b.get("reply_broadcast") for b in bodies)  # steps stay in the thread
        assert bodies[1]["channel"] == "C024BE91L"  # the parent's channel, as Slack answered

        # after a restart the run's next step still finds its thread
        d.close()
        d2 = harness.dispatcher(config(self.bot(httpserver)))
        later = harness.clock.now()
        d2.submit_change(ChangeEvent("run done", at=later, thread="run-1", id="run-1/4"), later)
        d2.submit_change(ChangeEvent("GPU 5 reset", at=later, thread="run-2", id="run-2/2"), later)
        self.run(harness, d2, 5)
        replies = slack_api.bodies()[len(steps) :]
        assert [(b["text"], b["thread_ts"]) for b in replies] == [
            ("node7: run done", "1700000000.000001"),
            ("node7: GPU 5 reset", "1700000000.000003"),
        ]

    def test_webhook_mode_sends_every_step_as_it_comes(
        self, harness: Harness, httpserver: HTTPServer
    ) -> None:
        recorder = Recorder((200, "ok", {}))
        httpserver.expect_request("/hook").respond_with_handler(recorder)
        cfg = {
            "receivers": [
                {"name": "chat", "slack": [{"webhook_url": httpserver.url_for("/hook")}]}
            ],
            "inhibit_rules": [],
        }
        d = harness.dispatcher(config(cfg))
        t0 = harness.clock.now()
        for n in range(3):
            d.submit_change(ChangeEvent(f"step {n}", at=t0, thread="run-1"), t0)
        self.run(harness, d, 5)
        assert [b["text"] for b in recorder.bodies()] == [f"node7: step {n}" for n in range(3)]
        assert not any("thread_ts" in b for b in recorder.bodies())

    def test_a_change_event_stored_before_threads_existed_still_loads(self) -> None:
        stored = {"summary": "GPU 3 drained", "at": 1.0, "labels": {}, "id": "r/1"}
        event = ChangeEvent.from_dict(stored)
        assert (event.summary, event.id, event.thread) == ("GPU 3 drained", "r/1", None)
        assert ChangeEvent.from_dict(event.to_dict()) == event
