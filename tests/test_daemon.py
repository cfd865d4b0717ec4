"""The daemon's wiring on a fake clock: restart safety, storage faults, reload."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer
from sqlalchemy import event

from fleetd.api.alerts import current_alerts
from fleetd.api.explain import explain_gpu
from fleetd.api.status import node_status
from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.daemon import Daemon, SimContext
from fleetd.model import AlertState
from fleetd.rules.state_store import AlertStateStore
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node

POLL = 5.0
ALERTING = "alerting: {receivers: [{name: console, console: [{}]}]}\n"  # a file needs it


def config(state: Path, **extra: Any) -> FleetdConfig:
    data: dict[str, Any] = {
        "node": {"name": "n1"},
        "state_dir": str(state),
        "poll": {"interval": POLL, "gpu_timeout": 2.0},
        "http": {"port": 0},
        "rules": {"local_dir": None},
        "store": {"busy_timeout": 0.05, "retry_interval": 5},
    }
    data.update(extra)
    return FleetdConfig.model_validate(data)


def daemon_on(node: SimNode, clock: FakeClock, cfg: FleetdConfig) -> Daemon:
    return Daemon(
        cfg,
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )


def run(daemon: Daemon, clock: FakeClock, polls: int) -> None:
    for _ in range(polls):
        clock.advance(POLL)
        daemon.tick()
        daemon.remediate()
        daemon.deliver()


UNCORRECTABLE_REPORTS = frozenset({"GpuEccUncorrectableError", "GpuKernelUncorrectableError"})


def firing(daemon: Daemon) -> set[str]:
    return {a.key.rule for a in daemon.engine.alerts() if a.state == AlertState.FIRING}


def test_restart_neither_repages_nor_forgets_a_firing_alert(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer, webhook: list[dict[str, Any]]
) -> None:
    alerting = {
        "receivers": [{"name": "hook", "webhook": [{"url": httpserver.url_for("/hook")}]}],
        "route": {"receiver": "hook", "group_wait": "0s", "group_interval": "10s"},
    }
    cfg = config(tmp_path, alerting=alerting)
    node = build_node("MI355X", seed=1, clock=clock)
    first = daemon_on(node, clock, cfg)
    first.start()
    run(first, clock, 2)
    node.inject(3, "ecc_uncorrectable", persistent=True)
    run(first, clock, 4)
    # one incident, one alert: the first report's, the counters' or (the simulated kernel log
    # is followed in real time, so a slow machine may see it first) the kernel line's
    fired = firing(first) & UNCORRECTABLE_REPORTS
    assert len(fired) == 1, firing(first)
    [rule] = fired
    sent = [a for body in webhook for a in body["alerts"] if a["status"] == "firing"]
    assert [a["labels"]["alertname"] for a in sent] == [rule]
    first.stop()

    # the GPUs keep their state; a new daemon on the same database takes over
    second = daemon_on(node, clock, cfg)
    second.start()
    assert rule in firing(second)  # not reset to healthy
    run(second, clock, 6)
    assert rule in firing(second)
    resent = [a for body in webhook for a in body["alerts"] if a["status"] == "firing"]
    assert len(resent) == 1  # not paged again
    second.stop()


def test_storage_locked_keeps_alerting_from_memory_and_raises_its_own_alert(
    tmp_path: Path, clock: FakeClock
) -> None:
    node = build_node("MI355X", seed=2, clock=clock)
    daemon = daemon_on(node, clock, config(tmp_path))
    daemon.start()
    run(daemon, clock, 2)
    locker = sqlite3.connect(tmp_path / "fleetd.db", timeout=0.01)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
    try:
        node.inject(5, "xgmi_link_down", link=1)
        run(daemon, clock, 20)  # 100 s: storage degraded for over a minute
        assert daemon.store.health().degraded
        assert {"FleetdStorageDegraded", "GpuXgmiLinkDown"} <= firing(daemon)
        assert daemon.last_snapshot is not None
        assert "storage degraded" in daemon.status_line(daemon.last_snapshot)
    finally:
        locker.rollback()
        locker.close()
    run(daemon, clock, 30)  # lock gone: at the next retry the backlog is written, alert resolves
    assert not daemon.store.health().degraded
    assert "FleetdStorageDegraded" not in firing(daemon)
    stored = daemon.store.range("fleetd_gpu_up", start=clock.now() - 60, end=clock.now())
    assert stored and all(len(samples) >= 10 for samples in stored.values())
    daemon.stop()


def test_a_quiet_poll_is_one_commit_and_its_evaluation_time_rides_with_the_samples(
    tmp_path: Path, clock: FakeClock
) -> None:
    node = build_node("MI355X", seed=3, clock=clock)
    daemon = daemon_on(node, clock, config(tmp_path))
    daemon.start()
    run(daemon, clock, 3)
    db = daemon.store.db
    assert db is not None
    commits: list[float] = []
    event.listen(db.engine, "commit", lambda _conn: commits.append(clock.now()))
    saved = AlertStateStore(db)

    clock.advance(POLL)
    daemon.tick()  # nothing changes: the samples and the evaluation time, one transaction
    assert len(commits) == 1
    assert saved.load()[1] == daemon.engine.last_eval_at == clock.now()

    evaluated = clock.now()
    locker = sqlite3.connect(tmp_path / "fleetd.db", timeout=0.01)
    locker.execute("BEGIN IMMEDIATE")  # the poll's transaction cannot be written
    try:
        clock.advance(POLL)
        daemon.tick()
    finally:
        locker.rollback()
        locker.close()
    assert saved.load()[1] == evaluated  # kept, not lost: it goes with the next poll
    clock.advance(10)  # past the store's retry interval: the store is written again, and
    daemon.tick()  # (held while the store was down) the alert state follows at the next poll
    clock.advance(POLL)
    daemon.tick()
    assert saved.load()[1] == daemon.engine.last_eval_at == clock.now()

    node.inject(4, "xgmi_link_down", link=2)  # a transition: saved at once, before the samples
    commits.clear()
    run(daemon, clock, 2)
    assert "GpuXgmiLinkDown" in {entry.alert.key.rule for entry in saved.load()[0]}
    assert len(commits) > 2
    daemon.stop()


def test_reload_rejects_a_bad_file_and_keeps_running(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "fleetd.yaml"
    path.write_text(f"node: {{name: n1}}\nstate_dir: {tmp_path}\nhttp: {{port: 0}}\n{ALERTING}")
    node = build_node("MI355X", seed=3, clock=clock)
    daemon = Daemon(
        FleetdConfig.model_validate(
            {
                "node": {"name": "n1"},
                "state_dir": str(tmp_path),
                "http": {"port": 0},
                "rules": {"local_dir": None},
            }
        ),
        clock=clock,
        config_path=path,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        schedule_jobs=False,
    )
    daemon.start()
    try:
        path.write_text(f"poll: {{interval: 0.1s}}\nbogus: 1\n{ALERTING}")
        assert daemon.reload() is False
        assert daemon.config.poll.interval == 5.0
        events = daemon.store.query_events(kinds=["config_reload"])
        assert "rejected" in events[-1].message and len(events[-1].data["problems"]) == 2
        path.write_text(
            f"node: {{name: n1}}\nstate_dir: {tmp_path}\nhttp: {{port: 0}}\n{ALERTING}"
            "poll: {interval: 2s}\nrules: {local_dir: null}\n"
        )
        assert daemon.reload() is True
        assert daemon.config.poll.interval == 2.0
        run(daemon, clock, 1)
        # what a reload cannot apply keeps running as it is, and the event says so
        path.write_text(
            f"node: {{name: n1}}\nstate_dir: {tmp_path}\nhttp: {{port: 0}}\n{ALERTING}"
            "poll: {interval: 2s, gpu_timeout: 1s}\nrules: {local_dir: null}\n"
            "remediation: {mode: 'on'}\n"
        )
        assert daemon.reload() is True
        assert daemon.config.remediation.mode == "dry-run" and daemon.config.poll.gpu_timeout == 2
        restart = daemon.store.query_events(kinds=["config_reload"])[-1].data["restart_needed_for"]
        assert restart == ["remediation", "poll.gpu_timeout"]
    finally:
        daemon.stop()


def test_a_rule_whose_readings_never_come_is_named_and_raises_one_info_alert(
    tmp_path: Path, clock: FakeClock
) -> None:
    """MI3xx boards answer N/A for average socket power: a site rule on it can never fire."""
    local = tmp_path / "rules.d"
    local.mkdir()
    (local / "site.yaml").write_text(
        "rules:\n"
        "  - name: SiteAveragePowerHigh\n"
        "    rationale: a site rule on a reading MI3xx boards do not provide\n"
        "    expr: fleetd_gpu_power_average_watts > 1000\n"
        "    severity: warning\n"
        "    annotations: {summary: power}\n"
    )
    cfg = config(tmp_path / "state", rules={"local_dir": str(local)})
    node = build_node("MI355X", seed=3, clock=clock)
    daemon = daemon_on(node, clock, cfg)
    daemon.start()
    try:
        run(daemon, clock, 2)
        assert "FleetdRuleBlindSpots" not in firing(daemon)  # not judged before three polls
        run(daemon, clock, 2)
        text = daemon.exporter.render().decode()
        assert 'fleetd_rule_inputs_supported{rule="SiteAveragePowerHigh"} 0.0' in text
        assert 'fleetd_rule_inputs_supported{rule="GpuMissing"} 1.0' in text
        assert "FleetdRuleBlindSpots" in firing(daemon)
        [alert] = [a for a in daemon.engine.alerts() if a.key.rule == "FleetdRuleBlindSpots"]
        assert alert.value == 1.0
        assert 'fleetd_doctor_check{check="amdsmi"} 0.0' in text
        # and `fleetctl explain` says so for every GPU
        now = clock.now()
        entry = node_status(daemon.services, now)["gpus"][0]
        explained = explain_gpu(daemon.services, entry, current_alerts(daemon.services, now), now)
        assert explained["blind_spots"] == [
            {
                "rule": "SiteAveragePowerHigh",
                "missing": ["fleetd_gpu_power_average_watts"],
                "text": "SiteAveragePowerHigh can never fire here: "
                "fleetd_gpu_power_average_watts never provided",
            }
        ]
    finally:
        daemon.stop()


def test_slow_tier_series_stay_fresh_for_the_rules_and_a_moved_ecc_total_is_read_at_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    """With the slow tier at 1 poll in 6, an XGMI_WAFL error is counted per block in the
    poll that sees the total move, GpuXgmiError (which reads the per-block series) fires and
    stays firing across polls that do not read the block again, and the power-cap series
    (slow) is never judged stale."""
    node = build_node("MI355X", seed=4, clock=clock)
    daemon = daemon_on(node, clock, config(tmp_path, collect={"slow_every": 6}))
    daemon.start()
    try:
        run(daemon, clock, 2)
        node.inject(5, "ecc_uncorrectable", block="XGMI_WAFL", retire_page=False)
        run(daemon, clock, 1)
        assert "GpuXgmiError" in firing(daemon)
        for _ in range(14):  # more than two slow periods
            run(daemon, clock, 1)
            assert "GpuXgmiError" in firing(daemon)
        cap = daemon.engine.settings.polls_per_read["fleetd_gpu_power_cap_watts"]
        assert cap == 6
        assert daemon.memory.latest("fleetd_gpu_power_cap_watts", now=clock.now())  # present
    finally:
        daemon.stop()
