"""The ends of a run — done, quarantined, aborted (after a rollback when workers were being
taken out) — and a person's cancel, which leads to one of them."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import (
    Cancel,
    Command,
    Event,
    EvidenceResult,
    Record,
    ReleaseHolds,
    ReleaseLease,
    Reroute,
    RerouteResult,
)
from fleetd.remedy.run import Plan, Run, RunState, WorkerPhase
from fleetd.remedy.steps import evidence
from fleetd.remedy.steps.common import (
    Step,
    after,
    awaited,
    enter,
    gpu_list,
    name_list,
    plural,
    reissued,
    worker_outcome,
    workers_in,
)


def quarantine(run: Run, now: float, reason: str) -> Step:
    run = enter(run, RunState.QUARANTINED, now, holding=True, outcome=reason)
    out = run.out_of_rotation()
    capture: list[Command] = []
    if evidence.wanted(run):  # the state a human will look at, kept as it is now
        run, capture = evidence.start_capture(run, "quarantine", now)
    return run, [
        Record(
            "quarantined",
            f"GPUs {gpu_list(run)} quarantined: {reason}. Workers held out of service: "
            f"{name_list(out)}. A human must look (trigger: {run.trigger.describe()}).",
            severity="critical",
            raise_alert=True,
            evidence=run.evidence,
        ),
        *capture,
    ]


def abort(run: Run, now: float, reason: str, *, page: bool) -> Step:
    """Conclude without a reset. Workers still out of rotation are held and alerted on."""
    # an undrain that stops short leaves its GPUs to the earlier run that still holds them
    held = () if run.plan is Plan.UNDRAIN else run.out_of_rotation()
    if held:
        run = enter(run, RunState.ABORTED, now, holding=True, outcome=reason)
        return run, [
            Record(
                "aborted",
                f"run aborted: {reason}. Workers left out of service: {name_list(held)}; "
                "undrain them to restore",
                severity="critical" if page else "warning",
                raise_alert=True,
                evidence=run.evidence,
            )
        ]
    run = enter(run, RunState.ABORTED, now, outcome=reason)
    cmds: list[Command] = [
        Record(
            "aborted",
            f"run aborted: {reason}",
            severity="critical" if page else "warning",
            raise_alert=page,
            evidence=run.evidence,
        )
    ]
    if run.lease_held:
        run = replace(run, lease_held=False)
        cmds.append(ReleaseLease())
    return run, cmds


def finish(run: Run, now: float) -> Step:
    if run.abandoned:  # a proactive validation given up: back in service, not validated
        run = enter(
            run,
            RunState.ABORTED,
            now,
            outcome=f"proactive validation abandoned: {run.abandoned}",
            lease_held=False,
        )
        workers = name_list(run.worker_names)
        return run, [
            Record(
                "aborted",
                f"proactive validation of GPUs {gpu_list(run)} abandoned ({run.abandoned}); "
                f"workers back in rotation: {workers}",
                severity="warning",
                resolve_alert=True,
            ),
            ReleaseLease(),
        ]
    run = enter(run, RunState.DONE, now, outcome="completed", lease_held=False)
    polls = plural(run.settings.verify_polls, "healthy poll")
    if run.reboot_count:
        how = f"after the reboot and {polls}"
    elif run.reset_count:
        how = f"after the reset and {polls}"
    elif run.plan is Plan.UNDRAIN:
        how = f"on request ({run.trigger.describe()})"
    else:
        how = ""
    workers = f"; workers back in rotation: {name_list(run.worker_names)}" if run.workers else ""
    cmds: list[Command] = [
        Record(
            "done",
            f"GPUs {gpu_list(run)} back in service {how}".rstrip() + workers,
            resolve_alert=True,
        ),
        ReleaseLease(),
    ]
    if run.plan is Plan.UNDRAIN:
        cmds.append(ReleaseHolds())
    return run, cmds


def rollback(run: Run, now: float, reason: str, *, page: bool) -> Step:
    targets = workers_in(run, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED)
    if not targets:
        return abort(run, now, reason, page=page)
    run = enter(run, RunState.ROLLING_BACK, now, outcome=reason, page_on_abort=page)
    cmds: list[Command] = [
        Record("rolling_back", f"{reason}; putting workers back: {name_list(targets)}")
    ]
    cmds += [Reroute(name) for name in targets]
    return run, cmds


def cancel(run: Run, event: Cancel, now: float) -> Step:
    reason = f"cancelled by {event.who}: {event.why}"
    if run.state is RunState.ROLLING_BACK:
        return run, [Record("cancel_ignored", f"{reason} (already rolling back)")]
    if run.state in (RunState.UNROUTING, RunState.BALANCER_WAIT, RunState.QUIESCING):
        return rollback(run, now, reason, page=False)
    return abort(run, now, reason, page=False)


def on_rolling_back(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, RerouteResult) and awaited(
        run, event.worker, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED
    ):
        run, cmds = worker_outcome(
            run,
            event,
            done=(WorkerPhase.SERVING, "worker_rerouted", f"{event.worker} back in rotation"),
            failed=(WorkerPhase.FAILED, "worker_reroute_failed", f"{event.worker}: {event.error}"),
            evidence=f"putting {event.worker} back failed: {event.error}",
            idle_reads=0,
        )
        if not workers_in(run, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED):
            return after(cmds, abort(run, now, run.outcome or "aborted", page=run.page_on_abort))
        return run, cmds
    return reissued(run, event, Reroute, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED)


def on_terminal(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, EvidenceResult) and evidence.expected(run, event):
        return evidence.taken(run, event)
    return run, []
