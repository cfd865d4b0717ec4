"""The daemon's jobs run on their own threads at once: none may hold up another.

A remediation step can take minutes (``systemctl stop`` waits for vLLM's shutdown timeout, a
burn-in runs for ten), while the poll must keep its cadence: systemd's watchdog expects a
WATCHDOG=1 from every poll and restarts fleetd after ``WatchdogSec`` without one.

Time: /healthz and the watchdog measure poll age on the monotonic clock, and on a
SteadyClock the daemon's ``now`` (every ``for``, timer and deadline) never steps with the
wall clock. FakeSystemClock steps the wall clock alone, as NTP or ``date -s`` do.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetd.clock import SLEW_RATE, Clock, FakeClock, FakeSystemClock, SteadyClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig, load_config
from fleetd.daemon import REDISCOVER_INTERVAL_S, REDISCOVER_PERIOD_S, Daemon, SimContext
from fleetd.model import AlertState
from fleetd.rules.state_store import AlertStateStore
from fleetd.sdnotify import SystemdNotify
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node

POLL = 5.0
JOIN_S = 10.0  # generous bound for a call that must not wait on another thread


def blocked_remediation_config(state: Path, gate: Path) -> FleetdConfig:
    """Remediation on, through the command adapter whose ``drain`` blocks until ``gate``
    (a FIFO) is written: a step that takes as long as the test wants. The ECC counters are the
    fault's only report: the event sources (kernel log, CPER, KFD events) run on real time,
    and one of them reporting first would carry the page under its own rule, at a moment the
    hand-driven fake clock cannot order."""
    block = [sys.executable, "-c", f"open({str(gate)!r}).read()"]
    ok = [sys.executable, "-c", "print(0)"]
    data: dict[str, Any] = {
        "node": {"name": "n1"},
        "state_dir": str(state),
        "poll": {"interval": POLL, "gpu_timeout": 2.0},
        "http": {"port": 0},
        "rules": {"local_dir": None},
        "vllm": {"workers": [{"name": "w3", "url": "http://127.0.0.1:9/", "gpus": [3]}]},
        "events": {
            "kernel_log": {"source": "off"},
            "cper": {"enabled": False},
            "amdsmi_events": {"enabled": False},
        },
        "remediation": {
            "mode": "on",
            "drain": {"balancer_delay": 0, "poll_interval": 0},
            "workers": {
                "adapter": "command",
                "command_timeout": 60,
                "commands": {
                    "drain": block,
                    "undrain": ok,
                    "status": ok,
                    "ready": ok,
                    "drain_stops_worker": True,
                },
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
        node.inject(0, "hung_call", function="amdsmi_get_gpu_metrics_info")
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


# ------------------------------------------------------------------------------------ time
HOUR = 3600.0


class RecordingNotify(SystemdNotify):
    """What the daemon would tell systemd."""

    def __init__(self) -> None:
        super().__init__("")
        self.sent: list[tuple[str, ...]] = []

    def notify(self, *fields: str) -> bool:
        self.sent.append(fields)
        return True

    def pings(self) -> int:
        return sum(1 for fields in self.sent if fields == ("WATCHDOG=1",))


def plain_config(state: Path) -> FleetdConfig:
    return FleetdConfig.model_validate(
        {
            "node": {"name": "n1"},
            "state_dir": str(state),
            "poll": {"interval": POLL, "gpu_timeout": 2.0},
            "http": {"port": 0},
            "rules": {"local_dir": None},
        }
    )


def sim_daemon(
    config: FleetdConfig, clock: Clock, *, sysfs: bool = True, **extra: Any
) -> tuple[Daemon, SimNode]:
    """``sysfs``: the node keeps a fake sysfs tree the backend checks, as /sys on a node."""
    node = build_node("MI355X", seed=11, clock=clock)
    root = node.attach_sysfs(config.state_dir / "sysfs") if sysfs else None
    daemon = Daemon(
        config,
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node), pci_root=root),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
        **extra,
    )
    return daemon, node


def healthz(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    assert daemon.http is not None
    url = f"http://{daemon.http.address}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_healthz_and_the_watchdog_age_polls_on_the_monotonic_clock(tmp_path: Path) -> None:
    """Even on a clock whose ``now`` steps (no SteadyClock), a poll's age cannot go negative
    nor look fresh when it is stale: both read the monotonic time since it finished."""
    base = FakeSystemClock()
    notifier = RecordingNotify()
    daemon, _ = sim_daemon(plain_config(tmp_path), base, notifier=notifier)
    daemon.start()
    try:
        fresh = {"status": "ok", "last_poll_age_seconds": 0.0, "storage": "ok"}
        assert healthz(daemon) == (200, fresh)
        base.step(-HOUR)  # the wall clock goes back an hour
        base.advance(POLL)
        status, body = healthz(daemon)
        assert (status, body["status"], body["last_poll_age_seconds"]) == (200, "ok", POLL)
        before = notifier.pings()
        daemon.watchdog()
        assert notifier.pings() == before + 1

        base.advance(3 * POLL)  # no poll for 20 s: stalled, whatever the wall clock says
        base.step(2 * HOUR)
        status, body = healthz(daemon)
        assert (status, body["status"], body["last_poll_age_seconds"]) == (503, "stalled", 20.0)
        daemon.watchdog()
        assert notifier.pings() == before + 1, "the watchdog pinged without a fresh poll"

        daemon.tick()
        assert healthz(daemon)[0] == 200
        daemon.watchdog()
        assert notifier.pings() > before + 1
    finally:
        daemon.stop()


@pytest.mark.parametrize("step", [-HOUR, HOUR])
def test_a_rules_for_duration_survives_a_wall_clock_step(tmp_path: Path, step: float) -> None:
    """GpuMissing (``for: 30s``) fires 30 s after its GPU went, give or take the slew, when
    the wall clock steps an hour either way meanwhile: not an hour late, nor at once."""
    base = FakeSystemClock()
    clock = SteadyClock(base)
    daemon, node = sim_daemon(plain_config(tmp_path), clock)
    daemon.start()
    try:
        node.inject(7, "gpu_off_bus")
        fired_after: float | None = None
        went = base.monotonic()
        for n in range(1, 20):
            base.advance(POLL)
            if n == 3:
                base.step(step)
                daemon.check_clock()
            daemon.tick()
            missing = [a for a in daemon.engine.alerts() if a.key.rule == "GpuMissing"]
            if missing and missing[0].state == AlertState.FIRING:
                fired_after = base.monotonic() - went
                break
        assert fired_after is not None
        # first seen missing one poll after it went; then 30 s on a clock within 5 %
        assert POLL + 30 * (1 - SLEW_RATE) <= fired_after <= POLL + 30 * (1 + SLEW_RATE) + POLL
        assert daemon.now() <= base.now() - step + 1  # the daemon's time did not take the step
    finally:
        daemon.stop()


def test_the_clock_check_exports_and_logs_a_step_without_taking_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = FakeSystemClock()
    daemon, _ = sim_daemon(plain_config(tmp_path), SteadyClock(base))
    daemon.start()
    try:
        assert "clock" in daemon.scheduler.names()
        before = daemon.now()
        base.step(-HOUR)
        daemon.check_clock()
        assert daemon.now() == before
        text = daemon.exporter.render().decode()
        assert "fleetd_clock_offset_seconds -3600.0" in text
        assert "fleetd_clock_steps_total 1.0" in text
        assert "fleetd_clock_reanchors_total 0.0" in text
        base.advance(100.0)
        daemon.check_clock()
        assert daemon.now() == pytest.approx(before + 100 * (1 - SLEW_RATE))
        slewed = f"fleetd_clock_offset_seconds {-HOUR + 100 * SLEW_RATE}"
        assert slewed in daemon.exporter.render().decode()
    finally:
        daemon.stop()
    assert "wall_clock_step" in capsys.readouterr().out  # structlog defaults: stdout


def test_jobs_are_registered_and_a_reload_reschedules_the_poll(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    data = {
        "node": {"name": "n1"},
        "state_dir": str(tmp_path),
        "poll": {"interval": "5s", "gpu_timeout": "2s"},
        "http": {"port": 0},
        "rules": {"local_dir": None},
        "alerting": {"receivers": [{"name": "console", "console": [{}]}]},
    }
    path = tmp_path / "fleetd.yaml"
    path.write_text(yaml.safe_dump(data))
    daemon, _ = sim_daemon(load_config(path), clock, config_path=path, time_scale=2.0)
    daemon.start()
    try:
        names = daemon.scheduler.names()
        # no SteadyClock job: the demo runs on a fake clock
        assert names == ["poll", "deliver", "remediate", "store", "kpi", "cper", "watchdog"]
        assert daemon.scheduler.interval("poll") == 2.5  # 5 s at twice the speed
        assert daemon.scheduler.interval("kpi") == 15.0  # the reliability report: 30 s
        assert daemon.scheduler.interval("watchdog") == 15.0  # real seconds: systemd's
        data["poll"] = {"interval": "10s", "gpu_timeout": "2s"}
        path.write_text(yaml.safe_dump(data))
        assert daemon.reload() is True
        assert daemon.scheduler.interval("poll") == 5.0
    finally:
        daemon.stop()


@pytest.mark.parametrize(("behind", "resumed"), [(HOUR, True), (2 * 86_400.0, False)])
def test_a_restart_after_the_clock_went_back_carries_on_from_the_stored_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], behind: float, resumed: bool
) -> None:
    """The wall clock went back while fleetd was down. Within a day, the new run starts
    where the last one stopped (so nothing it stored lies ahead of it) and slews back to the
    wall clock; beyond, that clock was wrong: the new run keeps to the wall clock."""
    start = FakeSystemClock().now()
    before = FakeSystemClock(start + behind)
    first, _ = sim_daemon(plain_config(tmp_path), SteadyClock(before))
    first.start()
    for _ in range(3):
        before.advance(POLL)
        first.tick()
    last = first.now()
    first.stop()

    base = FakeSystemClock(start)
    second, _ = sim_daemon(plain_config(tmp_path), SteadyClock(base))
    second.start()
    try:
        assert second.last_snapshot is not None
        if resumed:
            assert second.now() >= last and second.last_snapshot.ts >= last
            offset = f"fleetd_clock_offset_seconds {start - second.now()}"
            assert offset in second.exporter.render().decode()
            assert "clock_resumed" in capsys.readouterr().out
        else:
            assert second.now() == start
            assert "stored_time_ahead" in capsys.readouterr().out
        base.advance(POLL)
        second.tick()
        assert second.last_snapshot.ts == second.now()
    finally:
        second.stop()


def test_a_gpu_off_the_bus_is_found_missing_by_the_periodic_rediscovery(tmp_path: Path) -> None:
    """Without a sysfs tree to look at, and with amdsmi answering the old handle
    NOT_SUPPORTED/DRM_ERROR (never NOT_FOUND), every GPU looks present until the daemon's
    periodic re-enumeration finds one fewer processor."""
    clock = FakeClock()
    daemon, node = sim_daemon(plain_config(tmp_path), clock, sysfs=False)
    daemon.start()
    try:
        daemon.tick()
        daemon.maintain()  # starts the rediscovery period
        node.inject(7, "gpu_off_bus")
        for _ in range(3):
            clock.advance(POLL)
            daemon.tick()
            daemon.maintain()
        assert daemon.backend.present(7)  # nothing said "gone" yet
        clock.advance(REDISCOVER_PERIOD_S)
        daemon.maintain()
        assert not daemon.backend.present(7)
        for _ in range(8):
            clock.advance(POLL)
            daemon.tick()
        missing = [a for a in daemon.engine.alerts() if a.key.rule == "GpuMissing"]
        assert [a.state for a in missing] == [AlertState.FIRING]
    finally:
        daemon.stop()


def test_the_periodic_rediscovery_waits_while_a_hung_call_is_inside_amdsmi(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    daemon, node = sim_daemon(plain_config(tmp_path), clock, sysfs=False)
    daemon.start()
    try:
        daemon.tick()
        daemon.maintain()  # starts the rediscovery period
        node.inject(2, "hung_call", function="amdsmi_get_gpu_metrics_info")
        clock.advance(POLL)
        daemon.tick()  # GPU 2's worker stays inside the hung call
        assert daemon.poller.busy()
        clock.advance(REDISCOVER_PERIOD_S)
        before = daemon.rediscovery.last_at
        daemon.maintain()
        assert daemon.rediscovery.last_at == before  # no amdsmi_shut_down under a hung call
        node.release_hangs()
        deadline = time.monotonic() + JOIN_S
        while daemon.poller.busy() and time.monotonic() < deadline:
            time.sleep(0.01)
        daemon.maintain()
        assert daemon.rediscovery.last_at == clock.now()
    finally:
        node.release_hangs()
        daemon.stop()
