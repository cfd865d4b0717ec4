"""A GPU remediation has out of service is out_of_service in the status, /metrics and the
systemd STATUS line, never healthy; dry runs take nothing out."""

from __future__ import annotations

from typing import Any

import requests

from fleetd.api.routes import API_PREFIX
from fleetd.rules.config import RulesConfig, engine_settings
from tests.api.agent import POLL_INTERVAL, TOKEN, Agent

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def status(agent: Agent) -> dict[str, Any]:
    return requests.get(agent.url + API_PREFIX + "/status", timeout=10).json()  # type: ignore[no-any-return]


def drain(agent: Agent, gpu: int) -> str:
    answer = requests.post(
        agent.url + API_PREFIX + f"/gpus/{gpu}/drain",
        json={"reason": "fan noise"},
        headers=AUTH,
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run"]["run_id"])


def test_a_drained_gpu_is_out_of_service_with_its_run(agent: Agent) -> None:
    run_id = drain(agent, 5)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick()
    now = status(agent)  # the API reads remediation as it is now; /metrics, as of the poll
    assert now["gpus_in_service"] == 7 and now["gpus_healthy"] == 7
    assert now["health"]["state"] == "out_of_service"
    assert now["health"]["rules_state"] == "healthy"
    assert now["health"]["reasons"] == [f"gpu 5: drained (run {run_id})"]
    gpu5 = now["gpus"][5]["health"]
    assert gpu5["state"] == "out_of_service" and gpu5["rules_state"] == "healthy"
    assert gpu5["out_of_service"] == {
        "reason": "drained",
        "run_id": run_id,
        "plan": "drain",
        "run_state": "drained",
        "since": gpu5["out_of_service"]["since"],
        "detail": "drained on request",
    }
    assert now["gpus"][4]["health"]["out_of_service"] is None

    agent.clock.advance(POLL_INTERVAL)
    agent.tick()  # the next poll's verdict, as the rules saw it
    metrics = requests.get(agent.url + "/metrics", timeout=10).text
    assert 'fleetd_gpu_health{gpu="5",state="out_of_service",uuid=' in metrics
    lines = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in metrics.splitlines()}
    uuid = now["gpus"][5]["uuid"]
    assert lines[f'fleetd_gpu_health{{gpu="5",state="out_of_service",uuid="{uuid}"}}'] == "1.0"
    assert lines[f'fleetd_gpu_health{{gpu="5",state="healthy",uuid="{uuid}"}}'] == "0.0"
    assert lines[f'fleetd_gpu_service{{gpu="5",state="drained",uuid="{uuid}"}}'] == "1.0"
    assert lines['fleetd_node_health{state="out_of_service"}'] == "1.0"
    snapshot = agent.daemon.last_snapshot
    assert snapshot is not None
    assert agent.daemon.status_line(snapshot) == (
        f"7/8 GPUs healthy; 7/8 in service; GPU5 drained (run {run_id})"
    )


def test_the_api_says_out_of_service_before_the_next_poll(agent: Agent) -> None:
    drain(agent, 2)
    agent.daemon.remediate()  # the drain is carried out; no poll since
    assert status(agent)["gpus"][2]["health"]["state"] == "out_of_service"


def test_a_stalled_loop_keeps_a_drained_gpu_out_and_the_node_unknown(agent: Agent) -> None:
    drain(agent, 1)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick()
    agent.clock.advance(engine_settings(RulesConfig(), POLL_INTERVAL).lookback_s + 1)
    now = status(agent)
    gpu1 = now["gpus"][1]["health"]
    assert gpu1["state"] == "out_of_service" and gpu1["rules_state"] == "unknown"
    assert "no fresh health verdict" in gpu1["reasons"][1]
    assert now["gpus"][0]["health"]["state"] == "unknown"
    assert now["health"]["state"] == "unknown"


def test_a_dry_run_takes_nothing_out_of_service(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(4)
    now = status(agent)
    assert now["remediation"]["mode"] == "dry-run"
    runs = requests.get(agent.url + API_PREFIX + "/remediation/runs", timeout=10).json()
    assert runs["runs"] and all(r["dry_run"] for r in runs["runs"])
    assert now["gpus_in_service"] == 8
    assert now["gpus"][3]["health"]["state"] == "unhealthy"
    assert now["health"]["state"] == "unhealthy"
