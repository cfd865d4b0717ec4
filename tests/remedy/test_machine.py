"""The pure run state machine on a fake clock: paths, every state × event, and invariants."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetd.remedy import machine as m

from .machine_world import NOW, World, drive, kinds, new_run, records, settle


def commands_of(cmds: list[m.Command], kind: type) -> list[m.Command]:
    return [c for c in cmds if isinstance(c, kind)]


# ------------------------------------------------------------------------------------ paths
def test_reset_happy_path_drains_every_worker_resets_once_and_readmits() -> None:
    world = World(busy_until=NOW + 20)
    run, cmds, end = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE
    assert run.reset_count == 1
    assert commands_of(cmds, m.ResetGpu) == [m.ResetGpu(3)]  # the faulty GPU, once
    assert kinds(cmds)[:3] == ["run_planned", "lease_granted", "draining"]
    for kind in ("balancer_wait", "quiescing", "stopping", "release_check", "reset_intent"):
        assert kind in kinds(cmds)
    assert kinds(cmds)[-1] == "done"
    assert isinstance(cmds[-1], m.ReleaseLease)
    # every worker went out, stopped, came back
    for w in ("w0", "w1"):
        assert m.Unroute(w) in cmds and m.StopUnit(w) in cmds
        assert m.StartUnit(w) in cmds and m.Reroute(w) in cmds
    assert all(w.phase is m.WorkerPhase.REROUTED for w in run.workers)
    # the order of the risky steps
    order = [type(c) for c in cmds]
    assert order.index(m.StopUnit) > max(i for i, t in enumerate(order) if t is m.Unroute)
    assert order.index(m.ResetGpu) > max(i for i, t in enumerate(order) if t is m.StopUnit)
    assert order.index(m.ResetGpu) > order.index(m.CheckProcesses)
    assert order.index(m.StartUnit) > order.index(m.PollHealth)
    # waits: balancer 15 s, busy until +20, two idle reads 1 s apart, 3 polls 5 s apart
    assert end - NOW >= 15 + 5 + 1 + 3 * 5
    assert not run.holding and not run.lease_held


def test_balancer_delay_is_waited_before_the_first_load_read() -> None:
    world = World()
    run, _cmds = settle(world, new_run(), NOW)
    assert run.state is m.RunState.BALANCER_WAIT and run.next_at == NOW + 15
    run2, cmds2 = m.step(run, m.Tick(), NOW + 14.9)
    assert run2 == run and cmds2 == []
    run3, cmds3 = m.step(run, m.Tick(), NOW + 15)
    assert run3.state is m.RunState.QUIESCING
    assert commands_of(cmds3, m.ReadLoad) == [m.ReadLoad("w0"), m.ReadLoad("w1")]


def to_quiescing(**overrides: object) -> m.Run:
    run, _ = new_run(balancer_delay=0.0, **overrides)
    run, _ = m.step(run, m.LeaseResult(True), NOW)
    run, _ = m.step(run, m.UnrouteResult("w0"), NOW)
    run, cmds = m.step(run, m.UnrouteResult("w1"), NOW)
    assert run.state is m.RunState.QUIESCING
    assert commands_of(cmds, m.ReadLoad) == [m.ReadLoad("w0"), m.ReadLoad("w1")]
    return run


def test_two_consecutive_idle_reads_are_needed() -> None:
    run = to_quiescing()
    run, cmds = m.step(run, m.LoadResult("w0", 0.0, 0.0), NOW)
    run, cmds = m.step(run, m.LoadResult("w1", 0.0, 0.0), NOW)
    assert run.state is m.RunState.QUIESCING and run.next_at == NOW + 1
    run, cmds = m.step(run, m.Tick(), NOW + 1)
    run, cmds = m.step(run, m.LoadResult("w0", 1.0, 0.0), NOW + 1)  # busy again: restart count
    run, cmds = m.step(run, m.LoadResult("w1", 0.0, 0.0), NOW + 1)
    assert run.worker("w0").idle_reads == 0  # type: ignore[union-attr]
    assert run.worker("w1").idle_reads == 2  # type: ignore[union-attr]
    run, cmds = m.step(run, m.Tick(), NOW + 2)
    assert cmds == [m.ReadLoad("w0")]  # the idle one is not read again


def test_drain_timeout_proceeds_by_default_with_evidence() -> None:
    world = World(busy_until=NOW + 10_000)
    run, cmds, _ = drive(world, new_run(drain_timeout=30.0), NOW)
    assert run.state is m.RunState.DONE
    timeout = [r for r in records(cmds) if r.kind == "drain_timeout"]
    assert len(timeout) == 1 and "w0 (running 2, waiting 0)" in timeout[0].message
    assert any("drain timed out" in e for e in run.evidence)


def test_drain_timeout_abort_puts_workers_back_and_pages() -> None:
    world = World(busy_until=NOW + 10_000)
    run, cmds, _ = drive(world, new_run(drain_timeout=30.0, on_drain_timeout="abort"), NOW)
    assert run.state is m.RunState.ABORTED
    assert commands_of(cmds, m.StopUnit) == [] and commands_of(cmds, m.ResetGpu) == []
    assert m.Reroute("w0") in cmds and m.Reroute("w1") in cmds
    final = records(cmds)[-1]
    assert final.kind == "aborted" and final.severity == "critical" and final.raise_alert
    assert not run.holding and isinstance(cmds[-1], m.ReleaseLease)


def test_unreachable_worker_counts_as_idle() -> None:
    run = to_quiescing(idle_reads=1)
    run, _ = m.step(run, m.LoadResult("w0", error="connection refused", gone=True), NOW)
    run, _cmds = m.step(run, m.LoadResult("w1", 0.0, 0.0), NOW)
    assert run.state is m.RunState.STOPPING
    assert "unreachable" in (run.worker("w0").detail or "")  # type: ignore[union-attr]


def test_a_worker_whose_load_cannot_be_read_is_not_idle() -> None:
    """A timeout, a 401 or gauges missing from /metrics say nothing about in-flight requests:
    the drain waits (until its timeout, then ``on_drain_timeout`` decides)."""
    run = to_quiescing(idle_reads=1)
    run, _ = m.step(run, m.LoadResult("w0", error="/metrics: ReadTimeout"), NOW)
    run, _ = m.step(run, m.LoadResult("w1", 0.0, 0.0), NOW)
    assert run.state is m.RunState.QUIESCING
    w0 = run.worker("w0")
    assert w0 is not None and w0.idle_reads == 0 and w0.in_flight is None
    assert "ReadTimeout" in (w0.detail or "")


def test_processes_still_holding_the_gpu_refuse_the_reset() -> None:
    world = World(holders=lambda now: ("gpu 3: pid 4242 (python3)",))
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED and run.holding
    assert commands_of(cmds, m.ResetGpu) == []
    assert len(commands_of(cmds, m.CheckProcesses)) >= 5  # retried until the release timeout
    final = records(cmds)[-1]
    assert final.severity == "critical" and final.raise_alert and "pid 4242" in final.message


def test_processes_that_leave_in_time_allow_the_reset() -> None:
    release = NOW + 15 + 2 + 1 + 4  # after drain, then 4 more seconds
    world = World(holders=lambda now: ("pid 1",) if now < release else ())
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE and len(commands_of(cmds, m.ResetGpu)) == 1


def test_failed_reset_quarantines_and_pages() -> None:
    run, cmds, _ = drive(World(reset_error="amdsmi NO_PERM"), new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "reset failed: amdsmi NO_PERM" in (run.outcome or "")
    assert records(cmds)[-1].raise_alert


def test_failed_reset_escalates_to_reboot_when_allowed() -> None:
    run, cmds, _ = drive(
        World(reset_error="hang"), new_run(escalate_to_reboot=True), NOW, limit=100
    )
    assert run.state is m.RunState.REBOOTING and commands_of(cmds, m.RequestReboot)
    # the node restarts: the daemon resumes and verifies
    run2, cmds2 = settle(World(), m.step(run, m.Resumed(), NOW + 200), NOW + 200)
    assert run2.state is m.RunState.VERIFYING and m.Rediscover() in cmds2
    assert run2.reboot_count == 1


def test_reboot_that_never_happens_quarantines() -> None:
    run, cmds, _ = drive(World(), new_run(plan=m.Plan.REBOOT, reboot_timeout=60.0), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "did not restart" in (run.outcome or "")
    assert commands_of(cmds, m.ResetGpu) == []


def test_new_uncorrectable_errors_during_verification_fail_at_once() -> None:
    counts = iter([1.0, 1.0, 2.0, 2.0])
    world = World(
        health=lambda now: m.HealthResult((), ((3, next(counts)),), ((3, 9.0),)),
        baseline=lambda now: m.BaselineResult(((3, 1.0),), ((3, 9.0),)),
    )
    run, cmds, _ = drive(world, new_run(verify_polls=5), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "GPU 3: 1 new uncorrectable error(s) since the reset" in (run.outcome or "")
    assert commands_of(cmds, m.StartUnit) == []  # workers stay down


def test_verification_needs_consecutive_healthy_polls() -> None:
    answers = iter([(), ("GPU 3: PCIe width 8 lanes, below max 16",), (), (), (), (), ()])
    world = World(health=lambda now: m.HealthResult(next(answers), ((3, 0.0),)))
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE
    assert len(commands_of(cmds, m.PollHealth)) == 5  # 1 ok, 1 bad, then 3 ok


def test_verification_timeout_quarantines_with_the_last_problem() -> None:
    world = World(health=lambda now: m.HealthResult(("GPU 1: XGMI link 3 down",), ()))
    run, _cmds, _ = drive(world, new_run(verify_timeout=30.0), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "XGMI link 3 down" in (run.outcome or "")


def test_gpu_missing_after_reset_is_retried_until_the_deadline() -> None:
    world = World(present=lambda now: ("uuid-0", "uuid-1", "uuid-2"))
    run, cmds, _ = drive(world, new_run(verify_timeout=30.0), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "missing after reset: GPU 3" in (run.outcome or "")
    assert len(commands_of(cmds, m.Rediscover)) > 2


def test_burn_in_runs_after_verification_and_can_fail() -> None:
    run, cmds, _ = drive(World(), new_run(burn_in=True), NOW)
    assert run.state is m.RunState.DONE and m.RunBurnIn() in cmds
    run, cmds, _ = drive(World(burn_in_error="exit 1"), new_run(burn_in=True), NOW)
    assert run.state is m.RunState.QUARANTINED and "burn-in failed" in (run.outcome or "")


def test_worker_that_fails_to_come_back_is_held_and_paged_while_others_return() -> None:
    world = World(never_ready=frozenset({"w1"}))
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED and run.holding
    assert m.Reroute("w0") in cmds and m.Reroute("w1") not in cmds
    assert run.worker("w1").phase is m.WorkerPhase.FAILED  # type: ignore[union-attr]
    assert run.out_of_rotation() == ("w1",)
    final = records(cmds)[-1]
    assert final.raise_alert and final.severity == "critical" and "w1" in final.message


SLOW = "below baseline: 40.0 tok/s < 80.0 (baseline 100.0 × 0.8)"


def test_a_worker_below_its_benchmark_baseline_is_held_and_paged_with_the_figures() -> None:
    world = World(benchmark={"w0": ("benchmark 99.0 tok/s", False), "w1": (SLOW, True)})
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED and run.holding
    assert m.Reroute("w0") in cmds and m.Reroute("w1") not in cmds
    assert run.out_of_rotation() == ("w1",)
    assert "w0: benchmark 99.0 tok/s" in [r.message for r in records(cmds)]
    assert "worker_below_baseline" in kinds(cmds)
    assert f"benchmark w1: {SLOW}" in run.evidence
    final = records(cmds)[-1]
    assert final.raise_alert and final.severity == "critical"
    assert f"benchmark after the reset: w1 {SLOW}" in final.message
    assert run.outcome == f"benchmark after the reset: w1 {SLOW}"


def test_a_skipped_benchmark_is_said_and_readmits() -> None:
    skipped = "benchmark skipped: no baseline for w0 (m)"
    run, cmds, _ = drive(World(benchmark={"w0": (skipped, False)}), new_run(), NOW)
    assert run.state is m.RunState.DONE
    assert f"w0: {skipped}" in [r.message for r in records(cmds)]


def test_start_failure_is_recorded_and_quarantines() -> None:
    run, cmds, _ = drive(World(start_error={"w0": "unit not found"}), new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert "worker_start_failed" in kinds(cmds) and m.Reroute("w1") in cmds


def test_unroute_failure_rolls_back_and_pages() -> None:
    run, cmds, _ = drive(World(unroute_error={"w1": "hook exit 2"}), new_run(), NOW)
    assert run.state is m.RunState.ABORTED and not run.holding
    assert m.Reroute("w0") in cmds and m.Reroute("w1") in cmds
    assert commands_of(cmds, m.StopUnit) == []
    assert records(cmds)[-1].raise_alert


def test_stop_failure_still_requires_the_process_check() -> None:
    world = World(stop_error={"w0": "timeout"}, holders=lambda now: ("pid 7",))
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED and commands_of(cmds, m.ResetGpu) == []


def test_lease_denied_waits_and_retries_then_gives_up() -> None:
    world = World(lease=lambda now: m.LeaseResult(False, "fleet cap: 8 of 8 GPUs out"))
    run, cmds, _ = drive(world, new_run(lease_timeout=35.0), NOW)
    assert run.state is m.RunState.ABORTED and not run.lease_held
    assert len(commands_of(cmds, m.AcquireLease)) == 5  # 0, 10, 20, 30, 40
    assert kinds(cmds).count("lease_waiting") == 1  # the same reason is recorded once
    assert not records(cmds)[-1].raise_alert  # nothing was touched


def test_lease_granted_later_proceeds() -> None:
    world = World(lease=lambda now: m.LeaseResult(now >= NOW + 20, "busy"))
    run, _cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE


def test_final_lease_denial_aborts() -> None:
    world = World(lease=lambda now: m.LeaseResult(False, "remediation is off", final=True))
    run, _cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.ABORTED and "remediation is off" in (run.outcome or "")


def test_quarantine_plan_drains_and_holds() -> None:
    run, cmds, _ = drive(World(), new_run(plan=m.Plan.QUARANTINE, gpus=(3,)), NOW)
    assert run.state is m.RunState.QUARANTINED and run.holding and run.lease_held
    assert commands_of(cmds, m.ResetGpu) == [] and commands_of(cmds, m.StartUnit) == []
    assert records(cmds)[-1].raise_alert and records(cmds)[-1].severity == "critical"


def test_manual_drain_holds_with_a_warning_alert() -> None:
    run, cmds, _ = drive(World(), new_run(plan=m.Plan.DRAIN), NOW)
    assert run.state is m.RunState.DRAINED and run.holding
    assert records(cmds)[-1].severity == "warning" and records(cmds)[-1].raise_alert


def test_undrain_starts_waits_for_health_and_reroutes() -> None:
    world = World(ready_after=NOW + 12)
    run, cmds, _ = drive(world, new_run(plan=m.Plan.UNDRAIN), NOW)
    assert run.state is m.RunState.DONE
    assert commands_of(cmds, m.Unroute) == [] and commands_of(cmds, m.ResetGpu) == []
    assert m.ReleaseHolds() in cmds and records(cmds)[-1].resolve_alert


def test_run_without_workers_skips_draining() -> None:
    run, cmds, _ = drive(World(), new_run(workers=()), NOW)
    assert run.state is m.RunState.DONE and len(commands_of(cmds, m.ResetGpu)) == 1
    assert commands_of(cmds, m.ReadLoad) == []


# ------------------------------------------------------------------------------------ resume
def test_resume_in_resetting_verifies_and_never_resets_again() -> None:
    world = World()
    run, _cmds = settle(world, new_run(balancer_delay=0.0, idle_reads=1), NOW)
    # stop right after the reset intent is journaled (the executor crashed mid-reset)
    run = replace(run, state=m.RunState.RESETTING, reset_count=1)
    run2, cmds2 = m.step(run, m.Resumed(), NOW + 5)
    assert run2.state is m.RunState.VERIFYING and run2.reset_count == 1
    assert commands_of(cmds2, m.ResetGpu) == []
    assert "verifying instead of resetting again" in records(cmds2)[0].message
    final, more, _ = drive(world, (run2, cmds2), NOW + 5)
    assert final.state is m.RunState.DONE
    assert commands_of(more, m.ResetGpu) == []


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (m.RunState.UNROUTING, m.Unroute),
        (m.RunState.QUIESCING, m.ReadLoad),
        (m.RunState.STOPPING, m.StopUnit),
        (m.RunState.RELEASE_CHECK, m.CheckProcesses),
        (m.RunState.VERIFYING, m.Rediscover),
        (m.RunState.STARTING, m.StartUnit),
        (m.RunState.AWAIT_READY, m.CheckReady),
        (m.RunState.ROLLING_BACK, m.Reroute),
        (m.RunState.PLANNED, m.AcquireLease),
        (m.RunState.BURN_IN, m.RunBurnIn),
        (m.RunState.VALIDATING, m.RunValidator),
    ],
)
def test_resume_reissues_what_the_state_needs(state: m.RunState, expected: type) -> None:
    run = sample_run(state)
    _, cmds = m.step(run, m.Resumed(), NOW + 1)
    assert commands_of(cmds, expected), f"{state}: {cmds}"
    assert commands_of(cmds, m.ResetGpu) == []


# ------------------------------------------------------------------------------------ cancel
def test_cancel_while_draining_puts_workers_back() -> None:
    run, _ = settle(World(), new_run(), NOW)
    assert run.state is m.RunState.BALANCER_WAIT
    run, cmds = m.step(run, m.Cancel("alice", "maintenance"), NOW + 1)
    assert run.state is m.RunState.ROLLING_BACK
    run, _cmds2 = settle(World(), (run, cmds), NOW + 1)
    assert run.state is m.RunState.ABORTED and not run.holding
    assert "cancelled by alice: maintenance" in (run.outcome or "")


def test_cancel_after_stop_holds_and_alerts() -> None:
    world = World()
    run, _ = settle(world, new_run(balancer_delay=0.0, idle_reads=1), NOW)
    run, _ = settle(world, m.step(run, m.Tick(), NOW + 1), NOW + 1)
    assert run.state is m.RunState.VERIFYING
    run, cmds = m.step(run, m.Cancel("bob", "looking myself"), NOW + 2)
    assert run.state is m.RunState.ABORTED and run.holding and run.lease_held
    rec = records(cmds)[-1]
    assert rec.raise_alert and "w0, w1" in rec.message


def test_cancel_is_ignored_once_terminal() -> None:
    run, _, _ = drive(World(), new_run(), NOW)
    assert m.step(run, m.Cancel("x", "y"), NOW + 99_999) == (run, [])


# ------------------------------------------------------------------------------------ exhaustive
def sample_run(state: m.RunState) -> m.Run:
    """A run as it plausibly looks in ``state``."""
    run, _ = new_run()
    phase = {
        m.RunState.PLANNED: m.WorkerPhase.SERVING,
        m.RunState.UNROUTING: m.WorkerPhase.UNROUTING,
        m.RunState.BALANCER_WAIT: m.WorkerPhase.UNROUTED,
        m.RunState.QUIESCING: m.WorkerPhase.UNROUTED,
        m.RunState.STOPPING: m.WorkerPhase.STOPPING,
        m.RunState.RELEASE_CHECK: m.WorkerPhase.STOPPED,
        m.RunState.RESETTING: m.WorkerPhase.STOPPED,
        m.RunState.REBOOTING: m.WorkerPhase.STOPPED,
        m.RunState.VERIFYING: m.WorkerPhase.STOPPED,
        m.RunState.BURN_IN: m.WorkerPhase.STOPPED,
        m.RunState.VALIDATING: m.WorkerPhase.STOPPED,
        m.RunState.STARTING: m.WorkerPhase.STARTING,
        m.RunState.AWAIT_READY: m.WorkerPhase.STARTED,
        m.RunState.ROLLING_BACK: m.WorkerPhase.UNROUTED,
        m.RunState.DONE: m.WorkerPhase.REROUTED,
        m.RunState.QUARANTINED: m.WorkerPhase.STOPPED,
        m.RunState.ABORTED: m.WorkerPhase.SERVING,
        m.RunState.DRAINED: m.WorkerPhase.STOPPED,
    }[state]
    resets = 1 if state in (m.RunState.RESETTING, m.RunState.VERIFYING) else 0
    return replace(
        run,
        state=state,
        workers=tuple(replace(w, phase=phase) for w in run.workers),
        lease_held=state is not m.RunState.PLANNED,
        reset_count=resets,
        deadline=NOW + 50,
        next_at=NOW + 5,
        rediscovered=state is m.RunState.VERIFYING,
        validating="rvs" if state is m.RunState.VALIDATING else "",
        validate_attempt=1 if state is m.RunState.VALIDATING else 0,
        settings=replace(run.settings, validators=("rvs", "inference")),
    )


EVENTS: list[m.Event] = [
    m.Tick(),
    m.Resumed(),
    m.Cancel("op", "why"),
    m.LeaseResult(True),
    m.LeaseResult(False, "cap"),
    m.LeaseResult(False, "off", final=True),
    m.UnrouteResult("w0"),
    m.UnrouteResult("w0", "boom"),
    m.UnrouteResult("nobody"),
    m.LoadResult("w0", 0.0, 0.0),
    m.LoadResult("w0", 3.0, 1.0),
    m.LoadResult("w0", error="refused", gone=True),
    m.LoadResult("w0", error="timeout"),
    m.StopResult("w0"),
    m.StopResult("w0", "boom"),
    m.ProcessResult(()),
    m.ProcessResult(("pid 1",)),
    m.ProcessResult(error="amdsmi busy"),
    m.ResetResult(),
    m.ResetResult("boom"),
    m.RebootResult(),
    m.RebootResult("boom"),
    m.RediscoverResult(("uuid-0", "uuid-1", "uuid-2", "uuid-3")),
    m.RediscoverResult(("uuid-0",)),
    m.HealthResult(()),
    m.HealthResult(("GPU 0: down",)),
    m.HealthResult((), ((3, 9.0),)),
    m.BurnInResult(),
    m.BurnInResult("exit 3"),
    m.ValidatorResult("rvs", 1, True, "8 result(s), all TRUE"),
    m.ValidatorResult("rvs", 1, False, "exited 1", output="[ERROR ] boom"),
    m.ValidatorResult("rvs", 2, True, "late answer"),
    m.StartResult("w0"),
    m.StartResult("w0", "boom"),
    m.ReadyResult("w0", True),
    m.ReadyResult("w0", False, "503"),
    m.ReadyResult("w0", True, "", "below baseline: 40.0 tok/s < 80.0", True),
    m.RerouteResult("w0"),
    m.RerouteResult("w0", "boom"),
]
TIMES = [NOW + 1, NOW + 5, NOW + 60]


@pytest.mark.parametrize(
    ("state", "event", "now"), list(itertools.product(list(m.RunState), EVENTS, TIMES))
)
def test_every_state_and_event(state: m.RunState, event: m.Event, now: float) -> None:
    run = sample_run(state)
    new, cmds = m.step(run, event, now)
    check_step(run, event, new, cmds)
    assert m.run_from_dict(m.run_to_dict(new)) == new  # every state survives the journal


def check_step(run: m.Run, event: m.Event, new: m.Run, cmds: list[m.Command]) -> None:
    if run.terminal:
        assert (new, cmds) == (run, [])
        return
    resets = commands_of(cmds, m.ResetGpu)
    if resets:  # the only way to a reset: a clean process check in release_check, first time
        assert run.state is m.RunState.RELEASE_CHECK and run.reset_count == 0
        assert isinstance(event, m.ProcessResult) and not event.holders and event.error is None
        assert new.state is m.RunState.RESETTING and new.reset_count == 1
        assert all(
            w.phase in (m.WorkerPhase.STOPPED, m.WorkerPhase.STOP_FAILED) for w in run.workers
        )
    assert new.reset_count <= 1 and len(resets) <= 1
    if isinstance(event, m.Resumed):
        assert not resets
    if isinstance(event, m.Cancel):
        assert new.state in (m.RunState.ROLLING_BACK, m.RunState.ABORTED)
        assert not any(
            isinstance(c, m.StopUnit | m.ResetGpu | m.StartUnit | m.RequestReboot) for c in cmds
        )
    if new.state is not run.state:
        assert new.entered_at == max(run.entered_at, new.entered_at)
    if new.terminal:
        assert_safe_conclusion(new, cmds)


def assert_safe_conclusion(run: m.Run, cmds: list[m.Command]) -> None:
    """Never a worker left out of service without an alert; never a lease leaked."""
    recs = records(cmds)
    assert recs, "a run never ends silently"
    final = recs[-1]
    if run.out_of_rotation() and not (
        run.plan is m.Plan.UNDRAIN and run.state is m.RunState.ABORTED
    ):
        assert run.holding and final.raise_alert and final.severity in ("warning", "critical")
        assert run.lease_held  # held GPUs still count as out of service
    elif run.state is not m.RunState.DONE:
        assert not run.holding
    if not run.holding:
        assert not run.lease_held


# ------------------------------------------------------------------------------------ properties
event_strategy = st.sampled_from(EVENTS)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    plan=st.sampled_from(list(m.Plan)),
    events=st.lists(st.tuples(event_strategy, st.floats(0, 30)), max_size=60),
)
def test_random_event_sequences_keep_the_invariants(
    plan: m.Plan, events: list[tuple[m.Event, float]]
) -> None:
    run, cmds = new_run(plan=plan, workers=("w0",))
    now = NOW
    all_cmds = list(cmds)
    for event, dt in events:
        now += dt
        prev = run
        run, cmds = m.step(run, event, now)
        check_step(prev, event, run, cmds)
        all_cmds += cmds
    assert len(commands_of(all_cmds, m.ResetGpu)) <= 1
    assert len(commands_of(all_cmds, m.RequestReboot)) <= 1
    if plan in (m.Plan.DRAIN, m.Plan.UNDRAIN, m.Plan.QUARANTINE):
        assert not commands_of(all_cmds, m.ResetGpu)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    crash_after=st.integers(0, 80),
    plan=st.sampled_from([m.Plan.RESET, m.Plan.REBOOT]),
)
def test_a_resume_at_any_point_still_concludes_with_one_reset(
    crash_after: int, plan: m.Plan
) -> None:
    """Drop every in-flight outcome at a point, resume, and the run still ends well."""
    world = World()
    run, cmds = new_run(plan=plan, balancer_delay=2.0, reboot_timeout=30.0)
    issued = list(cmds)
    queue = list(cmds)
    now = NOW
    steps = 0
    while queue and steps < crash_after:
        answer = world.answer(queue.pop(0), run, now)
        steps += 1
        if answer is not None:
            run, more = m.step(run, answer, now)
            issued += more
            queue += more
        if not queue and not run.terminal:
            now += 1
            run, more = m.step(run, m.Tick(), now)
            issued += more
            queue += more
    # crash: whatever was queued is lost; the daemon restarts from the journaled run
    run, more = m.step(run, m.Resumed(), now + 1)
    issued += more
    run, rest, _ = drive(world, (run, more), now + 1)
    issued += rest
    assert run.terminal
    assert len(commands_of(issued, m.ResetGpu)) <= 1
    if plan is m.Plan.RESET:
        assert run.state is m.RunState.DONE
        assert len(commands_of(issued, m.ResetGpu)) == 1


# ---------------------------------------------------- verification against the pre-reset baseline
def _counts(*values: float, ce: float | None = 40.0) -> Callable[[float], m.HealthResult]:
    """GPU 3's uncorrectable counts poll after poll (the last repeats); ``ce``: its
    correctable count after the reset (None: not read)."""
    seq = iter(values)
    last = [values[-1]]

    def health(now: float) -> m.HealthResult:
        last[0] = next(seq, last[0])
        return m.HealthResult((), ((3, last[0]),), () if ce is None else ((3, ce),))

    return health


@pytest.mark.parametrize(
    ("before", "after", "ce_after", "state"),
    [
        (1.0, (1.0, 1.0, 1.0), 40.0, m.RunState.DONE),  # the driver kept its counts
        (1.0, (0.0, 0.0, 0.0), 0.0, m.RunState.DONE),  # the reset zeroed them
        (1.0, (0.0, 1.0), 0.0, m.RunState.QUARANTINED),  # zeroed, then a new error
        (5.0, (2.0,), 0.0, m.RunState.QUARANTINED),  # zeroed and already counting again
        (1.0, (2.0,), 40.0, m.RunState.QUARANTINED),  # kept, plus one
        # zeroed, as the correctable count shows, and the error came straight back
        (1.0, (1.0,), 0.0, m.RunState.QUARANTINED),
        # nothing tells whether the reset cleared anything: never passed
        (1.0, (1.0,), None, m.RunState.QUARANTINED),
    ],
)
def test_verification_reads_counts_against_the_baseline_taken_before_the_reset(
    before: float, after: tuple[float, ...], ce_after: float | None, state: m.RunState
) -> None:
    ce_before = 40.0 if ce_after is not None else None
    world = World(
        health=_counts(*after, ce=ce_after),
        baseline=lambda now: m.BaselineResult(
            ((3, before),), () if ce_before is None else ((3, ce_before),)
        ),
    )
    run, _, _ = drive(world, new_run(), NOW)
    assert run.state is state, run.outcome
    assert run.ue_baseline == ((3, before),)


def test_after_a_zeroing_reset_a_gpu_without_a_baseline_counts_every_error_as_new() -> None:
    """GPU 3's pre-reset read failed (no baseline); GPU 2's count fell (the reset zeroed the
    unit's counters). GPU 3's 1 at the first verification poll is an error since the reset:
    compared with the lowest count since the reset (that same 1) it would have passed."""
    world = World(
        baseline=lambda now: m.BaselineResult(((2, 4.0),), ((2, 40.0),)),
        health=lambda now: m.HealthResult((), ((2, 0.0), (3, 1.0)), ((2, 0.0),)),
    )
    run, _, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.QUARANTINED, run.outcome
    assert "GPU 3: 1 new uncorrectable error(s) since the reset" in (run.outcome or "")


def test_an_unproven_reset_says_why_it_cannot_pass() -> None:
    world = World(health=_counts(1.0, ce=None), baseline=lambda now: m.BaselineResult(((3, 1.0),)))
    run, _, _ = drive(world, new_run(), NOW)
    assert run.outcome == (
        "verification failed: GPU 3: 1 uncorrectable error(s) still counted after the reset, "
        "which gave no sign it cleared them"
    )


def test_the_baseline_is_read_after_the_release_check_and_carried_into_the_reset() -> None:
    world = World(
        baseline=lambda now: m.BaselineResult(((3, 2.0),), ((3, 7.0),)),
        health=lambda now: m.HealthResult((), ((3, 2.0),), ((3, 7.0),)),
    )
    run, cmds, _ = drive(world, new_run(), NOW)
    assert run.state is m.RunState.DONE
    order = [type(c) for c in cmds if isinstance(c, m.CheckProcesses | m.CaptureBaseline)]
    assert order == [m.CheckProcesses, m.CaptureBaseline]
    at = next(i for i, c in enumerate(cmds) if isinstance(c, m.CaptureBaseline))
    reset_at = next(i for i, c in enumerate(cmds) if isinstance(c, m.ResetGpu))
    assert at < reset_at and "reset_intent" in kinds(cmds[at:reset_at])
    # the step that issues the reset returns the run (journaled before it) with the baseline
    held = replace(new_run()[0], state=m.RunState.RELEASE_CHECK)
    step_run, step_cmds = m.step(held, m.BaselineResult(((3, 2.0),)), NOW)
    assert step_run.state is m.RunState.RESETTING and step_run.ue_baseline == ((3, 2.0),)
    assert [type(c) for c in step_cmds] == [m.Record, m.ResetGpu]
    assert any("before the reset: GPU 3: 2" in line for line in step_run.evidence)


def test_without_a_baseline_the_first_poll_after_the_reset_stands_in() -> None:
    world = World(
        health=_counts(4.0, 4.0, 5.0), baseline=lambda now: m.BaselineResult(error="timeout")
    )
    run, _, _ = drive(world, new_run(verify_polls=3), NOW)
    assert run.state is m.RunState.QUARANTINED
    assert any("no pre-reset baseline: timeout" in line for line in run.evidence)
