"""SIGHUP / API reload on a running daemon: what changes, what is kept, what is reported."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pytest_httpserver import HTTPServer

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import load_config
from fleetd.daemon import Daemon, SimContext
from fleetd.rules.metrics import rule_readings
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def base(state: Path, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "node": {"name": "n1"},
        "state_dir": str(state),
        "poll": {"interval": "5s", "gpu_timeout": "2s"},
        "http": {"port": 0},
        "rules": {"local_dir": str(state / "rules.d")},
        "store": {"busy_timeout": 0.05, "retry_interval": 5},
        "alerting": {"receivers": [{"name": "console", "console": [{}]}]},  # a file needs it
    }
    data.update(extra)
    return data


def daemon_from(path: Path, node: SimNode, clock: FakeClock) -> Daemon:
    return Daemon(
        load_config(path),
        clock=clock,
        config_path=path,
        backend=AmdSmiBackend(SimulatedAmdSmi(node)),
        sim=SimContext(node, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )


def polls(daemon: Daemon, clock: FakeClock, n: int, every: float) -> None:
    for _ in range(n):
        clock.advance(every)
        daemon.tick()
        daemon.remediate()
        daemon.deliver()


def test_a_new_poll_interval_moves_the_rules_staleness_with_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    """``stale(metric, N)`` counts polls: after 30 s → 5 s, six missed polls are 30 s."""
    slow = {"interval": "30s", "gpu_timeout": "2s"}
    path = write(tmp_path / "fleetd.yaml", base(tmp_path, poll=slow))
    node = build_node("MI355X", seed=5, clock=clock)
    daemon = daemon_from(path, node, clock)
    daemon.start()
    try:
        polls(daemon, clock, 3, 30.0)
        write(path, base(tmp_path))
        assert daemon.reload() is True
        assert daemon.engine.settings.poll_interval_s == 5.0
        # power comes from the gpu_metrics table (collect.metrics_table)
        node.inject(1, "unsupported_fields", calls=["amdsmi_get_gpu_metrics_info"])
        polls(daemon, clock, 8, 5.0)  # 40 s without a power reading on GPU 1
        stale = [a for a in daemon.engine.alerts() if a.key.rule == "GpuTelemetryStale"]
        assert [dict(a.labels)["gpu"] for a in stale] == ["1"]
    finally:
        daemon.stop()


def test_sections_that_need_a_restart_keep_their_running_values_and_say_so(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = write(tmp_path / "fleetd.yaml", base(tmp_path))
    daemon = daemon_from(path, build_node("MI355X", seed=6, clock=clock), clock)
    daemon.start()
    try:
        changed = base(
            tmp_path,
            poll={"interval": "5s", "gpu_timeout": "3s"},
            remediation={"mode": "on"},
            vllm={"scrape_interval": "9s"},
        )
        write(path, changed)
        assert daemon.reload() is True
        assert daemon.remediation is not None
        # what runs is what the daemon reports: still dry-run, still the old poll timeout
        assert daemon.remediation.config.mode == "dry-run"
        assert daemon.config.remediation.mode == "dry-run"
        assert daemon.config.poll.gpu_timeout == 2.0
        assert daemon.config.vllm.scrape_interval == 5.0
        event = daemon.store.query_events(kinds=["config_reload"])[-1]
        assert {"remediation", "vllm", "poll.gpu_timeout"} <= set(event.data["restart_needed_for"])
    finally:
        daemon.stop()


@contextmanager
def running(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Daemon, Path, Path]]:
    """A started daemon on ``base``'s config, with its config path and local rule directory."""
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    path = write(tmp_path / "fleetd.yaml", base(tmp_path))
    daemon = daemon_from(path, build_node("MI355X", seed=7, clock=clock), clock)
    daemon.start()
    try:
        yield daemon, path, rules_dir
    finally:
        daemon.stop()


def test_a_rejected_reload_shows_in_rule_reload_status_and_metrics(
    tmp_path: Path, clock: FakeClock
) -> None:
    with running(tmp_path, clock) as (daemon, _path, rules_dir):
        (rules_dir / "bad.yaml").write_text("rules:\n  - name: Broken\n    expr: up > 1\n")
        assert daemon.reload() is False
        status = daemon.engine.reload_status
        assert (status.failures, status.last_ok) == (1, False)
        assert status.last_problems and "bad.yaml" in status.last_problems[0]
        values = {
            (r.metric, dict(r.labels).get("result")): r.value
            for r in rule_readings(daemon.engine, clock.now())
        }
        assert values[("fleetd_rules_last_reload_success", None)] == 0.0
        assert values[("fleetd_rule_reloads_total", "failure")] == 1.0
        (rules_dir / "bad.yaml").unlink()
        assert daemon.reload() is True
        status = daemon.engine.reload_status
        assert (status.successes, status.failures, status.last_ok) == (1, 1, True)


def test_a_reload_while_the_database_is_locked_never_stops_the_daemon(
    tmp_path: Path, clock: FakeClock, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/down").respond_with_data("busy", status=503)
    hook = {"name": "hook", "webhook": [{"url": httpserver.url_for("/down")}]}
    alerting = {"receivers": [hook], "route": {"receiver": "hook", "group_wait": "0s"}}
    path = write(tmp_path / "fleetd.yaml", base(tmp_path, alerting=alerting))
    node = build_node("MI355X", seed=8, clock=clock)
    daemon = daemon_from(path, node, clock)
    daemon.start()
    locker: sqlite3.Connection | None = None
    try:
        node.inject(2, "ecc_uncorrectable", persistent=True)
        polls(daemon, clock, 4, 5.0)  # fired; the webhook keeps failing: pending in the outbox
        assert daemon.dispatcher is not None
        assert daemon.dispatcher.status(clock.now())["outbox_pending"]
        locker = sqlite3.connect(tmp_path / "fleetd.db", timeout=0.01)
        locker.execute("BEGIN IMMEDIATE")  # another writer holds the database
        # the receiver is removed: its pending notifications are failed in the database
        write(path, base(tmp_path, poll={"interval": "10s", "gpu_timeout": "2s"}))
        assert daemon.reload() is True  # applied; nothing escapes into the main loop
        assert daemon.config.poll.interval == 10.0
        polls(daemon, clock, 2, 10.0)
    finally:
        if locker is not None:
            locker.rollback()
            locker.close()
        daemon.stop()


def test_a_rejected_reload_lists_the_config_and_the_rule_files_problems_together(
    tmp_path: Path, clock: FakeClock
) -> None:
    with running(tmp_path, clock) as (daemon, path, rules_dir):
        bad = rules_dir / "bad.yaml"
        bad.write_text("rules:\n  - name: Broken\n    expr: fleetd_gpu_up >\n    severity: info\n")
        write(path, base(tmp_path, poll={"interval": "7q", "gpu_timeout": "2s"}))
        assert daemon.reload() is False
        problems = daemon.engine.reload_status.last_problems
        assert [p.split(": ")[1] for p in problems] == ["poll.interval", "rules[0].expr"]
        assert problems[0].startswith(f"{path}:") and problems[1].startswith(f"{bad}:3:")
        event = daemon.store.query_events(kinds=["config_reload"])[-1]
        assert event.data["problems"] == list(problems)
        # the rules: section itself wrong: the shipped packs are checked, and it says so
        write(path, base(tmp_path, rules={"local_dir": 7}))
        assert daemon.reload() is False
        problems = daemon.engine.reload_status.last_problems
        assert problems[-1] == (
            f"{path}: rules: rules.packs and rules.local_dir not checked: the rules: section "
            "could not be read; only the shipped packs were checked"
        )
        assert not any("bad.yaml" in p for p in problems)


def test_a_rule_on_a_metric_fleetd_never_writes_loads_and_is_recorded_as_a_warning(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A warning, not a rejection: a pack that loads today keeps loading."""
    with running(tmp_path, clock) as (daemon, _path, rules_dir):
        site = rules_dir / "site.yaml"
        site.write_text(
            "rules:\n  - name: HotspotTooHot\n"
            '    expr: fleetd_gpu_temprature_celsius{sensor="hotspot"} > 90\n'
            "    severity: warning\n"
        )
        assert daemon.reload() is True
        assert daemon.engine.rules.get("HotspotTooHot") is not None
        event = daemon.store.query_events(kinds=["config_reload"])[-1]
        (warning,) = event.data["warnings"]
        assert warning.startswith(f"{site}:3:11: rules[0].expr: rule 'HotspotTooHot' reads")
        assert "did you mean 'fleetd_gpu_temperature_celsius'?" in warning
