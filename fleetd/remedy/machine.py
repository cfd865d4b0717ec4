"""The remediation run as a pure, time-injected state machine.

``step(run, event, now) -> (run, commands)`` never reads a clock, touches a GPU or a worker:
it says what should happen next, and the executor carries the commands out and feeds their
outcomes back as events. Because the executor journals the new run *before* any command it
allows, a daemon killed anywhere restarts from the journal, feeds ``Resumed`` and the
machine re-issues what its state still needs (every command is idempotent) — except the
reset: a run found in ``resetting`` after a restart is treated as reset and verified, never
reset a second time.

Plans and their paths::

    reset       planned → unrouting → balancer_wait → quiescing → stopping → release_check
                → resetting → verifying → [burn_in] → [validating] → starting → await_ready
                → done
    reboot      … → stopping → rebooting → verifying → … → done
    quarantine  … → stopping → quarantined          (kept drained; pages a human)
    drain       … → stopping → drained              (a human asked; kept drained)
    undrain     planned → starting → await_ready → done
    abort       unrouting/balancer_wait/quiescing → rolling_back → aborted

The run model is ``run``, the commands and events are ``messages``, the handlers live by
phase in ``steps``; this module keeps ``plan_run``, ``step`` and the table of handlers, and
re-exports the names callers use (``machine.Run``, ``machine.ReadLoad``, …).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from fleetd.remedy.codec import run_from_dict, run_to_dict
from fleetd.remedy.messages import (
    Abandon,
    AcquireLease,
    BaselineResult,
    BurnInResult,
    Cancel,
    CaptureBaseline,
    CaptureEvidence,
    CheckProcesses,
    CheckReady,
    Command,
    Event,
    EvidenceResult,
    HealthResult,
    LeaseResult,
    LoadResult,
    PollHealth,
    ProcessResult,
    ReadLoad,
    ReadyResult,
    RebootResult,
    Record,
    Rediscover,
    RediscoverResult,
    ReleaseHolds,
    ReleaseLease,
    Replan,
    RequestReboot,
    Reroute,
    RerouteResult,
    ResetGpu,
    ResetResult,
    Resumed,
    RunBurnIn,
    RunValidator,
    Severity,
    StartResult,
    StartUnit,
    StopResult,
    StopUnit,
    Tick,
    Unroute,
    UnrouteResult,
    ValidatorResult,
    WorkerCommand,
    WorkerResult,
)
from fleetd.remedy.run import (
    MANUAL_PLANS,
    TERMINAL,
    Bundle,
    Plan,
    Run,
    RunSettings,
    RunState,
    Trigger,
    UnitGpu,
    ValidatorOutcome,
    WorkerPhase,
    WorkerProgress,
    due,
)
from fleetd.remedy.steps.common import Handler, Step, gpu_list, gpu_ranges, name_list


def plan_run(
    *,
    run_id: str,
    node: str,
    plan: Plan,
    trigger: Trigger,
    gpus: tuple[UnitGpu, ...],
    workers: tuple[str, ...],
    settings: RunSettings,
    now: float,
    dry_run: bool = False,
    held_gpus: tuple[int, ...] = (),
    settle: float = 0.0,
    outcome: str | None = None,
) -> Step:
    """A new run in ``planned``; its first command asks for the node slot and the lease —
    at once, or after ``settle`` seconds, while other reports of the fault may replan it
    (``Replan``). ``outcome`` is the reason a quarantine plan will give."""
    if not gpus:
        raise ValueError("a run needs at least one GPU")
    start_phase = WorkerPhase.STOPPED if plan is Plan.UNDRAIN else WorkerPhase.SERVING
    run = Run(
        run_id=run_id,
        node=node,
        plan=plan,
        trigger=trigger,
        gpus=gpus,
        workers=tuple(WorkerProgress(name, start_phase) for name in workers),
        settings=settings,
        created_at=now,
        dry_run=dry_run,
        entered_at=now,
        deadline=now + settings.lease_timeout,
        next_at=now + max(0.0, settle),  # due then: that tick asks for the lease
        held_gpus=tuple(sorted(set(held_gpus) & {g.index for g in gpus})),
        outcome=outcome,
    )
    held = f"; GPUs {gpu_ranges(run.held_gpus)} stay held out of service" if run.held_gpus else ""
    record = Record(
        "run_planned",
        f"{plan.value} of GPUs {gpu_list(run)} planned for {trigger.describe()}; "
        f"workers to drain: {name_list(workers)}{held}",
    )
    if settle > 0:
        return run, [record]
    return run, [record, AcquireLease()]


# ------------------------------------------------------------------------------------ the step
def step(run: Run, event: Event, now: float) -> Step:
    """Advance ``run`` by one event at time ``now``; return the new run and what to do next."""
    from fleetd.remedy.steps import terminal, validate

    if run.terminal:  # only the outcome of the capture a quarantine asked for
        return terminal.on_terminal(run, event, now)
    if isinstance(event, Cancel):
        return terminal.cancel(run, event, now)
    if isinstance(event, Abandon):
        return validate.abandon(run, event, now)
    if isinstance(event, Replan):
        return _replan(run, event)
    if isinstance(event, Resumed):
        run = replace(run, resumed=run.resumed + 1)
    handler = _handlers()[run.state]
    return handler(run, event, now)


def _replan(run: Run, event: Replan) -> Step:
    plan = Plan(event.plan)
    if run.state is not RunState.PLANNED or run.lease_held or plan in MANUAL_PLANS:
        why = f"{plan.value} not taken: the run is already {run.state.value} ({event.why})"
        return run, [Record("replan_refused", why, severity="warning")]
    old = f"{run.plan.value} of GPUs {gpu_list(run)}"
    gpus = tuple(UnitGpu(i, uuid, bdf) for i, uuid, bdf in event.gpus)
    run = replace(
        run,
        plan=plan,
        gpus=gpus,
        workers=tuple(WorkerProgress(name, WorkerPhase.SERVING) for name in event.workers),
        held_gpus=tuple(sorted(set(event.held_gpus) & {g.index for g in gpus})),
        outcome=event.why if plan is Plan.QUARANTINE else run.outcome,
    )
    return run, [
        Record(
            "replanned",
            f"{old} replaced by {plan.value} of GPUs {gpu_list(run)}: {event.why}; "
            f"workers to drain: {name_list(event.workers)}",
            severity="warning",
        )
    ]


@cache
def _handlers() -> dict[RunState, Handler]:
    """The handler of each state. The step modules are imported at a node's first run, not
    at start: a healthy node never steps a run (docs/performance.md, footprint)."""
    from fleetd.remedy.steps import drain, readmit, reset, terminal, validate

    return {
        RunState.PLANNED: drain.on_planned,
        RunState.UNROUTING: drain.on_unrouting,
        RunState.BALANCER_WAIT: drain.on_balancer_wait,
        RunState.QUIESCING: drain.on_quiescing,
        RunState.STOPPING: drain.on_stopping,
        RunState.RELEASE_CHECK: drain.on_release_check,
        RunState.RESETTING: reset.on_resetting,
        RunState.REBOOTING: reset.on_rebooting,
        RunState.VERIFYING: reset.on_verifying,
        RunState.BURN_IN: reset.on_burn_in,
        RunState.VALIDATING: validate.on_validating,
        RunState.STARTING: readmit.on_starting,
        RunState.AWAIT_READY: readmit.on_await_ready,
        RunState.ROLLING_BACK: terminal.on_rolling_back,
        RunState.DONE: terminal.on_terminal,
        RunState.QUARANTINED: terminal.on_terminal,
        RunState.ABORTED: terminal.on_terminal,
        RunState.DRAINED: terminal.on_terminal,
    }


# ------------------------------------------------------------------------------------ storage
__all__ = [
    "MANUAL_PLANS",
    "TERMINAL",
    "Abandon",
    "AcquireLease",
    "BaselineResult",
    "Bundle",
    "BurnInResult",
    "Cancel",
    "CaptureBaseline",
    "CaptureEvidence",
    "CheckProcesses",
    "CheckReady",
    "Command",
    "Event",
    "EvidenceResult",
    "HealthResult",
    "LeaseResult",
    "LoadResult",
    "Plan",
    "PollHealth",
    "ProcessResult",
    "ReadLoad",
    "ReadyResult",
    "RebootResult",
    "Record",
    "Rediscover",
    "RediscoverResult",
    "ReleaseHolds",
    "ReleaseLease",
    "Replan",
    "RequestReboot",
    "Reroute",
    "RerouteResult",
    "ResetGpu",
    "ResetResult",
    "Resumed",
    "Run",
    "RunBurnIn",
    "RunSettings",
    "RunState",
    "RunValidator",
    "Severity",
    "StartResult",
    "StartUnit",
    "Step",
    "StopResult",
    "StopUnit",
    "Tick",
    "Trigger",
    "UnitGpu",
    "Unroute",
    "UnrouteResult",
    "ValidatorOutcome",
    "ValidatorResult",
    "WorkerCommand",
    "WorkerPhase",
    "WorkerProgress",
    "WorkerResult",
    "due",
    "gpu_ranges",
    "plan_run",
    "run_from_dict",
    "run_to_dict",
    "step",
]
