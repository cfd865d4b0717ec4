"""The read endpoints against a real agent on the simulator."""

from __future__ import annotations

from typing import Any

import requests

from fleetd.rules.config import RulesConfig, engine_settings
from tests.api.agent import POLL_INTERVAL, Agent

API = "/api/v1"


def get(agent: Agent, path: str, **params: Any) -> requests.Response:
    return requests.get(agent.url + API + path, params=params, timeout=10)


def test_status_has_every_gpu_with_key_readings_health_and_data_age(agent: Agent) -> None:
    status = get(agent, "/status").json()
    assert status["node"] == agent.name
    assert status["health"]["state"] == "healthy"
    assert status["gpus_total"] == 8 and status["gpus_healthy"] == 8
    assert status["data_age_s"] == 0.0
    hotspots = [g["readings"]["temperature_hotspot_c"] for g in status["gpus"]]
    assert status["hottest_junction_c"] == max(hotspots)
    assert status["power_w"] == round(sum(g["readings"]["power_w"] for g in status["gpus"]), 1)
    gpu = status["gpus"][0]
    assert gpu["model"] == "MI355X" and gpu["uuid"] and gpu["bdf"]
    assert gpu["readings"]["pcie_width"] == gpu["readings"]["pcie_max_width"] == 16
    assert gpu["readings"]["ecc_uncorrectable_total"] == 0
    assert gpu["alerts"] == {"critical": 0, "warning": 0, "info": 0}
    assert status["remediation"]["available"] is True
    assert status["remediation"]["mode"] == "dry-run"
    assert status["rules"]["loaded"] > 10 and status["rules"]["failing"] == []


def test_a_missing_reading_is_null_never_zero(agent: Agent) -> None:
    # power comes from the gpu_metrics table (collect.metrics_table)
    agent.sim.inject(2, "unsupported_fields", calls=["amdsmi_get_gpu_metrics_info"])
    agent.clock.advance(POLL_INTERVAL)
    agent.tick()
    gpus = get(agent, "/gpus").json()["gpus"]
    assert gpus[2]["readings"]["power_w"] is None
    assert gpus[2]["missing_readings"] > 0
    assert gpus[1]["readings"]["power_w"] is not None


def test_data_age_grows_and_a_stalled_loop_turns_health_unknown(agent: Agent) -> None:
    agent.clock.advance(7)
    status = get(agent, "/status").json()
    assert status["data_age_s"] == 7.0
    assert status["health"]["state"] == "healthy"
    assert status["health"]["data_age_s"] == 7.0
    stale_after = engine_settings(RulesConfig(), POLL_INTERVAL).lookback_s
    agent.clock.advance(stale_after)
    status = get(agent, "/status").json()
    assert status["health"]["state"] == "unknown"
    assert status["gpus_healthy"] == 0
    assert all(g["health"]["state"] == "unknown" for g in status["gpus"])
    assert "no fresh health verdict" in status["health"]["reasons"][0]


def test_a_faulty_gpu_is_unhealthy_with_its_alert(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    status = get(agent, "/status").json()
    assert status["health"]["state"] == "unhealthy"
    assert status["gpus_healthy"] == 7
    assert status["alerts"]["critical"] == 1
    assert status["alerts"]["firing"][0]["rule"] == "GpuEccUncorrectableError"
    assert status["alerts"]["firing"][0]["gpu"] == 3
    gpu3 = status["gpus"][3]
    assert gpu3["health"]["state"] == "unhealthy"
    assert gpu3["alerts"]["critical"] == 1
    assert gpu3["readings"]["ecc_uncorrectable_total"] == 1

    firing = get(agent, "/alerts", state="firing").json()["alerts"]
    assert [(a["rule"], a["gpu"], a["source"]) for a in firing] == [
        ("GpuEccUncorrectableError", 3, "rules")
    ]
    assert firing[0]["remediation_plan"] == "reset"
    assert get(agent, "/alerts", gpu=2).json()["alerts"] == []
    assert get(agent, "/alerts", severity="warning").json()["alerts"] == []


def test_explain_says_which_rule_which_readings_what_was_done_and_what_next(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    explained = get(agent, "/gpus/3/explain").json()
    assert explained["health"]["state"] == "unhealthy"
    assert explained["summary"].startswith("GPU 3 is unhealthy: GpuEccUncorrectableError")
    (rule,) = explained["alerts"]
    assert rule["rule"] == "GpuEccUncorrectableError"
    assert "fleetd_gpu_ecc_errors_total" in rule["expr"]
    assert rule["remediation_plan"] == "reset"
    assert rule["runbook"] == "docs/runbooks/GpuEccUncorrectableError.md"
    ue = [r for r in explained["readings"] if r["labels"].get("type") == "uncorrectable"]
    assert ue and ue[0]["value"] == 1.0 and ue[0]["age_s"] == 0.0
    assert explained["remediation"]["mode"] == "dry-run"
    # the dry-run policy planned a run for the alert and logged it: that is what was done
    assert explained["remediation"]["runs"], explained["remediation"]
    assert explained["remediation"]["runs"][0]["dry_run"] is True
    assert any(e["kind"] == "remediation" for e in explained["events"])
    assert explained["next"]

    healthy = get(agent, "/gpus/0/explain").json()
    assert healthy["summary"] == "GPU 0 is healthy: no alert is pending or firing for it"
    assert healthy["next"] == ["nothing: the GPU is healthy and no alert is pending"]


def test_gpu_detail_has_bounded_history(agent: Agent) -> None:
    agent.tick(10)
    detail = get(agent, "/gpus/1", window="60", points="4").json()
    assert detail["gpu"]["gpu"] == 1
    history = detail["history"]
    assert history["end"] - history["start"] == 60
    temps = history["series"]["temperature_hotspot_c"]
    assert 1 <= len(temps) <= 5
    assert all(history["start"] <= ts <= history["end"] for ts, _ in temps)
    full = get(agent, "/gpus/1", window="1m").json()["history"]["series"]["power_w"]
    assert len(full) == 12  # 13 polls 5 s apart, 12 within the last minute's (start, end]
    assert get(agent, "/gpus/1", window="2h").json()["history"]["series"]["up"][-1][1] == 1.0


def test_bad_query_parameters_are_400_and_unknown_gpu_or_node_404(agent: Agent) -> None:
    assert get(agent, "/gpus/abc").status_code == 400
    assert get(agent, "/gpus/-1").status_code == 400
    assert get(agent, "/gpus/8").status_code == 404
    assert get(agent, "/gpus/99/explain").status_code == 404
    assert get(agent, "/gpus/1", window="soon").status_code == 400
    assert get(agent, "/gpus/1", window="30d").status_code == 400
    assert get(agent, "/gpus/1", points="1").status_code == 400
    assert get(agent, "/alerts", state="burning").status_code == 400
    assert get(agent, "/alerts", gpu="x").status_code == 400
    assert get(agent, "/events", kind="Not-Snake").status_code == 400
    assert get(agent, "/events", since="yesterday").status_code == 400
    assert get(agent, "/events", limit="0").status_code == 400
    assert get(agent, "/silences", state="sleeping").status_code == 400
    assert get(agent, "/remediation/runs", active="maybe").status_code == 400
    wrong = get(agent, "/status", node="gpu-node-999")
    assert wrong.status_code == 404
    assert "gpu-node-999" in wrong.json()["error"]
    assert get(agent, "/status", node=agent.name).status_code == 200
    assert get(agent, "/remediation/runs/nope").status_code == 404
    assert get(agent, "/silences/nope").status_code == 404


def test_unknown_paths_and_methods_answer_json(agent: Agent) -> None:
    missing = requests.get(agent.url + API + "/nothing", timeout=10)
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = requests.delete(agent.url + API + "/status", timeout=10)
    assert wrong.status_code == 405
    assert wrong.headers["Allow"] == "GET"
    assert "error" in wrong.json()
    odd = requests.request("TRACE", agent.url + API + "/status", timeout=10)
    assert odd.status_code == 405


def test_rules_endpoint_shows_rule_health(agent: Agent) -> None:
    rules = get(agent, "/rules").json()
    names = {r["rule"] for r in rules["rules"]}
    assert "GpuEccUncorrectableError" in names
    assert all(r["health"] == "ok" for r in rules["rules"])
    assert rules["reload"]["last_ok"] is True
    assert rules["last_eval_at"] == agent.clock.now()


def test_remediation_reads(agent: Agent) -> None:
    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    runs = get(agent, "/remediation/runs").json()["runs"]
    assert runs and runs[0]["trigger"]["rule"] == "GpuEccUncorrectableError"
    assert 3 in runs[0]["gpus"]
    one = get(agent, f"/remediation/runs/{runs[0]['run_id']}").json()
    assert one["run"]["run_id"] == runs[0]["run_id"]
    assert one["events"][0]["kind"] == "run_planned"
    assert [e["seq"] for e in one["events"]] == sorted(e["seq"] for e in one["events"])
    # the reset unit is the XGMI hive: a run for GPU 3 touches GPU 6 too
    assert get(agent, "/remediation/runs", gpu=6).json()["runs"] == runs
    assert get(agent, "/remediation/runs", gpu=12).json()["runs"] == []
    assert get(agent, "/remediation/runs", active="true").json()["runs"] == [
        r for r in runs if not r["terminal"]
    ]
    state = get(agent, "/remediation").json()
    assert state["mode"] == "dry-run" and state["pause"]["paused"] is False
    assert state["breaker"]["tripped"] is False


def test_reads_while_the_loop_evaluates_never_fail(agent: Agent) -> None:
    """HTTP threads read while the poll loop changes alert state: no 5xx, ever."""
    from concurrent.futures import ThreadPoolExecutor

    agent.sim.inject(3, "ecc_uncorrectable", persistent=True)
    agent.sim.inject(5, "thermal_runaway")
    statuses: list[int] = []

    def hammer() -> None:
        for path in ("/alerts", "/status", "/gpus/3/explain") * 10:
            statuses.append(get(agent, path).status_code)

    with ThreadPoolExecutor(max_workers=3) as pool:
        readers = [pool.submit(hammer) for _ in range(3)]
        for _ in range(20):
            agent.clock.advance(POLL_INTERVAL)
            agent.tick()
        for reader in readers:
            reader.result()
    assert statuses and set(statuses) == {200}


def test_window_summaries_come_from_raw_samples_not_the_stepped_points(agent: Agent) -> None:
    """An ECC counter that a reset zeroed between two steps still shows its maximum."""
    agent.sim.inject(3, "ecc_uncorrectable")
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(2)
    agent.sim.reset_hive(3)
    agent.clock.advance(POLL_INTERVAL)
    agent.tick(10)
    history = get(agent, "/gpus/3", window="1h", points="4").json()["history"]
    stepped = [v for _, v in history["series"]["ecc_uncorrectable_total"]]
    assert max(stepped) == 0.0  # one value per 15-minute step: the spike is not among them
    ue = history["summary"]["ecc_uncorrectable_total"]
    assert ue["max"] == 1.0 and ue["min"] == 0.0 and ue["last"] == 0.0
    assert ue["samples"] == 15  # every poll of the agent so far
    assert 0.0 < ue["avg"] < 1.0
    day = get(agent, "/gpus/3", window="24h", points="4").json()["history"]["summary"]
    assert day["ecc_uncorrectable_total"]["max"] == 1.0
    assert get(agent, "/gpus/0", window="1h").json()["history"]["summary"]["power_w"]["samples"]
