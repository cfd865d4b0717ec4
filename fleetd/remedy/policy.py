"""Which alert leads to which plan, and the escalation ladder per GPU.

Pure: given the alert, the configuration and this node's recent runs, ``decide`` says what
to do. The ladder is reset → reboot (only when a reboot command is configured and its own
budget allows) → quarantine. A GPU climbs a rung when its reset budget is spent (default 3
resets in 24 h), or at once when it faults again during its probation after a re-admission.
Dry-run runs never count: nothing was done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache

from fleetd.events.afid import AfidTable
from fleetd.model import Alert, AlertState, Transition, label_value
from fleetd.remedy.config import Action, RemediationConfig
from fleetd.remedy.run import Plan, Run, RunSettings, RunState, Trigger


@dataclass(frozen=True, slots=True)
class Decision:
    """``plan`` None means: do not open a run (``reason`` says why)."""

    plan: Plan | None
    reason: str
    escalated: bool = False


def trigger_of(transition: Transition) -> Trigger:
    alert = transition.alert
    return Trigger(
        kind="alert",
        at=transition.at,
        rule=alert.key.rule,
        fingerprint=alert.key.fingerprint(),
        gpu=alert_gpu(alert),
        severity=alert.severity.value,
        value=alert.value,
        labels=alert.labels,
    )


def alert_gpu(alert: Alert) -> int | None:
    value = label_value(alert.labels, "gpu") or label_value(alert.key.labels, "gpu")
    if value is None or not value.isdigit():
        return None
    return int(value)


def wants_remediation(transition: Transition) -> bool:
    """Only an alert that starts firing with a remediation plan opens a run."""
    return (
        transition.current is AlertState.FIRING
        and transition.previous is not AlertState.FIRING
        and transition.alert.remediation_plan is not None
    )


def _counted(run: Run) -> bool:
    return not run.dry_run


def resets_of(gpu: int, history: Sequence[Run], since: float) -> int:
    """Resets this node made because GPU ``gpu`` faulted, since ``since``."""
    return sum(
        1
        for r in history
        if _counted(r) and r.reset_count > 0 and r.trigger.gpu == gpu and r.created_at >= since
    )


def reboots_since(history: Sequence[Run], since: float) -> int:
    return sum(1 for r in history if _counted(r) and r.reboot_count > 0 and r.created_at >= since)


def in_probation(gpu: int, history: Sequence[Run], now: float, probation: float) -> Run | None:
    """The run that re-admitted ``gpu`` less than ``probation`` ago, if any."""
    for r in history:
        if (
            _counted(r)
            and r.state is RunState.DONE
            and r.plan in (Plan.RESET, Plan.REBOOT)
            and gpu in r.gpu_indices
            and now - r.entered_at < probation
        ):
            return r
    return None


def decide(
    alert: Alert,
    *,
    config: RemediationConfig,
    history: Sequence[Run],
    now: float,
    afids: AfidTable | None = None,
) -> Decision:
    """What to do about ``alert`` (which has just started firing). ``afids`` is the AFID
    table in force (the shipped one with the operator's overrides), for ``plan: afid``."""
    if config.mode == "off":
        return Decision(None, "remediation is off")
    name = alert.remediation_plan
    if name is None:
        return Decision(None, "the rule allows no remediation")
    action = config.plans.get(name)
    if action is None:
        return Decision(None, f"plan {name!r} is not configured under remediation.plans")
    if action == "none":
        return Decision(None, f"plan {name!r} is disabled")
    why = "the rule asks for"
    if action == "afid":
        afid_action, why = afid_plan(alert, afids)
        if afid_action is None:
            return Decision(None, why)
        action = afid_action
    gpu = alert_gpu(alert)
    if action == "reboot":
        return _reboot_or_quarantine(config, history, now, f"{why} a reboot")
    if gpu is None:
        return Decision(None, f"plan {name!r} needs a gpu label on the alert")
    if action == "quarantine":
        return Decision(Plan.QUARANTINE, f"{why} quarantine")
    previous = in_probation(gpu, history, now, config.probation)
    if previous is not None:
        return _escalate(
            config,
            history,
            now,
            f"GPU {gpu} faulted again within its probation after run {previous.run_id}",
        )
    used = resets_of(gpu, history, now - config.budget.window)
    if used >= config.budget.max_resets:
        return _escalate(
            config,
            history,
            now,
            f"GPU {gpu} reset budget spent ({used} resets in {config.budget.window:g}s)",
        )
    return Decision(Plan.RESET, f"reset {used + 1} of {config.budget.max_resets} for GPU {gpu}")


AFID_ACTIONS: dict[str, Action | None] = {
    "physical": "quarantine",
    "reboot": "reboot",
    "reset": "reset",
    "none": None,
}
"""The AFID table's actions (fleetd/data/afid_actions.yaml) as remediation actions: a
physical fault (re-seat, RMA) is never reset: the GPU is quarantined for a person."""


def afid_plan(alert: Alert, table: AfidTable | None = None) -> tuple[Action | None, str]:
    """The remediation action for an alert on a fault report (its ``afid`` and ``action``
    labels, set by fleetd.events from the AFID table), and the reason to record. A report
    without an AFID (the kernel's RAS line) takes the table's default action."""
    table = table if table is not None else _shipped_table()
    afid = label_value(alert.labels, "afid") or ""
    kind = label_value(alert.labels, "action") or ""
    if not afid and not kind and table is not None:
        kind = table.default.action
        message = table.default.message
        name = "no AFID (the AFID table's default)"
    else:
        message = afid_message(afid, table)
        name = f"AFID {afid or '?'}"
    if kind not in AFID_ACTIONS:
        return None, f"{name}: no action label on the alert (plan afid needs one)"
    tail = f" ({message})" if message else ""
    mapped = AFID_ACTIONS[kind]
    if mapped is None:
        return None, f"{name} calls for no action{tail}"
    return mapped, f"{name} calls for {kind}{tail}: the AFID table asks for"


def shipped_afid_table() -> AfidTable | None:
    """fleetd's own AFID table (None when it cannot be read)."""
    return _shipped_table()


@cache
def _shipped_table() -> AfidTable | None:
    try:
        return AfidTable.load()
    except Exception:
        return None


def afid_message(afid: str, table: AfidTable | None = None) -> str:
    """The operator-facing message of ``afid`` in ``table`` (the one in force: shipped plus
    the operator's overrides; the shipped one when not given); '' when unknown."""
    table = table if table is not None else _shipped_table()
    if table is None or not afid.isdigit():
        return ""
    entry = table.entries.get(int(afid))
    return entry.message if entry is not None else ""


PLAN_RANK: dict[Plan, int] = {Plan.RESET: 1, Plan.REBOOT: 2, Plan.QUARANTINE: 3}
"""How far a plan goes: one incident takes the furthest plan any of its reports calls for."""


def incident_decision(
    action: str,
    why: str,
    *,
    config: RemediationConfig,
    history: Sequence[Run],
    now: float,
) -> Decision | None:
    """The decision an incident's merged action calls for (None: nothing beyond a reset,
    which the trigger's own plan already covers). ``why`` says which report asked."""
    mapped = AFID_ACTIONS.get(action)
    why = why.rstrip(". ")
    if mapped == "quarantine":
        return Decision(Plan.QUARANTINE, f"{why}; the fault's incident is quarantined")
    if mapped == "reboot":
        return _reboot_or_quarantine(config, history, now, f"{why}; the incident asks for a reboot")
    return None


def merge_incident(decision: Decision, incident: Decision | None) -> Decision:
    """One incident, one plan: the further of the trigger's plan and the incident's. On a
    tie both reasons stay: a quarantine for a fault during probation whose CPER record also
    calls for physical action keeps that call, which opens the GPU's RMA decision."""
    if incident is None or incident.plan is None or decision.plan is None:
        return decision
    if PLAN_RANK.get(incident.plan, 0) > PLAN_RANK.get(decision.plan, 0):
        return incident
    joined = joined_reason(decision.plan, decision.reason, incident)
    return decision if joined is None else replace(decision, reason=joined)


def joined_reason(plan: Plan, reason: str, incident: Decision) -> str | None:
    """``reason`` and the incident's own, when the incident asks for the same quarantine for
    a reason not yet given (None: nothing to add)."""
    if plan is not Plan.QUARANTINE or incident.plan is not plan or incident.reason in reason:
        return None
    return f"{reason}; {incident.reason}" if reason else incident.reason


def _escalate(config: RemediationConfig, history: Sequence[Run], now: float, why: str) -> Decision:
    decision = _reboot_or_quarantine(config, history, now, why)
    return Decision(decision.plan, decision.reason, escalated=True)


def _reboot_or_quarantine(
    config: RemediationConfig, history: Sequence[Run], now: float, why: str
) -> Decision:
    reboot = config.reboot
    if reboot is None:
        return Decision(Plan.QUARANTINE, f"{why}; no reboot command configured: quarantine")
    used = reboots_since(history, now - reboot.window)
    if used >= reboot.max_per_window:
        return Decision(
            Plan.QUARANTINE, f"{why}; reboot budget spent ({used} in {reboot.window:g}s)"
        )
    return Decision(Plan.REBOOT, f"{why}: reboot")


def reboot_available(config: RemediationConfig, history: Sequence[Run], now: float) -> bool:
    """Whether a reset run may escalate in place to a reboot when its verification fails."""
    reboot = config.reboot
    return reboot is not None and reboots_since(history, now - reboot.window) < (
        reboot.max_per_window
    )


def settings_for(
    config: RemediationConfig, *, dry_run: bool, escalate_to_reboot: bool
) -> RunSettings:
    """The waits a new run is planned with; a dry run waits for nothing (it acts on nothing)."""
    d, v, r = config.drain, config.verify, config.readmit
    settings = RunSettings(
        balancer_delay=d.balancer_delay,
        drain_poll_interval=d.poll_interval,
        idle_reads=d.idle_reads,
        drain_timeout=d.timeout,
        on_drain_timeout=d.on_timeout,
        release_timeout=d.release_timeout,
        release_poll_interval=d.release_poll_interval,
        verify_polls=v.healthy_polls,
        verify_poll_interval=v.poll_interval,
        verify_timeout=v.timeout,
        burn_in=v.burn_in is not None,
        ready_timeout=r.timeout,
        ready_poll_interval=r.poll_interval,
        lease_timeout=config.fleet.lease_timeout,
        lease_retry_interval=config.fleet.lease_retry_interval,
        reboot_timeout=config.reboot.timeout if config.reboot is not None else 0.0,
        escalate_to_reboot=escalate_to_reboot,
        capture_evidence=config.evidence.enabled,
    )
    if dry_run:
        settings = replace(
            settings,
            idle_reads=1,
            verify_polls=1,
            balancer_delay=0.0,
            drain_poll_interval=0.0,
            release_poll_interval=0.0,
            verify_poll_interval=0.0,
            ready_poll_interval=0.0,
        )
    return settings
