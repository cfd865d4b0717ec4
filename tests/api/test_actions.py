"""The mutating endpoints: the token is required and checked, bodies are validated, every
action is carried out by the real component and recorded in the event log with who and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fleetd.api.routes import API_PREFIX, _Api
from fleetd.errors import ConfigError, Problem
from tests.api.agent import POLL_INTERVAL, TOKEN, Agent, start_agent

AUTH = {"Authorization": f"Bearer {TOKEN}"}

MUTATIONS: list[tuple[str, dict[str, Any]]] = [
    ("/gpus/3/drain", {"reason": "r"}),
    ("/gpus/3/undrain", {"reason": "r"}),
    ("/alerts/0123456789abcdef/ack", {"reason": "r"}),
    ("/silences", {"reason": "r", "matchers": ['gpu="3"'], "duration": "1h"}),
    ("/silences/abc/expire", {"reason": "r"}),
    ("/remediation/runs/abc/cancel", {"reason": "r"}),
    ("/remediation/pause", {"reason": "r"}),
    ("/remediation/resume", {"reason": "r"}),
    ("/remediation/breaker/reset", {"reason": "r"}),
    ("/remediation/baseline/capture", {"reason": "r"}),
    ("/reload", {"reason": "r"}),
]


def post(
    agent: Agent, path: str, body: Any = None, headers: dict[str, str] | None = None, **kw: Any
) -> requests.Response:
    return requests.post(
        agent.url + API_PREFIX + path,
        json=body,
        headers=AUTH if headers is None else headers,
        timeout=10,
        **kw,
    )


def actions(agent: Agent) -> list[dict[str, Any]]:
    """What the API recorded (remediation records its own steps of a person's request too)."""
    events = requests.get(
        agent.url + API_PREFIX + "/events", params={"kind": "operator_action"}, timeout=10
    ).json()["events"]
    return [e for e in events if "action" in e["data"]]


def test_every_mutating_route_is_in_the_table_above() -> None:
    posts = {path for method, path, _ in _Api.routes(_Api.__new__(_Api)) if method != "GET"}
    normalized = {
        p.replace("{gpu}", "3")
        .replace("{fingerprint}", "0123456789abcdef")
        .replace("{silence_id}", "abc")
        .replace("{run_id}", "abc")
        for p in posts
    }
    assert normalized == {path for path, _ in MUTATIONS}


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """One agent for the refusal tests: none of them may change or record anything."""
    running = start_agent(tmp_path_factory.mktemp("untouched"))
    running.tick()
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.parametrize(("path", "body"), MUTATIONS, ids=[p for p, _ in MUTATIONS])
def test_mutations_need_the_right_token(untouched: Agent, path: str, body: dict[str, Any]) -> None:
    agent = untouched
    missing = post(agent, path, body, headers={})
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert "Authorization" in missing.json()["error"]
    wrong = post(agent, path, body, headers={"Authorization": f"Bearer {TOKEN}x"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid token"
    basic = post(agent, path, body, headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401
    assert actions(agent) == []  # nothing was done, so nothing is recorded
    assert TOKEN not in missing.text + wrong.text + basic.text


@pytest.mark.parametrize(("path", "body"), MUTATIONS, ids=[p for p, _ in MUTATIONS])
def test_malformed_bodies_are_400_with_a_message(
    untouched: Agent, path: str, body: dict[str, Any]
) -> None:
    agent = untouched
    url = agent.url + API_PREFIX + path
    not_json = requests.post(url, data=b"{reason:", headers=AUTH, timeout=10)
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]
    assert post(agent, path, ["reason"]).status_code == 400
    assert post(agent, path, None).status_code == 400
    no_reason = post(agent, path, {k: v for k, v in body.items() if k != "reason"})
    assert no_reason.status_code == 400
    assert "reason: required" in no_reason.json()["error"]
    blank = post(agent, path, {**body, "reason": "   "})
    assert blank.status_code == 400
    extra = post(agent, path, {**body, "force": True})
    assert extra.status_code == 400 and "force: unknown field" in extra.json()["error"]
    typed = post(agent, path, {**body, "reason": 42})
    assert typed.status_code == 400
    assert actions(agent) == []


def test_agent_without_a_token_is_read_only(tmp_path: Path) -> None:
    agent = start_agent(tmp_path / "ro", token=None)
    try:
        agent.tick()
        for path, body in MUTATIONS:
            answer = post(agent, path, body)
            assert answer.status_code == 403, path
            assert "no API token is configured" in answer.json()["error"]
        assert requests.get(agent.url + API_PREFIX + "/status", timeout=10).status_code == 200
    finally:
        agent.stop()


def test_silence_create_list_get_expire_and_the_record(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    created = post(
        agent,
        "/silences",
        {"reason": "replacing GPU 3", "actor": "alice", "matchers": ['gpu="3"'], "duration": "2h"},
    )
    assert created.status_code == 201
    silence = created.json()["silence"]
    assert created.json()["recorded"] is True
    now = agent.clock.now()
    assert silence["starts_at"] == now and silence["ends_at"] == now + 7200
    assert silence["state"] == "active"
    assert silence["created_by"] == "alice (token operator, 127.0.0.1)"
    assert silence["comment"] == "replacing GPU 3"

    listed = requests.get(agent.url + API_PREFIX + "/silences", timeout=10).json()["silences"]
    assert [s["id"] for s in listed] == [silence["id"]]
    one = requests.get(agent.url + API_PREFIX + f"/silences/{silence['id']}", timeout=10)
    assert one.json()["silence"]["matchers"] == ['gpu="3"']
    alert = requests.get(agent.url + API_PREFIX + "/alerts", params={"gpu": 3}, timeout=10)
    assert alert.json()["alerts"][0]["silenced_by"] == [silence["id"]]

    agent.clock.advance(60)
    expired = post(agent, f"/silences/{silence['id']}/expire", {"reason": "done", "actor": "bob"})
    assert expired.status_code == 200
    assert expired.json()["silence"]["state"] == "expired"
    assert expired.json()["silence"]["ends_at"] == agent.clock.now()
    assert post(agent, "/silences/nope/expire", {"reason": "x"}).status_code == 404

    record = actions(agent)
    assert [(e["data"]["action"], e["data"]["outcome"]) for e in record] == [
        ("silence", "ok"),
        ("expire_silence", "ok"),
        ("expire_silence", "no silence 'nope'"),
    ]
    first = record[0]
    assert first["actor"] == "alice (token operator, 127.0.0.1)"
    assert first["data"]["reason"] == "replacing GPU 3"
    assert first["data"]["user"] == "alice" and first["data"]["client"] == "127.0.0.1"
    assert "replacing GPU 3" in first["message"]
    assert TOKEN not in str(record)


def test_silence_bodies_are_checked(agent: Agent) -> None:
    base = {"reason": "r", "matchers": ['gpu="3"']}
    assert post(agent, "/silences", base).status_code == 400  # neither duration nor ends_at
    both = {**base, "duration": "1h", "ends_at": agent.clock.now() + 10}
    assert post(agent, "/silences", both).status_code == 400
    assert post(agent, "/silences", {**base, "duration": "forever"}).status_code == 400
    assert post(agent, "/silences", {**base, "duration": -5}).status_code == 400
    assert post(agent, "/silences", {**base, "duration": "400d"}).status_code == 400
    past = post(agent, "/silences", {**base, "ends_at": agent.clock.now() - 1})
    assert past.status_code == 400 and "must end" in past.json()["error"]
    bad = post(agent, "/silences", {**base, "matchers": ["gpu=~["], "duration": "1h"})
    assert bad.status_code == 400 and "regular expression" in bad.json()["error"]
    empty = post(agent, "/silences", {**base, "matchers": ['gpu=""'], "duration": "1h"})
    assert empty.status_code == 400
    ok = post(agent, "/silences", {**base, "ends_at": agent.clock.now() + 600})
    assert ok.status_code == 201


def test_drain_undrain_and_the_record(agent: Agent) -> None:
    drained = post(agent, "/gpus/5/drain", {"reason": "flaky fan", "actor": "carol"})
    assert drained.status_code == 202, drained.text
    run = drained.json()["run"]
    assert run["plan"] == "drain" and 5 in run["gpus"]
    assert run["trigger"]["who"] == "carol (token operator, 127.0.0.1)"
    assert run["trigger"]["why"] == "flaky fan"
    agent.clock.advance(POLL_INTERVAL)
    agent.tick()
    status = requests.get(agent.url + API_PREFIX + "/status", timeout=10).json()
    assert status["gpus"][5]["remediation"]["holding"] is True
    assert status["remediation"]["held"][0]["gpus"] == run["gpus"]

    again = post(agent, "/gpus/5/drain", {"reason": "twice"})
    assert again.status_code == 409 and "already in run" in again.json()["error"]
    assert post(agent, "/gpus/6/undrain", {"reason": "nothing held"}).status_code in (202, 409)
    assert post(agent, "/gpus/42/drain", {"reason": "x"}).status_code == 404

    undrained = post(agent, "/gpus/5/undrain", {"reason": "fan replaced", "actor": "carol"})
    assert undrained.status_code == 202, undrained.text
    assert undrained.json()["run"]["plan"] == "undrain"
    outcomes = [(e["data"]["action"], e["gpu"], e["data"]["outcome"]) for e in actions(agent)]
    assert outcomes[0] == ("drain", 5, "ok")
    assert outcomes[1][0:2] == ("drain", 5) and outcomes[1][2].startswith("refused: ")
    assert ("undrain", 5, "ok") in outcomes


def test_pause_resume_breaker_and_cancel(agent: Agent) -> None:
    paused = post(agent, "/remediation/pause", {"reason": "datacenter work", "actor": "dan"})
    assert paused.status_code == 200
    assert paused.json()["pause"] == {
        "paused": True,
        "by": "dan (token operator, 127.0.0.1)",
        "reason": "datacenter work",
        "at": agent.clock.now(),
    }
    state = requests.get(agent.url + API_PREFIX + "/remediation", timeout=10).json()
    assert state["pause"]["paused"] is True
    resumed = post(agent, "/remediation/resume", {"reason": "done"})
    assert resumed.json()["pause"]["paused"] is False
    reset = post(agent, "/remediation/breaker/reset", {"reason": "false alarm"})
    assert reset.status_code == 200 and reset.json()["breaker"]["tripped"] is False

    missing = post(agent, "/remediation/runs/nope/cancel", {"reason": "x"})
    assert missing.status_code == 404
    drained = post(agent, "/gpus/1/drain", {"reason": "x"}).json()["run"]
    finished = post(agent, f"/remediation/runs/{drained['run_id']}/cancel", {"reason": "x"})
    assert finished.status_code in (200, 409)
    assert [e["data"]["action"] for e in actions(agent)][:3] == ["pause", "resume", "reset_breaker"]


def test_acknowledge_a_firing_alert(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    firing = requests.get(agent.url + API_PREFIX + "/alerts", params={"state": "firing"}).json()
    fingerprint = firing["alerts"][0]["fingerprint"]
    acked = post(agent, f"/alerts/{fingerprint}/ack", {"reason": "on it", "actor": "erin"})
    assert acked.status_code == 200, acked.text
    assert acked.json()["acknowledgement"]["author"] == "erin (token operator, 127.0.0.1)"
    again = requests.get(agent.url + API_PREFIX + "/alerts", params={"state": "firing"}).json()
    assert again["alerts"][0]["acknowledged"] is True
    assert post(agent, "/alerts/ffffffffffffffff/ack", {"reason": "x"}).status_code == 404


@pytest.fixture
def reloading_agent(tmp_path: Path) -> Iterator[tuple[Agent, list[str]]]:
    outcomes: list[str] = []

    def reload() -> None:
        if outcomes and outcomes[-1] == "fail-next":
            outcomes.append("rejected")
            raise ConfigError([Problem("/etc/fleetd/fleetd.yaml", 3, 5, "poll.interval", "bad")])
        outcomes.append("reloaded")

    agent = start_agent(tmp_path / "reload", reload=reload)
    agent.tick()
    try:
        yield agent, outcomes
    finally:
        agent.stop()


def test_reload_runs_the_daemons_reload_and_reports_rejection(
    reloading_agent: tuple[Agent, list[str]],
) -> None:
    agent, outcomes = reloading_agent
    ok = post(agent, "/reload", {"reason": "new rules"})
    assert ok.status_code == 200 and ok.json()["reloaded"] is True
    assert outcomes == ["reloaded"]
    outcomes.append("fail-next")
    bad = post(agent, "/reload", {"reason": "typo"})
    assert bad.status_code == 422
    assert bad.json()["problems"] == ["/etc/fleetd/fleetd.yaml:3:5: poll.interval: bad"]
    record = actions(agent)
    assert record[0]["data"]["outcome"] == "ok"
    assert "rejected" in record[1]["data"]["outcome"]


def test_reload_without_a_callback_is_409(agent: Agent) -> None:
    answer = post(agent, "/reload", {"reason": "x"})
    assert answer.status_code == 409


def test_with_remediation_off_a_human_can_still_drain(tmp_path: Path) -> None:
    """Mode ``off`` stops automatic runs, never the operator (issue 6's safety rails)."""
    agent = start_agent(tmp_path / "noremedy", with_remediation=False)
    try:
        agent.tick()
        state = requests.get(agent.url + API_PREFIX + "/remediation", timeout=10).json()
        assert state["mode"] == "off" and state["active"] == []
        drained = post(agent, "/gpus/1/drain", {"reason": "x"})
        assert drained.status_code == 202 and drained.json()["run"]["plan"] == "drain"
        agent.tick()
        runs = requests.get(agent.url + API_PREFIX + "/remediation/runs", timeout=10).json()
        assert [run["state"] for run in runs["runs"]] == ["drained"]
    finally:
        agent.stop()


@pytest.mark.parametrize(("path", "body"), MUTATIONS, ids=[p for p, _ in MUTATIONS])
def test_deeply_nested_bodies_are_400_not_500(
    untouched: Agent, path: str, body: dict[str, Any]
) -> None:
    """JSON nested 100 000 deep (the decoder's RecursionError) and 33 deep (over the limit of
    32) in an authenticated POST: a 400 naming the limit, and nothing done or recorded."""
    agent = untouched
    url = agent.url + API_PREFIX + path
    inner = '{"reason": "r", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    shallow = '{"reason": "r", "x": ' + "[" * 32 + "]" * 32 + "}"  # 33 levels with the object
    for text in ("[" * 100_000 + "]" * 100_000, inner, shallow):
        answer = requests.post(url, data=text.encode(), headers=AUTH, timeout=10)
        assert answer.status_code == 400, (answer.status_code, answer.text[:200])
        assert "nested too deeply: at most 32 levels" in answer.json()["error"]
    assert actions(agent) == []
