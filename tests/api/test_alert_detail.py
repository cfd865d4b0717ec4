"""GET /api/v1/alerts/{fingerprint}: the link PagerDuty events and Alertmanager's
generatorURL carry, answered for firing, dispatcher-held and long-resolved alerts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fleetd.alert.notification import AlertRecord
from fleetd.alert.webhook import generator_url
from fleetd.api.routes import API_PREFIX
from tests.api.agent import POLL_INTERVAL, TOKEN, Agent, start_agent

AUTH = {"Authorization": f"Bearer {TOKEN}"}
RETENTION_S = 60.0


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """An agent whose engine forgets resolved alerts after a minute."""
    running = start_agent(tmp_path / "agent", rules={"resolved_retention": f"{RETENTION_S:g}s"})
    running.tick(3)
    try:
        yield running
    finally:
        running.stop()


def get(agent: Agent, path: str) -> requests.Response:
    return requests.get(agent.url + API_PREFIX + path, timeout=10)


def post(agent: Agent, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(agent.url + API_PREFIX + path, json=body, headers=AUTH, timeout=10)


def firing_ecc(agent: Agent) -> str:
    agent.sim.inject(3, "ecc_uncorrectable")
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    (alert,) = get(agent, "/alerts?state=firing").json()["alerts"]
    return str(alert["fingerprint"])


def test_the_generator_url_of_a_firing_alert_answers_with_the_alert(agent: Agent) -> None:
    fingerprint = firing_ecc(agent)
    record = AlertRecord(fingerprint, "GpuEccUncorrectableError", "firing", "critical", ())
    link = generator_url(agent.url, record)
    answer = requests.get(link, timeout=10)
    assert answer.status_code == 200, answer.text
    alert = answer.json()["alert"]
    assert alert["fingerprint"] == fingerprint and alert["state"] == "firing"
    assert alert["rule"] == "GpuEccUncorrectableError" and alert["gpu"] == 3
    assert alert["severity"] == "critical" and alert["source"] == "rules"
    assert alert["labels"]["alertname"] == "GpuEccUncorrectableError"
    assert alert["annotations"]["summary"].startswith("GPU 3: 1 new uncorrectable")
    assert alert["runbook"] == "docs/runbooks/GpuEccUncorrectableError.md"
    assert alert["fired_at"] is not None and alert["resolved_at"] is None
    assert alert["silenced_by"] == [] and alert["acknowledged"] is False
    assert alert["acknowledgement"] is None
    (fired,) = alert["history"]
    assert fired["kind"] == "alert" and fired["data"]["state"] == "firing"


def test_silences_and_acknowledgements_show(agent: Agent) -> None:
    fingerprint = firing_ecc(agent)
    silence = post(
        agent, "/silences", {"reason": "swap", "matchers": ['gpu="3"'], "duration": "1h"}
    )
    assert silence.status_code == 201
    acked = post(agent, f"/alerts/{fingerprint}/ack", {"reason": "on it", "actor": "erin"})
    assert acked.status_code == 200, acked.text
    alert = get(agent, f"/alerts/{fingerprint}").json()["alert"]
    assert alert["silenced_by"] == [silence.json()["silence"]["id"]]
    assert alert["acknowledged"] is True
    assert alert["acknowledgement"]["comment"] == "on it"
    assert alert["acknowledgement"]["author"].startswith("erin")


def test_an_alert_only_the_dispatcher_holds(agent: Agent) -> None:
    assert post(agent, "/gpus/5/drain", {"reason": "fan"}).status_code == 202
    agent.clock.advance(POLL_INTERVAL)
    agent.tick()
    held = [a for a in get(agent, "/alerts").json()["alerts"] if a["rule"] == "GpuRemediationHeld"]
    assert held, get(agent, "/alerts").json()
    alert = get(agent, f"/alerts/{held[0]['fingerprint']}").json()["alert"]
    assert alert["source"] == "dispatcher" and alert["gpu"] == 5 and alert["state"] == "firing"
    assert alert["runbook"] is None and alert["history"] == []


def test_a_resolved_alert_the_engine_forgot_is_rebuilt_from_the_event_log(agent: Agent) -> None:
    fingerprint = firing_ecc(agent)
    agent.sim.reset_hive(3)  # the counter is zeroed: the alert resolves
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    recent = get(agent, f"/alerts/{fingerprint}").json()["alert"]
    assert recent["state"] == "resolved" and recent["source"] == "rules"
    agent.clock.advance(RETENTION_S)
    agent.tick(2)
    assert all(a["fingerprint"] != fingerprint for a in get(agent, "/alerts").json()["alerts"])
    old = get(agent, f"/alerts/{fingerprint}")
    assert old.status_code == 200, old.text
    alert = old.json()["alert"]
    assert alert["source"] == "events" and alert["state"] == "resolved"
    assert alert["rule"] == "GpuEccUncorrectableError" and alert["gpu"] == 3
    assert alert["fired_at"] is not None and alert["resolved_at"] is not None
    assert alert["runbook"] == "docs/runbooks/GpuEccUncorrectableError.md"
    assert [e["data"]["state"] for e in alert["history"]] == ["firing", "resolved"]


def test_an_unknown_fingerprint_is_404_with_a_json_error(agent: Agent) -> None:
    missing = get(agent, "/alerts/0123456789abcdef")
    assert missing.status_code == 404
    assert "no alert with fingerprint '0123456789abcdef'" in missing.json()["error"]
    assert get(agent, "/alerts/0123456789abcdef?node=other").status_code == 404
