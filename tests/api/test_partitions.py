"""The status of a partitioned node through the real HTTP API: each logical device with its
partition, each physical GPU with its partitions folded underneath and the worst of their
verdicts, as docs/api/openapi.yaml describes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis

from tests.api.agent import POLL_INTERVAL, Agent, start_agent

SPEC = Path(__file__).resolve().parents[2] / "docs" / "api" / "openapi.yaml"


@pytest.fixture(scope="module")
def cpx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    agent = start_agent(tmp_path_factory.mktemp("cpx"), model="MI300X", compute_partition="CPX")
    agent.tick()
    try:
        yield agent
    finally:
        agent.stop()


def status(agent: Agent) -> tuple[requests.Response, dict[str, Any]]:
    reply = requests.get(agent.url + "/api/v1/status", timeout=30)
    return reply, reply.json()


def test_a_cpx_node_s_status_folds_64_partitions_under_8_physical_gpus(cpx: Agent) -> None:
    reply, doc = status(cpx)
    schemathesis.openapi.from_path(SPEC)["/api/v1/status"]["GET"].validate_response(reply)
    assert doc["gpus_total"] == 64
    gpu = doc["gpus"][26]
    assert gpu["partition"] == {"id": 2, "compute": "CPX", "memory": "NPS1"}
    assert gpu["physical_gpu"] == 24 and doc["gpus"][24]["physical_gpu"] == 24
    physical = doc["physical_gpus"]
    assert [p["gpu"] for p in physical] == list(range(0, 64, 8))
    third = physical[3]
    assert third["physical"] == 3 and third["partitions"] == list(range(24, 32))
    assert third["compute_partition"] == "CPX" and third["memory_partition"] == "NPS1"
    assert third["bdf"] == doc["gpus"][24]["bdf"] and third["bdf"].endswith(".0")
    assert third["health"]["state"] == "healthy"


def test_a_physical_gpu_s_fault_makes_every_partition_unhealthy_and_rolls_up(cpx: Agent) -> None:
    cpx.sim.inject(3, "ecc_uncorrectable", persistent=True)
    cpx.clock.advance(POLL_INTERVAL)
    cpx.tick(2)
    reply, doc = status(cpx)
    schemathesis.openapi.from_path(SPEC)["/api/v1/status"]["GET"].validate_response(reply)
    states = {g["gpu"]: g["health"]["state"] for g in doc["gpus"]}
    assert {i for i, s in states.items() if s != "healthy"} == set(range(24, 32))
    assert all(states[i] == "unhealthy" for i in range(24, 32))
    assert [a["gpu"] for a in doc["alerts"]["firing"]] == [24]  # one alert, on partition 0
    reasons = doc["gpus"][29]["health"]["reasons"]
    assert reasons[0].startswith("physical GPU (partition 0, gpu 24): GpuEccUncorrectableError")
    physical = doc["physical_gpus"]
    assert [p["health"]["state"] for p in physical] == ["healthy"] * 3 + ["unhealthy"] + [
        "healthy"
    ] * 4
    # partition 0's fault, said once (not again for each partition that inherits it)
    assert physical[3]["health"]["reasons"] == ["gpu 24: GpuEccUncorrectableError (critical)"]
    assert doc["health"]["state"] == "unhealthy"
