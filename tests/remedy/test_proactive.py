"""Rolling proactive validation end to end on the simulator: a hive due for validation, with
headroom on the node's load (read through a real ``MemoryWindow`` as the rules read it), is
drained, put through the ``proactive`` ladder (validator commands written by the test) and
re-admitted — or quarantined and paged when a validator fails. Load rising or a fault during
the drain abandons it at once; dry-run only plans; a restart neither repeats nor forgets it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.model import Reading, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.kpi import run_figures
from fleetd.remedy.proactive import schedule
from fleetd.remedy.proactive_config import ProactiveConfig
from fleetd.store.memory import MemoryWindow

from .machine_world import NOW, World, new_run, settle
from .rig import Rig, make_rig, path_with, remediation_config
from .test_ladder_e2e import tool

DAY = 86400.0
FIRST_START = 91  # seconds of readings: the first check (each 30s) with a 2m window (less 30s)


class Load:
    """The node's load as the collectors would store it, written each second of the test."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.window = MemoryWindow(3600.0)
        self.requests = 0.0
        rig.remediation.attach_query(self.window)

    def restart(self) -> None:
        self.rig.restart_daemon()
        self.rig.remediation.attach_query(self.window)

    def write(self) -> None:
        now = self.rig.clock.now()
        readings = []
        for name, w in self.rig.fleet.workers.items():
            labels = make_labels({"worker": name, "gpu": w.gpus[0]})
            readings.append(Reading("fleetd_vllm_requests_running", labels, self.requests, now))
            readings.append(Reading("fleetd_vllm_requests_waiting", labels, 0.0, now))
        self.window.append(readings)

    def tick(self, seconds: float = 1.0) -> None:
        """``seconds`` of the node: readings each second, remediation ticked each second."""
        for _ in range(int(seconds)):
            self.rig.clock.advance(1.0)
            self.write()
            self.rig.remediation.tick(self.rig.clock.now())

    def settle(self, limit: float = 600.0) -> None:
        self.tick(1)
        for _ in range(int(limit)):
            if not self.rig.remediation.executor.active():
                return
            self.tick(1)
        raise AssertionError("a run is still active")


def commands_of(cmds: list[m.Command], kind: type) -> list[m.Command]:
    return [c for c in cmds if isinstance(c, kind)]


def proactive_runs(rig: Rig) -> list[m.Run]:
    return [r for r in rig.remediation.runs() if r.plan is m.Plan.PROACTIVE]


def build(
    tmp: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    *,
    rvs_fixture: str = "rvs_gst_pass.txt",
    mode: str = "on",
    proactive: dict[str, Any] | None = None,
) -> Rig:
    bin_dir = tmp / "tools"
    bin_dir.mkdir()
    validators = [
        {
            "name": "rvs_gst",
            "kind": "rvs",
            "command": [tool(bin_dir, "rvs", rvs_fixture), "{gpus}"],
            "timeout": "30s",
        },
        {
            "name": "a2a",
            "kind": "transferbench",
            "command": [tool(bin_dir, "TransferBench", "transferbench_a2a_pass.txt"), "a2a"],
            "min_rtotal_gbps": 320,
        },
    ]
    section = remediation_config(
        mode=mode,
        validation={"validators": validators, "plans": {"proactive": ["rvs_gst", "a2a"]}},
        proactive={
            "enabled": True,
            "interval": "1d",
            "retry_interval": "1h",
            "check_interval": "30s",
            "window": "2m",
            "max_requests": 2,
            **(proactive or {}),
        },
    )
    rig = make_rig(tmp, clock, workers_on=(2, 3), remediation=section)
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    return rig


@pytest.fixture
def passing(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    rig = build(tmp_path, clock, monkeypatch)
    try:
        yield rig
    finally:
        rig.close()


def calls(rig: Rig, tool_name: str) -> list[str]:
    path = rig.tmp / "tools" / f"{tool_name}.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_due_hive_with_headroom_is_drained_validated_and_readmitted(passing: Rig) -> None:
    rig = passing
    load = Load(rig)
    load.tick(89)  # less than a window (less a check) of readings: not judged yet
    assert proactive_runs(rig) == []
    load.tick(60)
    [run] = proactive_runs(rig)
    load.settle()
    run = rig.run(run.run_id)
    assert run.state is m.RunState.DONE and not run.dry_run, run.outcome
    assert run.trigger.kind == "schedule" and run.reset_count == 0
    assert rig.sim.reset_count() == 0  # validated, never reset
    assert [(o.name, o.ok) for o in run.validation] == [("rvs_gst", True), ("a2a", True)]
    assert calls(rig, "rvs") == ["0,1,2,3,4,5,6,7"]  # the hive, with its workers stopped
    kinds = [e.kind for e in rig.remediation.events(run.run_id)]
    assert kinds.index("worker_stopped") < kinds.index("validating") < kinds.index("readmitting")
    assert all(w.in_rotation for w in rig.fleet.workers.values())
    # recorded as proactive: a run on each GPU's RMA record, no fault; no repair in the KPIs
    serial = {g.index: g.serial for g in rig.backend.gpus()}[3]
    rec = rig.remediation.rma_record(serial)
    assert rec is not None and not rec.faults and not rec.physical_action_needed
    assert [(r.run_id, r.plan) for r in rec.runs] == [(run.run_id, "proactive")]
    assert [(v.name, v.ok) for v in rec.validations] == [("rvs_gst", True), ("a2a", True)]
    figures = run_figures(run, rig.remediation.events(run.run_id))
    assert figures.plan == "proactive" and not figures.automatic
    assert figures.repair is None and figures.verdict is None
    # not due again within the interval, even across a restart
    load.restart()
    load.tick(3600)
    assert len(proactive_runs(rig)) == 1
    rig.clock.advance(DAY - 3600)
    load.tick(180)
    assert len(proactive_runs(rig)) == 2


def test_no_headroom_or_no_readings_starts_nothing(passing: Rig) -> None:
    rig = passing
    rig.remediation.tick(rig.clock.now())  # no query readings at all: never blind
    load = Load(rig)
    load.requests = 3  # above max_requests
    load.tick(600)
    assert proactive_runs(rig) == []
    assert calls(rig, "rvs") == []


def test_load_rising_during_the_drain_abandons_and_readmits_at_once(passing: Rig) -> None:
    rig = passing
    load = Load(rig)
    load.tick(FIRST_START)
    [run] = proactive_runs(rig)
    assert rig.run(run.run_id).state is m.RunState.BALANCER_WAIT
    load.requests = 5
    load.tick(1)
    run = rig.run(run.run_id)
    assert run.state is m.RunState.ABORTED and not run.holding
    assert "proactive validation abandoned: worker gpu2 had 5 requests" in (run.outcome or "")
    assert all(w.in_rotation for w in rig.fleet.workers.values())
    assert calls(rig, "rvs") == []
    assert not [e for e in rig.sink.alerts() if e.severity == "critical"]
    # the next attempt waits the retry interval, not the whole interval
    load.requests = 0
    load.tick(1800)
    assert len(proactive_runs(rig)) == 1
    load.tick(1900)
    assert len(proactive_runs(rig)) == 2


def test_a_fault_during_the_validation_abandons_it_and_the_fault_run_follows(
    passing: Rig,
) -> None:
    rig = passing
    load = Load(rig)
    load.tick(FIRST_START)
    [run] = proactive_runs(rig)
    assert rig.run(run.run_id).state is m.RunState.BALANCER_WAIT
    rig.sim.inject(3, "ecc_uncorrectable", count=2)
    [fault_run] = rig.fault(3)
    assert rig.run(run.run_id).state is m.RunState.ABORTED
    load.settle()
    assert rig.run(fault_run).state is m.RunState.DONE and rig.sim.reset_count() == 1


def test_a_failed_validator_quarantines_and_pages(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = build(tmp_path, clock, monkeypatch, rvs_fixture="rvs_gst_gpu5_below_target.txt")
    try:
        load = Load(rig)
        load.tick(120)
        load.settle()
        [run] = proactive_runs(rig)
        assert run.state is m.RunState.QUARANTINED and run.holding
        assert (run.outcome or "").startswith("validator rvs_gst failed")
        assert not any(w.in_rotation for w in rig.fleet.workers.values())
        page = rig.sink.alerts()[-1]
        assert page.kind == "quarantined" and page.severity == "critical"
        assert "proactive validation" in page.message
        serial = {g.index: g.serial for g in rig.backend.gpus()}[5]
        rec = rig.remediation.rma_record(serial)
        assert rec is not None and rec.physical_action_needed and not rec.faults
        # a quarantined hive is not validated again while it is held
        load.tick(3 * 3600)
        assert len(proactive_runs(rig)) == 1
    finally:
        rig.close()


def test_dry_run_plans_and_logs_only(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = build(tmp_path, clock, monkeypatch, mode="dry-run")
    try:
        load = Load(rig)
        load.tick(120)
        load.settle()
        [run] = proactive_runs(rig)
        assert run.dry_run and run.state is m.RunState.DONE
        assert calls(rig, "rvs") == [] and calls(rig, "TransferBench") == []
        assert all(w.in_rotation for w in rig.fleet.workers.values())
        assert rig.remediation.events(run.run_id)[0].dry_run
        load.restart()  # journaled: not repeated after a restart
        load.tick(600)
        assert len(proactive_runs(rig)) == 1
    finally:
        rig.close()


def test_off_by_default_and_the_schedule_reads_the_journal() -> None:
    config = ProactiveConfig()
    assert not config.enabled and config.interval == 7 * DAY
    never = schedule((0, 1), [], config, 100.0)
    assert never.due(100.0) and never.last_run is None


# ------------------------------------------------------------------ the machine's part
def _until(
    world: World, run: m.Run, now: float, done: Callable[[m.Run], bool]
) -> tuple[m.Run, list[m.Command], float]:
    issued: list[m.Command] = []
    for t in range(int(now), int(now) + 300):
        if done(run):
            return run, issued, float(t)
        run, cmds = settle(world, m.step(run, m.Tick(), float(t)), float(t))
        issued += cmds
    raise AssertionError(f"stuck in {run.state}")


def test_abandon_while_validating_restarts_the_workers_and_ends_aborted_in_service() -> None:
    world = World()  # answers no RunValidator: the validator is under way
    run, first = settle(world, new_run(m.Plan.PROACTIVE, validators=("rvs", "inference")), NOW)
    run, cmds, t = _until(world, run, NOW, lambda r: r.state is m.RunState.VALIDATING)
    cmds = first + cmds
    assert run.validating == "rvs" and not commands_of(cmds, m.ResetGpu)
    assert not commands_of(cmds, m.CaptureBaseline) and not commands_of(cmds, m.PollHealth)
    run, after = settle(world, m.step(run, m.Abandon("load rose"), t), t)
    assert run.state is m.RunState.AWAIT_READY or run.terminal
    run, more, _t = _until(world, run, t, lambda r: r.terminal)
    after += more
    assert run.state is m.RunState.ABORTED and not run.holding and not run.lease_held
    assert run.outcome == "proactive validation abandoned: load rose"
    assert {c.worker for c in commands_of(after, m.StartUnit)} == {"w0", "w1"}  # type: ignore[attr-defined]
    assert {c.worker for c in commands_of(after, m.Reroute)} == {"w0", "w1"}  # type: ignore[attr-defined]
    assert commands_of(after, m.ReleaseLease) and not commands_of(after, m.RunValidator)
    assert not any(getattr(c, "severity", "") == "critical" for c in after)


def test_abandon_while_taking_workers_out_rolls_back() -> None:
    world = World(busy_until=NOW + 1000)
    run, _ = settle(world, new_run(m.Plan.PROACTIVE, validators=("rvs",)), NOW)
    assert run.state is m.RunState.BALANCER_WAIT
    run, cmds = settle(world, m.step(run, m.Abandon("a fault on GPU 3"), NOW + 1), NOW + 1)
    assert run.state is m.RunState.ABORTED and not run.holding
    assert commands_of(cmds, m.Reroute) and not commands_of(cmds, m.StopUnit)


def test_a_proactive_drain_timeout_rolls_back_instead_of_stopping_busy_workers() -> None:
    world = World(busy_until=NOW + 10_000)
    run, _ = settle(world, new_run(m.Plan.PROACTIVE, validators=("rvs",)), NOW)
    run, cmds, _t = _until(world, run, NOW, lambda r: r.terminal)
    assert run.state is m.RunState.ABORTED and not run.holding
    assert "drain timed out" in (run.outcome or "")
    assert not commands_of(cmds, m.StopUnit)


# ------------------------------------------------------------------ through the daemon
def _daemon(tmp: Path, clock: FakeClock, node: Any) -> Any:
    from tests.test_daemon import config as daemon_config
    from tests.test_daemon import daemon_on

    tool_dir = tmp / "tools"
    tool_dir.mkdir()
    remediation = {
        "mode": "dry-run",
        "validation": {
            "validators": [
                {
                    "name": "rvs_gst",
                    "kind": "rvs",
                    "command": [tool(tool_dir, "rvs", "rvs_gst_pass.txt"), "{gpus}"],
                }
            ],
            "plans": {"proactive": ["rvs_gst"]},
        },
        "proactive": {
            "enabled": True,
            "check_interval": "5s",
            "window": "1m",
            "max_gpu_activity": 0.3,
        },
    }
    return daemon_on(node, clock, daemon_config(tmp, remediation=remediation))


def test_the_daemon_reads_gpu_activity_through_the_rules_query(tmp_path: Path) -> None:
    from fleetd.sim import build_node
    from tests.test_daemon import run as run_daemon

    clock = FakeClock()
    node = build_node("MI355X", seed=5, clock=clock)
    node.set_load(None, 0.9)  # busy: no headroom
    daemon = _daemon(tmp_path, clock, node)
    daemon.start()
    try:
        remediation = daemon.remediation
        assert remediation is not None
        run_daemon(daemon, clock, 30)
        assert [r for r in remediation.runs() if r.plan is m.Plan.PROACTIVE] == []
        node.set_load(None, 0.0)  # idle: headroom once a whole window of readings says so
        run_daemon(daemon, clock, 30)
        [run] = [r for r in remediation.runs() if r.plan is m.Plan.PROACTIVE]
        assert run.dry_run and run.gpu_indices == tuple(range(8))
        assert not (tmp_path / "tools" / "rvs.calls").exists()  # dry-run: planned only
    finally:
        daemon.stop()


def test_enabled_without_a_proactive_ladder_is_a_config_error() -> None:
    from pydantic import ValidationError

    from fleetd.remedy.config import RemediationConfig

    with pytest.raises(ValidationError, match=r"needs a ladder: validation\.plans\.proactive"):
        RemediationConfig.model_validate({"proactive": {"enabled": True}})
    with pytest.raises(ValidationError, match="interval"):
        RemediationConfig.model_validate({"proactive": {"interval": "1m"}})


def test_a_restart_mid_validation_resumes_the_same_run_and_opens_no_second(passing: Rig) -> None:
    rig = passing
    load = Load(rig)
    load.tick(FIRST_START)
    [run] = proactive_runs(rig)
    assert rig.run(run.run_id).state is m.RunState.BALANCER_WAIT
    load.restart()
    load.settle()
    [again] = proactive_runs(rig)
    assert again.run_id == run.run_id and again.state is m.RunState.DONE and again.resumed == 1
    assert calls(rig, "rvs") == ["0,1,2,3,4,5,6,7"]  # once
    load.tick(600)
    assert len(proactive_runs(rig)) == 1
