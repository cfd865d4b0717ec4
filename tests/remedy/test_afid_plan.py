"""``plan: afid`` and one plan per fault incident: the AFID's class decides the plan (with the
operator's overrides and messages), a run waits for the fault's other reports and takes the
furthest plan any of them calls for, and verification reads the driver's word on the reset."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetd.clock import FakeClock
from fleetd.events.afid import AfidTable
from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.config import RemediationConfig
from fleetd.remedy.policy import (
    Decision,
    afid_plan,
    decide,
    incident_decision,
    merge_incident,
)
from fleetd.remedy.steps.reset import on_verifying

from .machine_world import NOW, new_run
from .rig import NODE, make_rig


def afid_alert(afid: str | None, action: str | None, gpu: int = 6) -> Alert:
    labels: dict[str, Any] = {"alertname": "GpuCperFatalError", "gpu": gpu}
    if afid is not None:
        labels["afid"] = afid
    if action is not None:
        labels["action"] = action
    return Alert(
        key=AlertKey("GpuCperFatalError", make_labels({"gpu": gpu})),
        state=AlertState.FIRING,
        severity=Severity.CRITICAL,
        labels=make_labels(labels),
        value=1.0,
        remediation_plan="afid",
    )


def cfg(**kw: object) -> RemediationConfig:
    return RemediationConfig.model_validate({"mode": "on", **kw})


REBOOT = {"reboot": {"command": ["systemctl", "reboot"]}}


def test_each_afid_class_takes_its_action() -> None:
    physical = decide(afid_alert("20", "physical"), config=cfg(), history=[], now=NOW)
    assert physical.plan is m.Plan.QUARANTINE
    assert "AFID 20" in physical.reason and "OAM" in physical.reason  # the shipped message
    reset = decide(afid_alert("22", "reset"), config=cfg(), history=[], now=NOW)
    assert reset.plan is m.Plan.RESET
    none = decide(afid_alert("24", "none"), config=cfg(), history=[], now=NOW)
    assert none.plan is None and "no action" in none.reason
    # reboot: the reboot rung when configured, else a person (quarantine)
    reboot = decide(afid_alert("25", "reboot"), config=cfg(**REBOOT), history=[], now=NOW)
    assert reboot.plan is m.Plan.REBOOT
    no_rung = decide(afid_alert("25", "reboot"), config=cfg(), history=[], now=NOW)
    assert no_rung.plan is m.Plan.QUARANTINE and "no reboot command" in no_rung.reason


def test_a_report_without_an_afid_takes_the_tables_default() -> None:
    kernel = afid_alert(None, None)
    assert decide(kernel, config=cfg(), history=[], now=NOW).plan is m.Plan.RESET
    action, why = afid_plan(kernel)
    assert action == "reset" and "no AFID (the AFID table's default)" in why
    broken = decide(afid_alert("20", None), config=cfg(), history=[], now=NOW)
    assert broken.plan is None and "no action label" in broken.reason


def test_the_operators_override_and_its_message_are_used(tmp_path: Path) -> None:
    override = tmp_path / "afids.yaml"
    override.write_text(
        "version: 1\n"
        "default: {action: physical, message: 'Unknown AFID: call the AMD FAE on duty.'}\n"
        "afids:\n"
        "  22: {name: On-die ECC, action: physical, message: 'Our HBM policy: swap the OAM.'}\n"
    )
    table = AfidTable.load(override)
    action, why = afid_plan(afid_alert("22", "physical"), table)
    assert action == "quarantine" and "Our HBM policy: swap the OAM." in why
    action, why = afid_plan(afid_alert(None, None), table)  # the default replaced too
    assert action == "quarantine" and "call the AMD FAE" in why
    # without the table in force, the shipped message (what was shown before the fix)
    _, shipped = afid_plan(afid_alert("22", "reset"))
    assert "Our HBM policy" not in shipped and "poison" in shipped


def test_one_incident_takes_its_furthest_plan() -> None:
    reset = Decision(m.Plan.RESET, "reset 1 of 3 for GPU 6")
    physical = incident_decision(
        "physical", "AFID 20 calls for physical.", config=cfg(), history=[], now=NOW
    )
    assert physical is not None and physical.plan is m.Plan.QUARANTINE
    assert merge_incident(reset, physical) is physical
    assert merge_incident(physical, incident_decision("reset", "x", config=cfg(),
                                                      history=[], now=NOW)) is physical  # fmt: skip
    assert incident_decision("reset", "x", config=cfg(), history=[], now=NOW) is None
    reboot = incident_decision("reboot", "AFID 25", config=cfg(**REBOOT), history=[], now=NOW)
    assert reboot is not None and merge_incident(reset, reboot).plan is m.Plan.REBOOT


def test_a_quarantine_for_another_reason_keeps_the_incidents_physical_call() -> None:
    """Tied plans keep both reasons: the RMA book opens a physical decision only from a run
    whose reason says the AFID calls for physical action."""
    probation = Decision(m.Plan.QUARANTINE, "GPU 6 faulted again within its probation")
    physical = incident_decision(
        "physical", "AFID 20 calls for physical.", config=cfg(), history=[], now=NOW
    )
    assert physical is not None
    merged = merge_incident(probation, physical)
    assert merged.plan is m.Plan.QUARANTINE
    assert merged.reason == f"GPU 6 faulted again within its probation; {physical.reason}"
    assert merge_incident(merged, physical) is merged  # said once
    assert merge_incident(physical, physical) is physical
    reboot = Decision(m.Plan.REBOOT, "budget spent")  # only a quarantine carries a reason
    rebooted = incident_decision("reboot", "AFID 25", config=cfg(**REBOOT), history=[], now=NOW)
    assert rebooted is not None and merge_incident(reboot, rebooted) is reboot


def test_a_planned_run_is_replanned_but_not_once_it_has_begun() -> None:
    run, _ = new_run(now=NOW)
    settled, first = m.plan_run(
        run_id="s", node=NODE, plan=m.Plan.RESET, trigger=run.trigger, gpus=run.gpus,
        workers=run.worker_names, settings=run.settings, now=NOW, settle=3.0,
    )  # fmt: skip
    assert not any(isinstance(c, m.AcquireLease) for c in first)  # waits for the settle
    assert settled.next_at == NOW + 3.0
    replan = m.Replan("quarantine", ((3, None, None),), ("w3",), (), "AFID 20: replace the OAM")
    changed, notes = m.step(settled, replan, NOW + 1)
    assert changed.plan is m.Plan.QUARANTINE and changed.gpu_indices == (3,)
    assert changed.worker_names == ("w3",) and changed.outcome == "AFID 20: replace the OAM"
    assert [n.kind for n in notes if isinstance(n, m.Record)] == ["replanned"]
    _, asked = m.step(changed, m.Tick(), NOW + 3)
    assert any(isinstance(c, m.AcquireLease) for c in asked)  # after the settle, as usual
    begun = replace(settled, state=m.RunState.QUIESCING, lease_held=True)
    kept, refused = m.step(begun, replan, NOW + 1)
    assert kept == begun and [n.kind for n in refused if isinstance(n, m.Record)] == [
        "replan_refused"
    ]


def test_verification_fails_at_once_when_the_driver_says_the_reset_failed() -> None:
    run, _ = new_run(now=NOW)
    run = replace(run, state=m.RunState.VERIFYING, rediscovered=True, reset_at=NOW, reset_count=1)
    failed = m.HealthResult(reset_failed=((2, "amdgpu 0000:46:00.0: GPU reset(1) failed"),))
    after, _ = on_verifying(run, failed, NOW + 5)
    assert after.state is m.RunState.QUARANTINED
    assert "the driver reports the reset failed" in (after.outcome or "")
    ok = m.HealthResult(reset_succeeded=((0, "KFD event gpu_post_reset"), (1, "x")))
    confirmed, _ = on_verifying(run, ok, NOW + 5)
    assert confirmed.reset_confirmed.startswith("GPUs 0-1")
    assert any("the driver confirms the reset" in e for e in confirmed.evidence)


@dataclass
class Incident:
    opened_at: float
    action: str
    why: str
    classified: str = ""


@dataclass
class Evidence:
    succeeded: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


@dataclass
class Events:
    """A stand-in for fleetd.events' service as remediation reads it."""

    incidents: dict[int, Incident] = field(default_factory=dict)
    settle: float = 3.0
    afids: AfidTable = field(default_factory=AfidTable.load)
    marks: dict[int, str] = field(default_factory=dict)

    def incident(self, gpu: int) -> Incident | None:
        return self.incidents.get(gpu)

    def reset_evidence(self, gpus: Any, since: float) -> Evidence:
        return Evidence(succeeded={g: self.marks[g] for g in gpus if g in self.marks})


def counters_transition(gpu: int, at: float) -> Transition:
    alert = Alert(
        key=AlertKey("GpuEccUncorrectableError", make_labels({"gpu": gpu})),
        state=AlertState.FIRING,
        severity=Severity.CRITICAL,
        labels=make_labels({"alertname": "GpuEccUncorrectableError", "gpu": gpu}),
        value=1.0,
        remediation_plan="reset",
    )
    return Transition(alert, AlertState.PENDING, AlertState.FIRING, at)


def test_a_cper_record_read_after_the_counters_turns_the_hive_reset_into_a_quarantine(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The counters came first (plan: reset of the hive); a second later the fault's CPER
    record says AFID 20 (replace the OAM): before anything is done the run becomes a
    quarantine of that GPU alone, and nothing is reset."""
    rig = make_rig(tmp_path, clock, own_systemctl=True)
    try:
        events = Events()
        rig.remediation.attach_events(events)
        now = clock.now()
        events.incidents[6] = Incident(now, "reset", "ECC counters: 1 new error")
        [run_id] = rig.remediation.handle([counters_transition(6, now)], now)
        planned = rig.run(run_id)
        assert planned.plan is m.Plan.RESET and len(planned.gpu_indices) == 8
        assert planned.next_at == now + 3.0  # waits for the fault's other reports
        clock.advance(1.0)
        events.incidents[6] = Incident(
            now, "physical", "CPER fatal record, AFID 20 calls for physical: replace the OAM.",
            classified="CPER fatal record, AFID 20 calls for physical",
        )  # fmt: skip
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.plan is m.Plan.QUARANTINE and run.gpu_indices == (6,)
        assert run.state is m.RunState.QUARANTINED and run.reset_count == 0
        assert rig.sim.reset_count() == 0
        assert "replanned" in rig.sink.kinds()
        assert "replace the OAM" in (run.outcome or "")
        others = [w for name, w in rig.fleet.workers.items() if name != "gpu6"]
        assert all(w.in_rotation for w in others)
    finally:
        rig.close()


def test_the_driver_confirms_the_reset_a_run_made(tmp_path: Path, clock: FakeClock) -> None:
    rig = make_rig(tmp_path, clock, own_systemctl=True)
    try:
        events = Events(marks={g: "amdgpu: GPU reset(1) succeeded!" for g in range(8)})
        rig.remediation.attach_events(events)
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.DONE and run.reset_count == 1
        assert run.reset_at is not None
        assert run.reset_confirmed.startswith("GPUs 0-7: amdgpu: GPU reset(1) succeeded!")
    finally:
        rig.close()


class Crash(BaseException):
    """The daemon dies here."""


def _die_after_the_reset(rig: Any) -> None:
    executor = rig.remediation.executor
    original = executor._carry_out

    def carry_out(run: m.Run, cmd: m.Command, now: float) -> m.Event | None:
        result = original(run, cmd, now)
        if isinstance(cmd, m.ResetGpu):
            raise Crash("killed inside the reset call")
        return result

    executor._carry_out = carry_out


def test_resumed_in_resetting_the_kernels_word_decides_whether_the_reset_happened(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Killed inside the reset call, the restarted daemon reads the kernel's reset lines (the
    journal keeps them; KFD's events died with the old process): "GPU reset(1) failed" on a
    GPU of the unit fails the run at once — no waiting out verify.timeout, no second reset."""
    rig = make_rig(tmp_path, clock, own_systemctl=True)
    try:
        rig.remediation.attach_events(Events())
        _die_after_the_reset(rig)
        [run_id] = rig.fault(3)
        with contextlib.suppress(Crash):
            rig.run_until_settled()
        assert rig.run(run_id).state is m.RunState.RESETTING and rig.sim.reset_count() == 1
        rig.restart_daemon()
        failed = Events()
        failed.reset_evidence = lambda gpus, since: Evidence(  # type: ignore[method-assign]
            failed={5: "amdgpu 0000:a6:00.0: amdgpu: GPU reset(1) failed"}
        )
        rig.remediation.attach_events(failed)
        started = clock.now()
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.QUARANTINED and rig.sim.reset_count() == 1
        assert "the driver reports the reset failed" in (run.outcome or "")
        assert clock.now() - started < run.settings.verify_timeout
    finally:
        rig.close()
