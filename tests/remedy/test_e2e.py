"""End to end on the simulator: fault → drain every hive worker → one reset → verify → re-admit,
and every way that can go wrong: persistent faults, budgets, drain timeouts, workers that do
not come back, processes that will not let go, people stepping in, and dry-run."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from fleetd.clock import FakeClock
from fleetd.collect.catalog import CATALOG
from fleetd.collect.exporter import FleetdExporter
from fleetd.errors import RemedyError
from fleetd.model import Reading
from fleetd.remedy import machine as m
from fleetd.vllm.config import BenchmarkConfig

from .rig import Rig, make_rig, path_with, remediation_config


def metrics_text(readings: list[Reading]) -> str:
    assert all(r.metric in CATALOG for r in readings)
    exporter = FleetdExporter(CollectorRegistry(), process_metrics=False)
    exporter.update_group("remediation", readings)
    return exporter.render().decode()


@pytest.fixture
def rig(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    r = make_rig(tmp_path, clock)
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def small(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    """The same 8-GPU hive with workers on GPUs 2 and 3 only (faster)."""
    r = make_rig(tmp_path, clock, workers_on=(2, 3))
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    try:
        yield r
    finally:
        r.close()


def small_rig(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, **section: object
) -> Rig:
    r = make_rig(tmp_path, clock, workers_on=(2, 3), remediation=remediation_config(**section))
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    return r


def test_uncorrectable_error_on_gpu3_drains_the_hive_resets_once_and_readmits(rig: Rig) -> None:
    for worker in rig.fleet.workers.values():
        worker.add_requests(2, duration_s=8.0)  # in flight when the fault hits
    rig.sim.inject(3, "ecc_uncorrectable", count=2)
    [run_id] = rig.fault(3)
    rig.run_until_settled()

    run = rig.run(run_id)
    assert run.state is m.RunState.DONE, run.outcome
    assert rig.sim.reset_count() == 1
    assert run.gpu_indices == tuple(range(8))  # the whole hive
    for name, worker in rig.fleet.workers.items():
        assert (name, "out") in rig.fleet.rotation_log and (name, "in") in rig.fleet.rotation_log
        assert worker.stops == 1 and worker.starts == 2, name
        assert worker.aborted == 0 and worker.completed == 2, name  # drained gracefully
        assert worker.state() == "active" and worker.in_rotation
    assert rig.sim.resets[0].killed_pids == ()  # nothing was on the hive any more
    kinds = rig.sink.kinds()
    assert kinds.count("reset_intent") == 1 and kinds.count("worker_stopped") == 8
    assert kinds.index("reset_intent") > max(
        i for i, k in enumerate(kinds) if k == "worker_stopped"
    )
    assert kinds[-1] == "done" and rig.sink.events[-1].resolve_alert
    run_events = [e for e in rig.sink.events if e.run_id]
    assert all(
        e.trigger is not None and e.trigger.rule == "GpuUncorrectableEcc" for e in run_events
    )
    assert rig.sim.resets[0].at >= run.created_at + 8 + 1  # requests finished, 2nd idle read
    # the journal holds the same story, and nothing is left undelivered
    journaled = [e.kind for e in rig.remediation.events(run_id)]
    assert journaled == [e.kind for e in rig.sink.events if e.run_id == run_id]
    assert rig.remediation.status().gpus_out_of_service == 0
    # the fault is gone: the counters the rules watch were reset and do not climb
    found = rig.poller.poll(rig.clock.now())
    ue = [
        r.value
        for r in found.readings
        if r.metric == "fleetd_gpu_ecc_errors_total" and ("type", "uncorrectable") in r.labels
    ]
    assert ue and all(v == 0 for v in ue)


def test_a_persistent_fault_fails_verification_and_quarantines_at_once(small: Rig) -> None:
    small.sim.inject(3, "ecc_uncorrectable", persistent=True)  # back after every reset
    [run_id] = small.fault(3)
    small.run_until_settled()
    run = small.run(run_id)
    assert run.state is m.RunState.QUARANTINED and run.reset_count == 1
    assert (run.outcome or "").startswith("verification failed: GPU 3:")
    assert small.sim.reset_count() == 1
    gpu3 = small.fleet.workers["gpu3"]
    assert gpu3.state() == "inactive" and not gpu3.in_rotation
    assert small.sink.alerts()[-1].severity == "critical"


def test_a_recurring_fault_spends_the_budget_then_quarantines_and_pages(small: Rig) -> None:
    runs = []
    for _ in range(4):
        small.sim.inject(3, "ecc_uncorrectable")  # a new fault each time; each reset clears it
        [run_id] = small.fault(3)
        small.run_until_settled()
        runs.append(small.run(run_id))
        small.clock.advance(15 * 60)  # past the 10-minute probation, inside the 24 h budget
    assert [r.state for r in runs] == [m.RunState.DONE] * 3 + [m.RunState.QUARANTINED]
    assert small.sim.reset_count() == 3
    last = runs[-1]
    assert last.plan is m.Plan.QUARANTINE and last.holding and last.reset_count == 0
    assert "budget spent" in " ".join(e.message for e in small.remediation.events(last.run_id))
    page = small.sink.alerts()[-1]
    assert page.severity == "critical" and page.run_id == last.run_id
    assert "gpu3" in page.message and page.trigger is not None and page.trigger.gpu == 3
    gpu3 = small.fleet.workers["gpu3"]
    assert gpu3.state() == "inactive" and not gpu3.in_rotation  # kept drained
    assert small.fleet.workers["gpu2"].in_rotation  # quarantine is the faulty GPU only
    assert small.remediation.status().held[0].gpus == (3,)
    # a further alert on the quarantined GPU is noted, not acted on
    assert small.fault(3) == []
    assert small.sink.kinds()[-1] == "further_trigger"
    # and /metrics says what happened
    text = metrics_text(small.remediation.metrics(small.clock.now()))
    for line in (
        'fleetd_remediation_runs_total{outcome="done",plan="reset"} 3.0',
        'fleetd_remediation_runs_total{outcome="quarantined",plan="quarantine"} 1.0',
        "fleetd_remediation_resets_total 3.0",
        "fleetd_remediation_gpus_held 1.0",
        'fleetd_remediation_gpus_out_of_service{scope="node:sim-node"} 1.0',
        'fleetd_remediation_mode{mode="on"} 1.0',
        "fleetd_remediation_runs_active 0.0",
    ):
        assert line in text, line
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout


def test_repeat_fault_within_probation_escalates_at_once(small: Rig) -> None:
    [first] = small.fault(3)
    small.run_until_settled()
    small.clock.advance(60)
    [second] = small.fault(3)
    small.run_until_settled()
    assert small.run(first).state is m.RunState.DONE
    again = small.run(second)
    assert again.state is m.RunState.QUARANTINED and small.sim.reset_count() == 1
    events = small.remediation.events(second)
    assert any("within its probation" in e.message and e.severity == "warning" for e in events)


def test_reset_that_does_not_fix_the_link_fails_verification_and_pages(small: Rig) -> None:
    small.sim.inject(5, "pcie_downgrade", persistent=True)
    [run_id] = small.fault(3)
    small.run_until_settled()
    run = small.run(run_id)
    assert run.state is m.RunState.QUARANTINED and small.sim.reset_count() == 1
    assert "GPU 5: PCIe width 8 lanes, below max 16" in (run.outcome or "")
    assert all(w.state() == "inactive" for w in small.fleet.workers.values())
    assert small.sink.alerts()[-1].severity == "critical"
    assert small.remediation.status().gpus_out_of_service == 8  # the held hive counts


def test_drain_timeout_proceeds_and_records_what_was_cut(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = small_rig(tmp_path, clock, monkeypatch, drain={"timeout": "20s"})
    try:
        rig.fleet.workers["gpu3"].add_requests(3, duration_s=600.0)
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.DONE and rig.sim.reset_count() == 1
        assert rig.fleet.workers["gpu3"].aborted == 3
        timeout = [e for e in rig.sink.events if e.kind == "drain_timeout"]
        assert len(timeout) == 1 and "gpu3 (running 3, waiting 0)" in timeout[0].message
        assert timeout[0].severity == "warning"
    finally:
        rig.close()


def test_drain_timeout_with_abort_puts_everything_back_and_pages(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = small_rig(tmp_path, clock, monkeypatch, drain={"timeout": "20s", "on_timeout": "abort"})
    try:
        rig.fleet.workers["gpu3"].add_requests(3, duration_s=600.0)
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.ABORTED and not run.holding
        assert rig.sim.reset_count() == 0
        for worker in rig.fleet.workers.values():
            assert worker.stops == 0 and worker.in_rotation and worker.state() == "active"
        assert rig.fleet.workers["gpu3"].aborted == 0
        page = rig.sink.alerts()[-1]
        assert page.kind == "aborted" and page.severity == "critical"
        assert rig.remediation.status().gpus_out_of_service == 0
    finally:
        rig.close()


def test_worker_that_fails_to_come_back_is_held_and_paged(small: Rig) -> None:
    small.fleet.workers["gpu2"].fail_start = True
    [run_id] = small.fault(3)
    small.run_until_settled()
    run = small.run(run_id)
    assert run.state is m.RunState.QUARANTINED and small.sim.reset_count() == 1
    assert run.out_of_rotation() == ("gpu2",)
    assert small.fleet.workers["gpu3"].in_rotation and not small.fleet.workers["gpu2"].in_rotation
    page = small.sink.alerts()[-1]
    assert page.severity == "critical" and "gpu2" in page.message
    assert any("not ready after 60s" in e for e in run.evidence)


def test_a_process_still_on_the_hive_refuses_the_reset(small: Rig) -> None:
    small.sim.add_process(6, 777, "python3 train.py", 10 << 30)  # not a configured worker
    [run_id] = small.fault(3)
    small.run_until_settled()
    run = small.run(run_id)
    assert run.state is m.RunState.QUARANTINED and small.sim.reset_count() == 0
    assert "GPU 6: pid 777 (python3 train.py)" in (run.outcome or "")
    assert small.sim.processes(6)  # it was never killed


def test_a_persons_drain_is_not_refused_by_a_dry_run_run_on_the_gpu(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/remediation.md: a person's drain always acts, whatever the mode. A dry-run run on
    the GPU (which acts on nothing) is cancelled, saying so, and the drain takes the GPU out."""
    rig = small_rig(tmp_path, clock, monkeypatch, mode="dry-run")
    try:
        [dry] = rig.fault(3)
        assert rig.run(dry).state is m.RunState.PLANNED and rig.run(dry).dry_run
        drain = rig.remediation.drain(3, who="carol", why="suspect", now=rig.clock.now())
        assert rig.run(dry).state is m.RunState.ABORTED, rig.run(dry)
        assert "a person drains GPU 3" in (rig.run(dry).outcome or ""), rig.run(dry).outcome
        rig.run_until_settled()
        assert rig.run(drain).state is m.RunState.DRAINED and not rig.run(drain).dry_run
        assert not rig.fleet.workers["gpu3"].in_rotation  # really drained
        assert rig.sim.reset_count() == 0
    finally:
        rig.close()


def test_a_finished_dry_run_quarantine_does_not_refuse_a_persons_drain(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry-run quarantine ends "holding" the GPU, but only in pretence: the GPU serves, and a
    person's drain of it acts (it was refused as "already in run … (quarantined)")."""
    rig = small_rig(tmp_path, clock, monkeypatch, mode="dry-run")
    try:
        [dry] = rig.fault(3, plan="quarantine")
        rig.remediation.tick(rig.clock.now())
        assert rig.run(dry).state is m.RunState.QUARANTINED and rig.run(dry).dry_run
        assert rig.fleet.workers["gpu3"].in_rotation  # the dry run acted on nothing
        drain = rig.remediation.drain(3, who="carol", why="suspect", now=rig.clock.now())
        rig.run_until_settled()
        assert rig.run(drain).state is m.RunState.DRAINED and not rig.run(drain).dry_run
        assert not rig.fleet.workers["gpu3"].in_rotation  # really drained
    finally:
        rig.close()


def test_dry_run_plans_and_logs_every_step_and_touches_nothing(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = small_rig(tmp_path, clock, monkeypatch, mode="dry-run")
    try:
        [run_id] = rig.fault(3)
        assert rig.run(run_id).state is m.RunState.PLANNED  # handle() only journals the plan
        rig.remediation.tick(rig.clock.now())
        run = rig.run(run_id)  # zero waits: the whole plan is walked in one tick
        assert run.state is m.RunState.DONE and run.dry_run
        assert rig.sim.reset_count() == 0 and rig.fleet.rotation_log == []
        assert all(w.stops == 0 for w in rig.fleet.workers.values())
        kinds = rig.sink.kinds()
        for kind in ("draining", "stopping", "reset_intent", "verified", "readmitting", "done"):
            assert kind in kinds
        assert all(e.dry_run for e in rig.sink.events)
        assert rig.remediation.status().gpus_out_of_service == 0
        # dry runs do not spend the budget
        for _ in range(5):
            rig.clock.advance(3600)
            [again] = rig.fault(3)
            rig.remediation.tick(rig.clock.now())
            assert rig.run(again).plan is m.Plan.RESET
    finally:
        rig.close()


def test_mode_off_opens_no_run_and_says_why(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = small_rig(tmp_path, clock, monkeypatch, mode="off")
    try:
        assert rig.fault(3) == []
        assert rig.sink.events[-1].kind == "not_remediated"
        assert "remediation is off" in rig.sink.events[-1].message
    finally:
        rig.close()


def test_pause_and_resume(small: Rig) -> None:
    small.remediation.pause(who="alice", why="firmware rollout", now=small.clock.now())
    assert small.fault(3) == []
    assert "paused by alice" in small.sink.events[-1].message
    small.remediation.resume(who="alice", why="done", now=small.clock.now())
    [run_id] = small.fault(3)
    small.run_until_settled()
    assert small.run(run_id).state is m.RunState.DONE


def test_open_breaker_blocks_automatic_runs_until_reset(small: Rig) -> None:
    lease = small.remediation._lease
    for gpu in range(8):  # 8 GPUs failed fleet-wide within the window: the limit
        lease.record_failure(node="other-node", gpu=gpu, run_id=None, now=small.clock.now())
    assert lease.breaker().tripped
    assert small.fault(3) == []
    assert "circuit breaker open" in small.sink.events[-1].message
    small.clock.advance(1)
    small.remediation.reset_breaker(who="bob", now=small.clock.now())
    assert small.sink.events[-1].resolve_alert
    small.clock.advance(1)
    [run_id] = small.fault(3)
    small.run_until_settled()
    assert small.run(run_id).state is m.RunState.DONE


def test_manual_drain_holds_until_undrain(small: Rig) -> None:
    run_id = small.remediation.drain(3, who="carol", why="reseat cable", now=small.clock.now())
    small.run_until_settled()
    run = small.run(run_id)
    assert run.state is m.RunState.DRAINED and run.holding
    gpu3 = small.fleet.workers["gpu3"]
    assert gpu3.state() == "inactive" and not gpu3.in_rotation
    assert small.fleet.workers["gpu2"].in_rotation
    assert small.sink.alerts()[-1].severity == "warning"
    shown = json.loads(json.dumps(small.remediation.status().to_dict()))
    assert shown["held"][0]["gpus"] == [3] and shown["held"][0]["state"] == "drained"
    assert shown["mode"] == "on" and shown["gpus_out_of_service"] == 1
    assert small.fault(3) == []  # held: the alert is noted only
    with pytest.raises(RemedyError, match="already in run"):
        small.remediation.drain(3, who="carol", why="again", now=small.clock.now())

    back = small.remediation.undrain(3, who="carol", why="cable fixed", now=small.clock.now())
    small.run_until_settled()
    assert small.run(back).state is m.RunState.DONE
    assert gpu3.state() == "active" and gpu3.in_rotation
    assert not small.run(run_id).holding
    assert (
        small.remediation.status().held == ()
        and small.remediation.status().gpus_out_of_service == 0
    )
    released = [e for e in small.sink.events if e.kind == "hold_released"]
    assert released and released[0].resolve_alert and released[0].run_id == run_id
    with pytest.raises(RemedyError, match="not held"):
        small.remediation.undrain(3, who="carol", why="twice", now=small.clock.now())


def test_cancel_while_draining_restores_rotation(small: Rig) -> None:
    small.fleet.workers["gpu3"].add_requests(1, duration_s=600.0)
    [run_id] = small.fault(3)
    small.remediation.tick(small.clock.now())
    small.clock.advance(7)
    small.remediation.tick(small.clock.now())
    assert small.run(run_id).state is m.RunState.QUIESCING
    run = small.remediation.cancel(run_id, who="dave", why="peak hour", now=small.clock.now())
    assert run.state is m.RunState.ABORTED and not run.holding
    assert all(w.in_rotation and w.stops == 0 for w in small.fleet.workers.values())
    assert small.sim.reset_count() == 0
    # a second cancel is refused, naming the state: "aborted" is not read as "cancelled now"
    with pytest.raises(RemedyError, match=f"run {run_id} already ended \\(aborted\\)"):
        small.remediation.cancel(run_id, who="dave", why="again", now=small.clock.now())


def test_cancel_after_the_reset_keeps_workers_down_and_says_so(small: Rig) -> None:
    [run_id] = small.fault(3)
    for _ in range(60):
        small.clock.advance(1)
        small.remediation.tick(small.clock.now())
        if small.run(run_id).state is m.RunState.VERIFYING:
            break
    run = small.remediation.cancel(run_id, who="erin", why="I take it", now=small.clock.now())
    assert run.state is m.RunState.ABORTED and run.holding and small.sim.reset_count() == 1
    page = small.sink.alerts()[-1]
    assert page.raise_alert and "gpu2, gpu3" in page.message
    small.remediation.undrain(3, who="erin", why="all good", now=small.clock.now())
    small.run_until_settled()
    assert all(w.in_rotation and w.state() == "active" for w in small.fleet.workers.values())


def test_budget_spent_with_a_reboot_command_reboots_and_verifies_after_restart(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "actions.log"
    reboot = tmp_path / "request-reboot"
    reboot.write_text(f'#!/bin/sh\necho "reboot $1" >> {log}\n')
    reboot.chmod(0o755)
    burn = tmp_path / "burn-in"
    burn.write_text(f'#!/bin/sh\necho "burn-in $1" >> {log}\necho "all GEMMs passed"\n')
    burn.chmod(0o755)
    rig = small_rig(
        tmp_path,
        clock,
        monkeypatch,
        budget={"max_resets": 1},
        reboot={"command": [str(reboot), "{node}"], "timeout": "10m"},
        verify={"burn_in": {"command": [str(burn), "{gpus}"], "timeout": "1m"}},
    )
    try:
        [first] = rig.fault(3)
        rig.run_until_settled()
        assert rig.run(first).state is m.RunState.DONE
        rig.clock.advance(15 * 60)
        [second] = rig.fault(3)  # budget spent: the next rung is the reboot
        for _ in range(30):
            rig.clock.advance(1)
            rig.remediation.tick(rig.clock.now())
        run = rig.run(second)
        assert run.plan is m.Plan.REBOOT and run.state is m.RunState.REBOOTING
        assert all(w.state() == "inactive" for w in rig.fleet.workers.values())
        # the node reboots: every GPU is reset, the daemon starts again from its database
        rig.sim.reset_hive(0)
        rig.restart_daemon()
        rig.run_until_settled()
        run = rig.run(second)
        assert run.state is m.RunState.DONE and run.reboot_count == 1, run.outcome
        assert log.read_text().splitlines() == [
            "burn-in 0,1,2,3,4,5,6,7",
            f"reboot {rig.node_name}",
            "burn-in 0,1,2,3,4,5,6,7",
        ]
        assert all(w.in_rotation and w.state() == "active" for w in rig.fleet.workers.values())
        kinds = [e.kind for e in rig.remediation.events(second)]
        assert kinds.count("reboot_intent") == 1 and "burn_in_passed" in kinds
    finally:
        rig.close()


def test_a_hive_reset_leaves_an_already_quarantined_gpu_out(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(tmp_path, clock, workers_on=(3, 5))
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    try:
        rig.sim.inject(5, "pcie_downgrade", persistent=True)
        [held] = rig.fault(5, plan="quarantine")
        rig.run_until_settled()
        assert rig.run(held).state is m.RunState.QUARANTINED
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.DONE, run.outcome  # GPU 5's link is not held against it
        assert run.held_gpus == (5,) and run.worker_names == ("gpu3",)
        assert rig.sim.reset_count() == 1
        gpu5 = rig.fleet.workers["gpu5"]
        assert gpu5.state() == "inactive" and not gpu5.in_rotation and gpu5.starts == 1
        assert rig.fleet.workers["gpu3"].in_rotation
        assert rig.remediation.status().held[0].gpus == (5,)
        assert "GPUs 5 stay held out of service" in rig.remediation.events(run_id)[0].message
    finally:
        rig.close()


def test_an_unknown_hive_resets_the_whole_node_and_the_plan_says_why(small: Rig) -> None:
    # amdsmi_get_xgmi_info fails at discovery for GPU 2: its hive (and so what a reset of it
    # touches) is unknown, so the unit fails safe to the whole node, not to GPU 2 alone
    small.sim.inject(2, "unsupported_fields", calls=["amdsmi_get_xgmi_info"], status="FILE_ERROR")
    small.restart_daemon()
    small.sim.inject(2, "ecc_uncorrectable")
    [run_id] = small.fault(2)
    run = small.run(run_id)
    assert run.gpu_indices == tuple(range(8))
    said = [e.message for e in small.remediation.events(run_id) if e.kind == "policy"]
    assert said and "whole node" in said[0] and "amdsmi_get_xgmi_info" in said[0], said


def _with_benchmark(rig: Rig) -> None:
    """A short probe (3 streamed completions of 10 tokens), so the test stays fast; the
    latencies' p99 over 3 requests is their worst, which scheduling on a loaded test machine
    moves a lot, so only tokens/s decides here."""
    bench = BenchmarkConfig(
        requests=3, max_tokens=10, warmup=0, tolerance=0.75, latency_factor=None, timeout=5.0
    )
    rig.config = rig.config.model_copy(
        update={"vllm": rig.config.vllm.model_copy(update={"benchmark": bench})}
    )
    rig.restart_daemon()


def test_a_gpu_slow_after_the_reset_is_quarantined_with_its_benchmark_figures(
    small: Rig,
) -> None:
    _with_benchmark(small)
    gate = small.remediation.benchmark
    assert gate is not None
    taken = gate.capture(small.config.vllm.workers, small.clock.now())  # on the healthy hive
    assert [b.worker for b in taken] == ["gpu2", "gpu3"]
    assert (small.tmp / "vllm-baselines.json").exists()
    # GPU 3's clocks stay latched low through the reset: it answers health and a 1-token
    # completion, only slowly
    small.sim.inject(3, "power_excursion", persistent=True, demand_w=3000)
    [run_id] = small.fault(3)
    small.run_until_settled()

    run = small.run(run_id)
    assert run.state is m.RunState.QUARANTINED and small.sim.reset_count() == 1
    assert run.out_of_rotation() == ("gpu3",)
    assert small.fleet.workers["gpu2"].in_rotation and not small.fleet.workers["gpu3"].in_rotation
    page = small.sink.alerts()[-1]
    assert page.severity == "critical"
    assert "benchmark after the reset: gpu3 below baseline:" in page.message
    assert "tok/s <" in page.message and "(baseline " in page.message
    assert any(e.startswith("benchmark gpu3: below baseline") for e in run.evidence)
    passed = [e.message for e in small.sink.events if e.kind == "worker_benchmark"]
    assert len(passed) == 1 and passed[0].startswith("gpu2: benchmark ")


def test_without_a_baseline_the_benchmark_is_skipped_and_says_so(small: Rig) -> None:
    _with_benchmark(small)
    small.sim.inject(3, "ecc_uncorrectable", count=2)
    [run_id] = small.fault(3)
    small.run_until_settled()
    assert small.run(run_id).state is m.RunState.DONE
    said = [e.message for e in small.sink.events if e.kind == "worker_benchmark"]
    assert sorted(said) == [
        f"gpu{i}: benchmark skipped: no baseline for gpu{i} (stand-in/llama-70b)" for i in (2, 3)
    ]
