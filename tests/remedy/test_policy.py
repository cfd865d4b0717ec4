"""Which alert leads to which plan; the ladder; budgets and probation."""

from __future__ import annotations

from dataclasses import replace

from fleetd.model import Alert, AlertKey, AlertState, Severity, Transition, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.config import RemediationConfig
from fleetd.remedy.policy import decide, settings_for, trigger_of, wants_remediation

from .machine_world import NOW, new_run

HOUR = 3600.0


def alert(plan: str | None = "reset", gpu: int | None = 3) -> Alert:
    labels = {"alertname": "X", "severity": "critical"} | ({"gpu": gpu} if gpu is not None else {})
    return Alert(
        key=AlertKey("X", make_labels({"gpu": gpu} if gpu is not None else {})),
        state=AlertState.FIRING,
        severity=Severity.CRITICAL,
        labels=make_labels(labels),
        value=2.0,
        remediation_plan=plan,
    )


def cfg(**kw: object) -> RemediationConfig:
    return RemediationConfig.model_validate({"mode": "on", **kw})


def past_reset(at: float, *, gpu: int = 3, done: bool = True, dry: bool = False) -> m.Run:
    run, _ = new_run(now=at)
    return replace(
        run,
        trigger=replace(run.trigger, gpu=gpu),
        reset_count=1,
        state=m.RunState.DONE if done else m.RunState.QUARANTINED,
        entered_at=at + 300,
        dry_run=dry,
        run_id=f"r{at}",
    )


def test_only_alerts_that_start_firing_with_a_plan_count() -> None:
    a = alert()
    assert wants_remediation(Transition(a, AlertState.PENDING, AlertState.FIRING, NOW))
    assert not wants_remediation(Transition(a, AlertState.FIRING, AlertState.FIRING, NOW))
    assert not wants_remediation(Transition(a, AlertState.FIRING, AlertState.RESOLVED, NOW))
    assert not wants_remediation(
        Transition(alert(plan=None), AlertState.PENDING, AlertState.FIRING, NOW)
    )
    trig = trigger_of(Transition(a, AlertState.PENDING, AlertState.FIRING, NOW))
    assert (trig.rule, trig.gpu, trig.value, trig.fingerprint) == ("X", 3, 2.0, a.key.fingerprint())


def test_plan_mapping() -> None:
    assert decide(alert(), config=cfg(), history=[], now=NOW).plan is m.Plan.RESET
    assert decide(alert("quarantine"), config=cfg(), history=[], now=NOW).plan is m.Plan.QUARANTINE
    d = decide(alert("reboot"), config=cfg(), history=[], now=NOW)
    assert d.plan is m.Plan.QUARANTINE and "no reboot command" in d.reason
    d = decide(alert("mystery"), config=cfg(), history=[], now=NOW)
    assert d.plan is None and "not configured" in d.reason
    d = decide(alert(), config=cfg(plans={"reset": "none"}), history=[], now=NOW)
    assert d.plan is None and "disabled" in d.reason
    d = decide(alert(gpu=None), config=cfg(), history=[], now=NOW)
    assert d.plan is None and "gpu label" in d.reason
    assert decide(alert(), config=cfg(mode="off"), history=[], now=NOW).plan is None


def test_budget_counts_resets_of_this_gpu_in_the_window() -> None:
    history = [past_reset(NOW - h * HOUR) for h in (20, 10, 5)]
    d = decide(alert(), config=cfg(), history=history, now=NOW)
    assert d.plan is m.Plan.QUARANTINE and d.escalated and "budget spent (3 resets" in d.reason
    older = [past_reset(NOW - h * HOUR) for h in (30, 10, 5)]  # one left the 24 h window
    assert decide(alert(), config=cfg(), history=older, now=NOW).plan is m.Plan.RESET
    other_gpu = [past_reset(NOW - h * HOUR, gpu=1) for h in (20, 10, 5)]
    assert decide(alert(), config=cfg(), history=other_gpu, now=NOW).plan is m.Plan.RESET
    dry = [past_reset(NOW - h * HOUR, dry=True) for h in (20, 10, 5)]
    assert decide(alert(), config=cfg(), history=dry, now=NOW).plan is m.Plan.RESET


def test_probation_escalates_at_once() -> None:
    recent = [past_reset(NOW - 1 * HOUR)]  # re-admitted 55 minutes ago; probation 2 h
    d = decide(alert(), config=cfg(), history=recent, now=NOW)
    assert d.plan is m.Plan.QUARANTINE and "within its probation" in d.reason
    assert (
        decide(alert(), config=cfg(probation="30m"), history=recent, now=NOW).plan is m.Plan.RESET
    )


def test_reboot_rung_when_configured_and_within_its_budget() -> None:
    reboot = {"command": ["/usr/local/bin/request-reboot", "{node}"]}
    history = [past_reset(NOW - h * HOUR) for h in (20, 10, 5)]
    d = decide(alert(), config=cfg(reboot=reboot), history=history, now=NOW)
    assert d.plan is m.Plan.REBOOT and d.escalated
    rebooted = replace(past_reset(NOW - 2 * HOUR, gpu=6), reboot_count=1, reset_count=0)
    d = decide(alert(), config=cfg(reboot=reboot), history=[*history, rebooted], now=NOW)
    assert d.plan is m.Plan.QUARANTINE and "reboot budget spent" in d.reason


def test_dry_run_settings_wait_for_nothing() -> None:
    s = settings_for(cfg(), dry_run=True, escalate_to_reboot=False)
    assert s.balancer_delay == s.verify_poll_interval == s.drain_poll_interval == 0
    assert s.idle_reads == 1 and s.verify_polls == 1
    real = settings_for(cfg(), dry_run=False, escalate_to_reboot=True)
    assert real.balancer_delay == 15 and real.idle_reads == 2 and real.escalate_to_reboot
