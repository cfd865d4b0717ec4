"""The daemon's jobs run on a thread pool at once: none may hold up another.

A remediation step can take minutes (``systemctl stop`` waits for vLLM's shutdown timeout, a
burn-in runs for ten), while the poll must keep its cadence: systemd's watchdog expects a
WATCHDOG=1 from every poll and restarts fleetd after ``WatchdogSec`` without one.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.daemon import REDISCOVER_INTERVAL_S, Daemon, SimContext
from fleetd.model import AlertState
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.store.alert_state import AlertStateStore

POLL = 5.0
JOIN_S = 10.0  # generous bound for a call that must not wait on another thread


def blocked_remediation_config(state: Path, gate: Path) -> FleetdConfig:
    """Remediation on, through the command adapter whose ``drain`` blocks until ``gate``
    (a FIFO) is written: a step that takes as long as the test wants."""
    block = [sys.executable, "-c", f"open({str(gate)!r}).read()"]
    ok = [sys.executable, "-c", "print(0)"]
    data: dict[str, Any] = {
        "node": {"name": "n1"},
        "state_dir": str(state),
        "poll": {"interval": POLL, "gpu_timeout": 2.0},
        "http": {"port": 0},
        "rules": {"local_dir": None},
        "vllm": {"workers": [{"name": "w3", "url": "http://127.0.0.1:9/", "gpus": [3]}]},
        "remediation": {
            "mode": "on",
            "drain": {"balancer_delay": 0, "poll_interval": 0},
            "workers": {
                "adapter": "command",
                "command_timeout": 60,
                "commands": {"drain": block, "undrain": ok, "status": ok, "ready": ok},
            },
        },
    }
    return FleetdConfig.model_validate(data)


def saved_firing_gpus(daemon: Daemon, rule: str) -> set[str]:
    """GPUs whose ``rule`` alert the database holds as firing (what a restart restores)."""
    assert daemon.store.db is not None
    entries, _ = AlertStateStore(daemon.store.db).load()
    return {
        dict(e.alert.labels)["gpu"]
        for e in entries
        if e.alert.key.rule == rule and e.alert.state == AlertState.FIRING
    }


def in_thread(body: Any) -> threading.Thread:
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_a_long_remediation_step_never_holds_up_the_poll(tmp_path: Path, clock: FakeClock) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    node = build_node("MI355X", seed=4, clock=clock)
    daemon = Daemon(
        blocked_remediation_config(tmp_path, gate),
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    daemon.start()
    remediating: threading.Thread | None = None
    try:
        node.inject(3, "ecc_uncorrectable", persistent=True)
        for _ in range(3):
            clock.advance(POLL)
            daemon.tick()
        assert daemon.remediation is not None
        assert [r.gpu_indices for r in daemon.remediation.status().active] != []
        remediating = in_thread(daemon.remediate)  # blocks in the drain command
        remediating.join(0.5)
        assert remediating.is_alive(), "the drain step should be waiting on the gate"

        # meanwhile a second fault fires and polls go on, without waiting for the step
        node.inject(5, "ecc_uncorrectable", persistent=True)
        ticks = 0

        def poll_a_while() -> None:
            nonlocal ticks
            for _ in range(3):
                clock.advance(POLL)
                daemon.tick()
                ticks += 1

        polling = in_thread(poll_a_while)
        polling.join(JOIN_S)
        assert not polling.is_alive() and ticks == 3, "the poll waited for remediation"
        # not yet in remediation's journal, so not yet saved as firing: after a crash now,
        # the restored engine fires it again and remediation still gets it
        firing_now = {
            dict(a.labels)["gpu"]
            for a in daemon.engine.alerts()
            if a.key.rule == "GpuEccUncorrectableError" and a.state == AlertState.FIRING
        }
        assert "5" in firing_now
        assert "5" not in saved_firing_gpus(daemon, "GpuEccUncorrectableError")
        status = in_thread(lambda: daemon.remediation.status() if daemon.remediation else None)
        status.join(JOIN_S)
        assert not status.is_alive(), "the status view waited for remediation"
    finally:
        with open(gate, "w") as writer:  # let the drain command finish
            writer.write("go")
        if remediating is not None:
            remediating.join(JOIN_S)
    try:
        # the fault that fired during the step reaches remediation with the next job run
        daemon.remediate()
        assert daemon.remediation is not None
        noted = [e.message for e in daemon.remediation.events() if e.kind == "further_trigger"]
        assert any("GPU 5" in text for text in noted)
        # handed over: the next poll saves the alert state that was held back meanwhile
        clock.advance(POLL)
        daemon.tick()
        assert "5" in saved_firing_gpus(daemon, "GpuEccUncorrectableError")
    finally:
        daemon.stop()


def test_a_fleet_registry_that_is_down_never_stops_the_node_daemon(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The registry carries the heartbeat and the fleet-wide cap; without it the node must
    still start, poll and alert (no lease is granted until it answers)."""
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = FleetdConfig.model_validate(
        {
            "node": {"name": "n1"},
            "state_dir": str(tmp_path),
            "http": {"port": 0},
            "rules": {"local_dir": None},
            "registry": {"url": f"postgresql://fleet:pw@127.0.0.1:{port}/fleet", "timeout": 1},
        }
    )
    node = build_node("MI355X", seed=9, clock=clock)
    daemon = Daemon(
        cfg,
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    daemon.start()
    try:
        clock.advance(POLL)
        daemon.tick()
        daemon.remediate()
        assert daemon.heartbeat is not None
        assert daemon.heartbeat.beat(clock.now()) is False
        assert daemon.last_snapshot is not None and len(daemon.last_snapshot.gpus) == 8
    finally:
        daemon.stop()


def test_gpu_rediscovery_waits_for_the_poll_in_progress(tmp_path: Path, clock: FakeClock) -> None:
    """Rediscovery shuts amdsmi down and initialises it again: the handles a poll is using
    go stale under it. The store job rediscovers while a GPU is missing, so it must wait."""
    cfg = FleetdConfig.model_validate(
        {
            "node": {"name": "n1"},
            "state_dir": str(tmp_path),
            "poll": {"interval": POLL, "gpu_timeout": 60.0},
            "http": {"port": 0},
            "rules": {"local_dir": None},
        }
    )
    node = build_node("MI355X", seed=10, clock=clock)
    daemon = Daemon(
        cfg,
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    daemon.start()
    polling: threading.Thread | None = None
    try:
        node.inject(7, "gpu_off_bus")
        daemon.backend.rediscover()  # as after a reset: GPU 7 is known missing now
        assert not daemon.backend.present(7)
        node.inject(0, "hung_call", function="amdsmi_get_power_info")
        clock.advance(POLL)
        polling = in_thread(daemon.tick)
        polling.join(0.5)
        assert polling.is_alive(), "the poll should be blocked in GPU 0's hung call"
        clock.advance(REDISCOVER_INTERVAL_S)
        rediscovering = in_thread(daemon.maintain)
        rediscovering.join(0.5)
        assert rediscovering.is_alive(), "rediscovery ran while a poll was in progress"
        node.release_hangs()
        polling.join(JOIN_S)
        rediscovering.join(JOIN_S)
        assert not polling.is_alive() and not rediscovering.is_alive()
    finally:
        node.release_hangs()
        if polling is not None:
            polling.join(JOIN_S)
        daemon.stop()
