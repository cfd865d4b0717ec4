"""The event sources wired into the daemon: kernel lines and CPER records reach the event
log, the series and the rules at once (no poll in between), and the AFID picks the plan."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.daemon import Daemon, SimContext
from fleetd.model import AlertState
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim import wrapper as w

POLL = 5.0


def _daemon(tmp_path: Path, **extra: Any) -> tuple[Daemon, Any, FakeClock]:
    clock = FakeClock(1_800_000_000.0)
    node = build_node("MI300X", seed=1, clock=clock)
    data: dict[str, Any] = {
        "node": {"name": "n1"},
        "state_dir": str(tmp_path),
        "poll": {"interval": POLL, "gpu_timeout": 2.0},
        "http": {"port": 0},
        "rules": {"local_dir": None},
        "events": {"cper": {"max_age": "1h"}},
    }
    data.update(extra)
    daemon = Daemon(
        FleetdConfig.model_validate(data),
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    return daemon, node, clock


def firing(daemon: Daemon) -> dict[str, Any]:
    return {a.key.rule: a for a in daemon.engine.alerts() if a.state == AlertState.FIRING}


def _wait(check: Any, timeout: float = 5.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    return check()


def test_a_fatal_cper_record_fires_without_a_poll_with_its_afid_action(tmp_path: Path) -> None:
    daemon, node, clock = _daemon(tmp_path)
    daemon.start()
    try:
        assert daemon.events is not None
        daemon.events.poll_cper()  # primes the cursor: nothing in the ring yet
        clock.advance(1.0)
        with node.lock:  # a fatal device-internal record (AFID 30: physical), no ECC count
            node._add_cper(node.gpus[2], w.AMDSMI_CPER_SEV_FATAL, w.AMDSMI_CPER_NOTIFY_TYPE_MCE,
                           "MP1", 1, clock.now())  # fmt: skip
        daemon.events.poll_cper()  # evaluates at once: no tick in between, no hold
        alert = firing(daemon).get("GpuCperFatalError")
        assert alert is not None, f"firing: {sorted(firing(daemon))}"
        labels = dict(alert.labels)
        assert labels["gpu"] == "2" and labels["action"] == "physical", labels
        logged = _wait(lambda: daemon.store.events.query(kinds=["cper_record"]))
        assert logged and logged[-1].data["afids"] == [30] and logged[-1].data["raw_base64"]
    finally:
        daemon.stop()


def test_the_simulators_reset_lines_reach_the_event_series(tmp_path: Path) -> None:
    daemon, node, clock = _daemon(tmp_path)
    daemon.start()
    try:
        node.reset_hive(0)  # nobody at fleetd asked for it: the driver's own reset
        clock.advance(10.0)

        def unplanned() -> list[Any]:
            assert daemon.events is not None
            return [r for r in daemon.events.readings(clock.now())
                    if r.metric == "fleetd_gpu_unplanned_resets_total"]  # fmt: skip

        found = _wait(lambda: len(unplanned()) == 8 and unplanned())
        assert found, daemon.events.service.stats() if daemon.events else None
        # the kernel's "GPU reset(1) succeeded!" and KFD's post-reset event: one reset each
        assert {r.value for r in found} == {1.0}
        assert "GpuUnplannedReset" in _wait(lambda: firing(daemon))
    finally:
        daemon.stop()
