"""The stand-in vLLM server: requests over injected time, unit control, the GPU process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from fleetd.clock import FakeClock
from fleetd.errors import RemedyError
from fleetd.remedy.commands import run_command
from fleetd.sim import SimNode, build_node
from fleetd.sim.vllm_worker import StandInFleet


@pytest.fixture
def sim(clock: FakeClock) -> SimNode:
    return build_node("MI355X", seed=2, clock=clock)


@pytest.fixture
def fleet(tmp_path: Path, clock: FakeClock, sim: SimNode) -> Iterator[StandInFleet]:
    f = StandInFleet(tmp_path, clock=clock, processes=sim)
    try:
        yield f
    finally:
        f.close()


def test_requests_finish_and_queue_over_injected_time(
    fleet: StandInFleet, clock: FakeClock
) -> None:
    w = fleet.add("w", [0], max_running=2, tokens_per_s=10.0)
    w.add_requests(3, duration_s=4.0)
    assert w.load() == (2, 1)
    clock.advance(4)
    assert w.load() == (1, 0)  # two done; the queued one started at t=4
    assert w.generation_tokens() == pytest.approx(80.0)
    clock.advance(4)
    assert w.load() == (0, 0) and w.completed == 3
    text = requests.get(w.url + "/metrics", timeout=2).text
    assert 'vllm:num_requests_running{model_name="stand-in/llama",engine="0"} 0.0' in text
    assert "vllm:generation_tokens_total" in text and 'finished_reason="stop"} 3.0' in text


def test_http_surface(fleet: StandInFleet) -> None:
    w = fleet.add("w", [1], model="m")
    assert requests.get(w.url + "/health", timeout=2).status_code == 200
    assert requests.get(w.url + "/v1/models", timeout=2).json()["data"][0]["id"] == "m"
    ok = requests.post(
        w.url + "/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 1}, timeout=2
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 1
    assert (
        requests.post(w.url + "/v1/completions", json={"model": "x"}, timeout=2).status_code == 404
    )


def test_unit_stop_start_and_the_gpu_process(
    fleet: StandInFleet, clock: FakeClock, sim: SimNode
) -> None:
    w = fleet.add("w", [2, 3], startup_s=10.0)
    assert w.state() == "activating"
    with pytest.raises(requests.ConnectionError):
        requests.get(w.url + "/health", timeout=2)  # loading: not listening yet
    clock.advance(10)
    assert w.state() == "active"
    assert [p.pid for p in sim.processes(2)] == [w.pid] == [p.pid for p in sim.processes(3)]
    w.add_requests(2, duration_s=100.0)
    w.stop_unit()
    assert w.state() == "inactive" and w.aborted == 2 and sim.processes(2) == []
    w.start_unit()
    clock.advance(10)
    assert w.state() == "active" and w.starts == 2 and sim.processes(2)[0].pid == w.pid


def test_a_hive_reset_kills_an_undrained_worker(
    fleet: StandInFleet, clock: FakeClock, sim: SimNode
) -> None:
    w = fleet.add("w", [5])
    w.add_requests(1, duration_s=60.0)
    pid = w.pid
    record = sim.reset_hive(0)
    assert pid is not None and record.killed_pids == (pid,) and w.pid is None
    assert w.state() == "failed" and w.aborted == 1
    with pytest.raises(requests.ConnectionError):
        requests.get(w.url + "/health", timeout=2)


def test_fail_start_never_serves(fleet: StandInFleet, clock: FakeClock) -> None:
    w = fleet.add("w", [0])
    w.fail_start = True
    w.stop_unit()
    w.start_unit()
    clock.advance(3600)
    assert w.state() == "activating"


def test_stand_in_systemctl_script(fleet: StandInFleet, clock: FakeClock) -> None:
    w = fleet.add("w", [0], unit="vllm@0.service")
    ctl = str(fleet.systemctl)
    assert run_command([ctl, "is-active", "vllm@0.service"], timeout=10).stdout.strip() == "active"
    run_command([ctl, "stop", "vllm@0"], timeout=10)
    assert w.state() == "inactive"
    inactive = run_command([ctl, "is-active", "vllm@0.service"], timeout=10, check=False)
    assert inactive.returncode == 3 and inactive.stdout.strip() == "inactive"
    run_command([ctl, "--no-block", "start", "vllm@0.service"], timeout=10)
    assert w.state() == "active"
    with pytest.raises(RemedyError, match=r"exited 5: Unit vllm@9\.service not found"):
        run_command([ctl, "restart", "vllm@9.service"], timeout=10)
    with pytest.raises(RemedyError, match="exited 2"):
        run_command([ctl, "stop"], timeout=10)
