"""``fleetctl baseline capture NODE`` against a real agent whose vLLM workers are stand-ins:
the agent probes each worker, stores the figures in its state dir and shows them back; it
refuses while GPUs are held (not a healthy hive)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.vllm.benchmark import BASELINE_FILE
from tests.api.agent import TOKEN, start_agent
from tests.fleetctl.conftest import Fleet, write_inventory

MODEL = "stand-in/llama-70b"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    clock = FakeClock()
    standins = StandInFleet(tmp_path / "standin", clock=clock)
    workers = [standins.add(f"gpu{i}", [i], model=MODEL) for i in (2, 3)]
    vllm = {
        "workers": [
            {"name": w.name, "url": w.url, "gpus": list(w.gpus), "model": MODEL} for w in workers
        ],
        "benchmark": {"requests": 2, "max_tokens": 4, "warmup": 0},
    }
    agent = start_agent(tmp_path / "n1", clock=clock, vllm=vllm)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    inventory = write_inventory(tmp_path / "inventory.yaml", [(agent.name, agent.address)])
    env = {"FLEETCTL_INVENTORY": str(inventory), "FLEETCTL_TOKEN_FILE": str(token_file)}
    built = Fleet(tmp_path, [agent], None, "", inventory, token_file, env)
    try:
        yield built
    finally:
        built.stop()
        standins.close()


def test_capture_stores_per_worker_figures_and_show_reads_them_back(fleet: Fleet) -> None:
    empty, _ = fleet.run("baseline", "show", "gpu-node-001", "--json")
    assert empty.exit_code == 0 and json.loads(empty.output) == {"baselines": []}
    taken, _ = fleet.run(
        "baseline", "capture", "gpu-node-001", "-r", "healthy hive after install",
        "--timeout", "20",
    )  # fmt: skip
    assert taken.exit_code == 0, taken.output
    lines = taken.output.splitlines()
    assert lines[0].split()[:4] == ["NODE", "WORKER", "MODEL", "TOK/S"]
    assert [line.split()[1] for line in lines[1:]] == ["gpu2", "gpu3"]
    stored = json.loads((fleet.tmp / "n1" / BASELINE_FILE).read_text())
    assert sorted(stored["workers"]) == ["gpu2", "gpu3"]
    shown, _ = fleet.run("baseline", "show", "gpu-node-001", "--json")
    baselines = json.loads(shown.output)["baselines"]
    assert [b["worker"] for b in baselines] == ["gpu2", "gpu3"]
    assert all(b["model"] == MODEL and b["tokens_per_s"] > 0 for b in baselines)
    assert all(b["requests"] == 2 and b["tokens"] == 8 for b in baselines)


def test_capture_is_refused_while_a_gpu_is_held(fleet: Fleet) -> None:
    drained, _ = fleet.run("drain", "gpu-node-001", "3", "-r", "suspect")
    assert drained.exit_code == 0, drained.output
    refused, _ = fleet.run("baseline", "capture", "gpu-node-001", "-r", "try")
    assert refused.exit_code == 1
    assert "not a healthy hive" in refused.output
