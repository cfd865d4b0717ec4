"""Worker adapters against real things: stand-in vLLM over HTTP, the stand-in systemctl,
rotation hooks as commands and as HTTP calls (pytest-httpserver), user command scripts."""

from __future__ import annotations

import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from pytest_httpserver import HTTPServer

from fleetd.clock import FakeClock
from fleetd.configbase import Secret
from fleetd.errors import RemedyError
from fleetd.remedy import machine as m
from fleetd.remedy.commands import run_command
from fleetd.remedy.config import (
    HttpHookConfig,
    ReadmitConfig,
    RotationConfig,
    WorkerCommandsConfig,
    WorkersConfig,
)
from fleetd.remedy.workers import CommandWorkers, SystemdWorkers
from fleetd.sim import build_node
from fleetd.sim.vllm_worker import StandInFleet, StandInVllm
from fleetd.vllm.benchmark import BaselineStore, BenchmarkGate
from fleetd.vllm.client import Load, WorkerGone, read_load
from fleetd.vllm.config import BenchmarkConfig, VllmWorkerConfig

from .machine_world import new_run
from .rig import make_rig, path_with


@pytest.fixture
def fleet(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StandInFleet]:
    sim = build_node("MI300X", seed=1, clock=clock)
    f = StandInFleet(tmp_path, clock=clock, processes=sim)
    f.add("w0", [0], model="m-70b", startup_s=30.0)
    clock.advance(30)
    monkeypatch.setenv("PATH", path_with(f.bin_dir))
    f.sim = sim  # type: ignore[attr-defined]
    try:
        yield f
    finally:
        f.close()


def cfg_of(w: StandInVllm, **extra: object) -> VllmWorkerConfig:
    return VllmWorkerConfig(
        name=w.name, url=w.url, gpus=list(w.gpus), unit=w.unit, model=w.model, **extra
    )


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_systemd_worker_full_cycle(fleet: StandInFleet, clock: FakeClock) -> None:
    w = fleet.workers["w0"]
    out_url, in_url = fleet.rotation_urls()
    rotation = RotationConfig(http=HttpHookConfig(out_url=out_url, in_url=in_url))
    adapter = SystemdWorkers(
        WorkersConfig(rotation=rotation), ReadmitConfig(completion_check=True), node="n1"
    )
    cfg = cfg_of(w)
    w.add_requests(10, duration_s=5.0)  # 8 run, 2 wait
    load = adapter.load(cfg)
    assert (load.running, load.waiting) == (8, 2) and not load.idle
    adapter.unroute(cfg)
    assert fleet.rotation_log == [("w0", "out")] and not w.in_rotation
    clock.advance(10)
    assert adapter.load(cfg).idle
    assert fleet.sim.processes(0)  # type: ignore[attr-defined]
    adapter.stop(cfg)
    assert w.state() == "inactive" and adapter.unit_state(cfg) == "inactive"
    assert fleet.sim.processes(0) == []  # type: ignore[attr-defined]  # released the GPU
    with pytest.raises(RemedyError):
        adapter.load(cfg)  # nothing listens
    adapter.start(cfg)
    ready = adapter.ready(cfg)
    assert not ready.ready and "ConnectionError" in ready.detail  # still loading the model
    clock.advance(30)
    ready = adapter.ready(cfg)
    assert ready.ready and ready.detail == "serving m-70b"
    adapter.reroute(cfg)
    assert w.in_rotation and w.stops == 1 and w.starts == 2 and w.aborted == 0


def test_systemd_worker_wrong_model_and_missing_unit(fleet: StandInFleet) -> None:
    w = fleet.workers["w0"]
    adapter = SystemdWorkers(WorkersConfig(), ReadmitConfig(), node="n1")
    wrong = cfg_of(w).model_copy(update={"model": "other-model"})
    ready = adapter.ready(wrong)
    assert not ready.ready and "model other-model not listed (m-70b)" in ready.detail
    with pytest.raises(RemedyError, match="no systemd unit"):
        adapter.stop(cfg_of(w).model_copy(update={"unit": None}))
    with pytest.raises(RemedyError, match=r"exited 5: Unit nope\.service not found"):
        adapter.stop(cfg_of(w).model_copy(update={"unit": "nope.service"}))
    adapter.unroute(cfg_of(w))  # no rotation hook configured: nothing to do
    assert fleet.rotation_log == []


def test_stop_that_does_not_stop_is_an_error(fleet: StandInFleet, tmp_path: Path) -> None:
    fake = script(tmp_path / "sysctl", 'if [ "$1" = is-active ]; then echo deactivating; fi\n')
    adapter = SystemdWorkers(WorkersConfig(systemctl=fake), ReadmitConfig(), node="n1")
    with pytest.raises(RemedyError, match="still deactivating after systemctl stop"):
        adapter.stop(cfg_of(fleet.workers["w0"]))


def test_rotation_commands_get_placeholders(fleet: StandInFleet, tmp_path: Path) -> None:
    log = tmp_path / "lb.log"
    out = script(tmp_path / "out", f'echo "out $1 $2" >> {log}\n')
    back = script(tmp_path / "in", f'echo "in $1 $2" >> {log}\n')
    rotation = RotationConfig(
        out_command=[out, "{worker}", "{node}"], in_command=[back, "{url}", "{gpus}"]
    )
    adapter = SystemdWorkers(WorkersConfig(rotation=rotation), ReadmitConfig(), node="n1")
    cfg = cfg_of(fleet.workers["w0"])
    adapter.unroute(cfg)
    adapter.reroute(cfg)
    assert log.read_text().splitlines() == ["out w0 n1", f"in {cfg.url} 0"]


def test_http_rotation_hook_sends_token_and_body(
    fleet: StandInFleet, httpserver: HTTPServer
) -> None:
    httpserver.expect_ordered_request(
        "/servers/w0",
        method="PUT",
        headers={"Authorization": "Bearer s3cret"},
        json={"state": "drain", "node": "n1"},
    ).respond_with_data("ok")
    httpserver.expect_ordered_request(
        "/servers/w0", method="PUT", json={"state": "ready"}
    ).respond_with_data("nope", status=409)
    hook = HttpHookConfig(
        out_url=httpserver.url_for("/servers/{worker}"),
        in_url=httpserver.url_for("/servers/{worker}"),
        method="PUT",
        out_body='{"state": "drain", "node": "{node}"}',
        in_body='{"state": "ready"}',
        token=Secret("s3cret"),
    )
    adapter = SystemdWorkers(
        WorkersConfig(rotation=RotationConfig(http=hook)), ReadmitConfig(), node="n1"
    )
    cfg = cfg_of(fleet.workers["w0"])
    adapter.unroute(cfg)
    with pytest.raises(RemedyError) as info:
        adapter.reroute(cfg)
    assert "HTTP 409" in str(info.value) and "s3cret" not in str(info.value)
    httpserver.check_assertions()


def test_command_adapter(tmp_path: Path, fleet: StandInFleet) -> None:
    state = tmp_path / "state"
    state.write_text("3")
    commands = WorkerCommandsConfig(
        drain=[script(tmp_path / "drain", f"echo drained-$1 > {tmp_path}/drained\n"), "{worker}"],
        undrain=[script(tmp_path / "undrain", f"rm -f {tmp_path}/drained\n")],
        status=[script(tmp_path / "status", f"cat {state}\n")],
        ready=[
            script(
                tmp_path / "ready",
                f'test -f {tmp_path}/up || {{ echo "job pending" >&2; exit 1; }}\n',
            )
        ],
        stop=[script(tmp_path / "stop", f"rm -f {tmp_path}/up\n")],
        start=[script(tmp_path / "start", f"touch {tmp_path}/up\n")],
    )
    adapter = CommandWorkers(
        WorkersConfig(adapter="command", commands=commands), ReadmitConfig(), node="n1"
    )
    cfg = cfg_of(fleet.workers["w0"])
    adapter.unroute(cfg)
    assert (tmp_path / "drained").read_text() == "drained-w0\n"
    assert adapter.load(cfg).running == 3
    state.write_text("0 jobs\n")
    assert adapter.load(cfg).idle
    state.write_text("busy")
    with pytest.raises(RemedyError, match="printed 'busy', not a number"):
        adapter.load(cfg)
    adapter.stop(cfg)
    ready = adapter.ready(cfg)
    assert not ready.ready and "exited 1 job pending" in ready.detail
    adapter.start(cfg)
    assert adapter.ready(cfg).ready
    adapter.reroute(cfg)
    assert not (tmp_path / "drained").exists()


def test_command_adapter_without_ready_command_checks_vllm(
    tmp_path: Path, fleet: StandInFleet
) -> None:
    noop = script(tmp_path / "noop", "echo 0\n")
    commands = WorkerCommandsConfig(
        drain=[noop], undrain=[noop], status=[noop], drain_stops_worker=True
    )
    adapter = CommandWorkers(
        WorkersConfig(adapter="command", commands=commands), ReadmitConfig(), node="n1"
    )
    assert adapter.ready(cfg_of(fleet.workers["w0"])).ready


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({}, "no stop command: the workers would keep their GPUs"),
        ({"stop": ["/bin/true"]}, "a stop command needs a start command"),
        (
            {"stop": ["/bin/true"], "start": ["/bin/true"], "drain_stops_worker": True},
            "not both",
        ),
    ],
)
def test_a_command_adapter_that_cannot_release_the_gpus_is_refused(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        WorkerCommandsConfig(
            drain=["/bin/true"], undrain=["/bin/true"], status=["/bin/true"], **fields
        )


def test_without_a_stop_command_the_journal_says_the_drain_ended_the_worker(
    tmp_path: Path, fleet: StandInFleet
) -> None:
    noop = script(tmp_path / "noop", "echo 0\n")
    commands = WorkerCommandsConfig(
        drain=[noop], undrain=[noop], status=[noop], drain_stops_worker=True
    )
    adapter = CommandWorkers(
        WorkersConfig(adapter="command", commands=commands), ReadmitConfig(), node="n1"
    )
    assert adapter.stop(cfg_of(fleet.workers["w0"])) == (
        "the drain command ends the worker (drain_stops_worker)"
    )


@pytest.mark.parametrize("probe", ["after_undrain", "before_undrain"])
def test_the_completion_probe_runs_where_a_self_draining_worker_answers_it(
    tmp_path: Path, fleet: StandInFleet, probe: str
) -> None:
    """A worker that enforces its own drain rejects completions until undrain: the default
    probe (after undrain) passes; the probe before undrain fails and says which it was."""
    worker = fleet.workers["w0"]
    flag = tmp_path / "drained"
    flag.touch()
    drain = script(tmp_path / "drain", f"touch {flag}\n")
    undrain = script(tmp_path / "undrain", f"rm -f {flag}\n")
    worker.refuse_completions_while = lambda: flag.exists()  # its own drain
    commands = WorkerCommandsConfig(
        drain=[drain],
        undrain=[undrain],
        status=[drain],
        drain_stops_worker=True,
        probe=probe,  # type: ignore[arg-type]
    )
    adapter = CommandWorkers(
        WorkersConfig(adapter="command", commands=commands),
        ReadmitConfig(completion_check=True),
        node="n1",
    )
    readiness = adapter.ready(cfg_of(worker))
    if probe == "after_undrain":
        assert readiness.ready and "(after undrain)" in readiness.detail
        assert not flag.exists()  # undrained by the probe; the machine's reroute repeats it
    else:
        assert not readiness.ready
        assert readiness.detail == "probe before undrain failed: 1-token completion: HTTP 503"
        assert flag.exists()


def test_a_probe_that_fails_after_undrain_drains_the_worker_again(
    tmp_path: Path, fleet: StandInFleet
) -> None:
    worker = fleet.workers["w0"]
    flag = tmp_path / "drained"
    flag.touch()
    drain = script(tmp_path / "drain", f"touch {flag}\n")
    undrain = script(tmp_path / "undrain", f"rm -f {flag}\n")
    worker.refuse_completions_while = lambda: True  # a broken engine
    commands = WorkerCommandsConfig(
        drain=[drain], undrain=[undrain], status=[drain], drain_stops_worker=True
    )
    adapter = CommandWorkers(
        WorkersConfig(adapter="command", commands=commands),
        ReadmitConfig(completion_check=True),
        node="n1",
    )
    readiness = adapter.ready(cfg_of(worker))
    assert not readiness.ready
    assert (
        readiness.detail
    ) == "probe after undrain failed: 1-token completion: HTTP 503; drained again"
    assert flag.exists()


def test_read_load_needs_both_gauges(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/metrics").respond_with_data(
        'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 2.0\n'
    )
    cfg = VllmWorkerConfig(name="w", url=httpserver.url_for(""), gpus=[0])
    with pytest.raises(RemedyError, match="vllm:num_requests_waiting not exported"):
        read_load(requests.Session(), cfg, 2.0)


def test_read_load_tells_a_worker_that_is_gone_from_one_that_did_not_answer(
    httpserver: HTTPServer,
) -> None:
    httpserver.expect_request("/metrics").respond_with_data("api key needed", status=401)
    answering = VllmWorkerConfig(name="w", url=httpserver.url_for(""), gpus=[0])
    with pytest.raises(RemedyError, match="HTTP 401") as raised:
        read_load(requests.Session(), answering, 2.0)
    assert not isinstance(raised.value, WorkerGone)  # no reading, not "idle"
    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gone = VllmWorkerConfig(name="w", url=f"http://127.0.0.1:{port}", gpus=[0])
    with pytest.raises(WorkerGone):
        read_load(requests.Session(), gone, 2.0)


def test_read_load_sums_engines(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/metrics").respond_with_data(
        'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n'
        'vllm:num_requests_running{model_name="m",engine="1"} 2.0\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 4.0\n'
    )
    cfg = VllmWorkerConfig(name="w", url=httpserver.url_for(""), gpus=[0])
    load = read_load(requests.Session(), cfg, 2.0)
    assert (load.running, load.waiting) == (3.0, 4.0)


def test_run_command_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    slow = script(tmp_path / "slow", f"sleep 30 & echo $! > {pidfile}; wait\n")
    with pytest.raises(RemedyError, match=r"timed out after 0\.3s"):
        run_command([slow], timeout=0.3)
    child = int(pidfile.read_text())
    try:  # the grandchild got SIGKILL with its group; the kernel may take a moment to end it
        _, alive = psutil.wait_procs([psutil.Process(child)], timeout=5)
        survivors = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.NoSuchProcess:
        return
    assert not survivors, f"sleep {child} survived the timeout"


def test_run_command_failures_are_clear(tmp_path: Path) -> None:
    bad = script(tmp_path / "bad", "echo 'no such backend' >&2; exit 4\n")
    with pytest.raises(RemedyError, match="exited 4: no such backend"):
        run_command([bad, "x"], timeout=5)
    with pytest.raises(RemedyError, match="cannot run /nonexistent/tool"):
        run_command(["/nonexistent/tool"], timeout=5)
    assert run_command([bad], timeout=5, check=False).returncode == 4


class Barrier:
    """An adapter whose every call waits until ``parties`` calls are in flight at once:
    run one after another they never meet, and the barrier breaks."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5.0)
        self.calls: list[str] = []

    def _meet(self, worker: VllmWorkerConfig) -> None:
        self.calls.append(worker.name)
        self.barrier.wait()

    def load(self, worker: VllmWorkerConfig) -> Load:
        self._meet(worker)
        return Load(0.0, 0.0)

    def stop(self, worker: VllmWorkerConfig) -> str | None:
        self._meet(worker)
        return None


def test_a_steps_per_worker_commands_run_side_by_side(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(tmp_path, clock)  # eight workers
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    try:
        executor = rig.remediation.executor
        adapter = Barrier(8)
        executor._adapter = adapter  # type: ignore[assignment]
        run = new_run(workers=tuple(f"gpu{i}" for i in range(8)))[0]
        names = [f"gpu{i}" for i in range(8)]
        loads = executor._carry_out_all(run, [m.ReadLoad(n) for n in names], clock.now())
        assert [r.worker for r in loads] == names  # type: ignore[union-attr]
        assert all(isinstance(r, m.LoadResult) and r.error is None for r in loads)
        stops = executor._carry_out_all(run, [m.StopUnit(n) for n in names], clock.now())
        assert all(isinstance(r, m.StopResult) and r.error is None for r in stops)
    finally:
        rig.close()


def test_a_command_worker_below_its_baseline_after_undrain_is_drained_again(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The after_undrain probe left the worker undrained; the benchmark gate that follows
    finds it slow, so the executor drains it again before the machine holds it."""
    rig = make_rig(tmp_path, clock, workers_on=(3,))
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    try:
        worker = rig.fleet.workers["gpu3"]
        flag = tmp_path / "drained"
        commands = WorkerCommandsConfig(
            drain=[script(tmp_path / "drain", f"touch {flag}\n")],
            undrain=[script(tmp_path / "undrain", f"rm -f {flag}\n")],
            status=[script(tmp_path / "status", "echo 0\n")],
            drain_stops_worker=True,
        )
        executor = rig.remediation.executor
        executor._adapter = CommandWorkers(
            WorkersConfig(adapter="command", commands=commands),
            ReadmitConfig(completion_check=True),
            node="n1",
        )
        bench = BenchmarkConfig(requests=3, max_tokens=6, warmup=0, latency_factor=None)
        gate = BenchmarkGate(bench, BaselineStore(tmp_path / "baselines.json"))
        gate.capture([cfg_of(worker)], clock.now())
        executor._benchmark = gate
        run = new_run(workers=("gpu3",))[0]
        passed = executor._check_ready(run, m.CheckReady("gpu3"), clock.now())
        assert isinstance(passed, m.ReadyResult) and passed.ready and not passed.below_baseline
        assert not flag.exists() and passed.benchmark.startswith("benchmark ")
        worker.engine_speed = 0.3
        slow = executor._check_ready(run, m.CheckReady("gpu3"), clock.now())
        assert isinstance(slow, m.ReadyResult) and slow.below_baseline
        assert slow.benchmark.startswith("below baseline: ")
        assert flag.exists()  # drained again
    finally:
        rig.close()
