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
                → resetting → verifying → [burn_in] → starting → await_ready → done
    reboot      … → stopping → rebooting → verifying → … → done
    quarantine  … → stopping → quarantined          (kept drained; pages a human)
    drain       … → stopping → drained              (a human asked; kept drained)
    undrain     planned → starting → await_ready → done
    abort       unrouting/balancer_wait/quiescing → rolling_back → aborted
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

Severity = Literal["info", "warning", "critical"]


class Plan(StrEnum):
    RESET = "reset"
    QUARANTINE = "quarantine"
    REBOOT = "reboot"
    DRAIN = "drain"
    UNDRAIN = "undrain"


MANUAL_PLANS = frozenset({Plan.DRAIN, Plan.UNDRAIN})


class RunState(StrEnum):
    PLANNED = "planned"
    UNROUTING = "unrouting"
    BALANCER_WAIT = "balancer_wait"
    QUIESCING = "quiescing"
    STOPPING = "stopping"
    RELEASE_CHECK = "release_check"
    RESETTING = "resetting"
    REBOOTING = "rebooting"
    VERIFYING = "verifying"
    BURN_IN = "burn_in"
    STARTING = "starting"
    AWAIT_READY = "await_ready"
    ROLLING_BACK = "rolling_back"
    DONE = "done"
    QUARANTINED = "quarantined"
    ABORTED = "aborted"
    DRAINED = "drained"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def phase(self) -> str:
        """The coarse phase people read: planned, draining, resetting, verifying, …"""
        return _PHASES.get(self, self.value)


TERMINAL = frozenset({RunState.DONE, RunState.QUARANTINED, RunState.ABORTED, RunState.DRAINED})
_PHASES = {
    RunState.UNROUTING: "draining",
    RunState.BALANCER_WAIT: "draining",
    RunState.QUIESCING: "draining",
    RunState.STOPPING: "draining",
    RunState.RELEASE_CHECK: "draining",
    RunState.BURN_IN: "verifying",
    RunState.STARTING: "readmitting",
    RunState.AWAIT_READY: "readmitting",
    RunState.ROLLING_BACK: "aborting",
}


class WorkerPhase(StrEnum):
    SERVING = "serving"  # in rotation, untouched by this run
    UNROUTING = "unrouting"  # out-of-rotation hook issued
    UNROUTED = "unrouted"  # out of rotation, still running
    STOPPING = "stopping"
    STOPPED = "stopped"
    STOP_FAILED = "stop_failed"
    STARTING = "starting"
    STARTED = "started"  # unit started; waiting for /health and the model
    READY = "ready"  # healthy; back-into-rotation issued
    REROUTED = "rerouted"  # back in rotation
    FAILED = "failed"  # did not come back


_OUT_OF_ROTATION = frozenset(
    {
        WorkerPhase.UNROUTING,
        WorkerPhase.UNROUTED,
        WorkerPhase.STOPPING,
        WorkerPhase.STOPPED,
        WorkerPhase.STOP_FAILED,
        WorkerPhase.STARTING,
        WorkerPhase.STARTED,
        WorkerPhase.READY,
        WorkerPhase.FAILED,
    }
)


# ------------------------------------------------------------------------------------ the run
@dataclass(frozen=True, slots=True)
class Trigger:
    """What started the run: an alert (rule, labels, value) or a person (who, why)."""

    kind: Literal["alert", "manual"]
    at: float
    rule: str | None = None
    fingerprint: str | None = None
    gpu: int | None = None
    severity: str | None = None
    value: float | None = None
    labels: tuple[tuple[str, str], ...] = ()
    who: str | None = None
    why: str | None = None

    def describe(self) -> str:
        if self.kind == "manual":
            return f"requested by {self.who or 'unknown'}: {self.why or 'no reason given'}"
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        value = f" (value {self.value:g})" if self.value is not None else ""
        return f"alert {self.rule}{where}{value}"


@dataclass(frozen=True, slots=True)
class UnitGpu:
    """One GPU the run touches; ``uuid`` lets verification recognise it after re-enumeration."""

    index: int
    uuid: str | None = None
    bdf: str | None = None

    @property
    def key(self) -> str:
        return self.uuid or f"index:{self.index}"


@dataclass(frozen=True, slots=True)
class WorkerProgress:
    name: str
    phase: WorkerPhase = WorkerPhase.SERVING
    idle_reads: int = 0
    in_flight: float | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The waits and limits a run was planned with (frozen in the journal: a reload mid-run
    does not change a run already under way)."""

    balancer_delay: float = 15.0
    drain_poll_interval: float = 1.0
    idle_reads: int = 2
    drain_timeout: float = 300.0
    on_drain_timeout: Literal["proceed", "abort"] = "proceed"
    release_timeout: float = 60.0
    release_poll_interval: float = 2.0
    verify_polls: int = 3
    verify_poll_interval: float = 5.0
    verify_timeout: float = 300.0
    burn_in: bool = False
    ready_timeout: float = 900.0
    ready_poll_interval: float = 5.0
    lease_timeout: float = 1800.0
    lease_retry_interval: float = 10.0
    reboot_timeout: float = 1800.0
    escalate_to_reboot: bool = False


@dataclass(frozen=True, slots=True)
class Run:
    run_id: str
    node: str
    plan: Plan
    trigger: Trigger
    gpus: tuple[UnitGpu, ...]
    workers: tuple[WorkerProgress, ...]
    settings: RunSettings
    created_at: float
    state: RunState = RunState.PLANNED
    dry_run: bool = False
    entered_at: float = 0.0
    deadline: float | None = None
    next_at: float | None = None
    lease_held: bool = False
    holding: bool = False  # GPUs kept out of service after the run ended
    resumed: int = 0
    reset_count: int = 0
    reboot_count: int = 0
    rediscovered: bool = False
    healthy_polls: int = 0
    ue_baseline: tuple[tuple[int, float], ...] = ()
    last_problems: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    outcome: str | None = None
    lease_note: str | None = None
    page_on_abort: bool = False
    held_gpus: tuple[int, ...] = ()  # in the unit but held out by an earlier run: not verified

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)

    @property
    def verify_gpus(self) -> tuple[int, ...]:
        """The unit's GPUs that must pass verification (held ones stay out anyway)."""
        return tuple(i for i in self.gpu_indices if i not in self.held_gpus)

    @property
    def worker_names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.workers)

    @property
    def reset_target(self) -> int:
        """The GPU the single reset call is issued on (the faulty one when it is in the unit)."""
        if self.trigger.gpu is not None and self.trigger.gpu in self.gpu_indices:
            return self.trigger.gpu
        return self.gpus[0].index

    def worker(self, name: str) -> WorkerProgress | None:
        for w in self.workers:
            if w.name == name:
                return w
        return None

    def out_of_rotation(self) -> tuple[str, ...]:
        """Workers this run has taken out of rotation and not yet put back."""
        return tuple(w.name for w in self.workers if w.phase in _OUT_OF_ROTATION)


def due(run: Run, now: float) -> bool:
    """Whether a Tick at ``now`` can make progress (a wait ended or a deadline passed)."""
    if run.terminal:
        return False
    if run.next_at is not None and now >= run.next_at:
        return True
    return run.deadline is not None and now >= run.deadline


# ------------------------------------------------------------------------------------ commands
@dataclass(frozen=True, slots=True)
class Record:
    """A journal entry and change event; ``raise_alert``/``resolve_alert`` ask the dispatcher
    to open or close the alert that says workers of this unit are held out of service."""

    kind: str
    message: str
    severity: Severity = "info"
    evidence: tuple[str, ...] = ()
    raise_alert: bool = False
    resolve_alert: bool = False


@dataclass(frozen=True, slots=True)
class AcquireLease:
    pass


@dataclass(frozen=True, slots=True)
class ReleaseLease:
    pass


@dataclass(frozen=True, slots=True)
class ReleaseHolds:
    """Undrain finished: earlier runs holding these GPUs let go (leases and alerts)."""


@dataclass(frozen=True, slots=True)
class Unroute:
    worker: str


@dataclass(frozen=True, slots=True)
class ReadLoad:
    worker: str


@dataclass(frozen=True, slots=True)
class StopUnit:
    worker: str


@dataclass(frozen=True, slots=True)
class CheckProcesses:
    pass


@dataclass(frozen=True, slots=True)
class ResetGpu:
    index: int


@dataclass(frozen=True, slots=True)
class RequestReboot:
    pass


@dataclass(frozen=True, slots=True)
class Rediscover:
    pass


@dataclass(frozen=True, slots=True)
class PollHealth:
    pass


@dataclass(frozen=True, slots=True)
class RunBurnIn:
    pass


@dataclass(frozen=True, slots=True)
class StartUnit:
    worker: str


@dataclass(frozen=True, slots=True)
class CheckReady:
    worker: str


@dataclass(frozen=True, slots=True)
class Reroute:
    worker: str


Command = (
    Record
    | AcquireLease
    | ReleaseLease
    | ReleaseHolds
    | Unroute
    | ReadLoad
    | StopUnit
    | CheckProcesses
    | ResetGpu
    | RequestReboot
    | Rediscover
    | PollHealth
    | RunBurnIn
    | StartUnit
    | CheckReady
    | Reroute
)


# ------------------------------------------------------------------------------------ events
@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; the executor sends it when ``due(run, now)``."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """The daemon restarted and found this run unfinished in the journal."""


@dataclass(frozen=True, slots=True)
class Cancel:
    who: str
    why: str


@dataclass(frozen=True, slots=True)
class LeaseResult:
    granted: bool
    reason: str = ""
    final: bool = False  # denied for good (e.g. automatic remediation was switched off)


@dataclass(frozen=True, slots=True)
class UnrouteResult:
    worker: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A worker's in-flight requests; or ``error``: no reading. ``gone`` says the error was
    the worker's own absence (connection refused): a dead engine serves nothing, so only
    then does a failed read count as idle."""

    worker: str
    running: float | None = None
    waiting: float | None = None
    error: str | None = None
    gone: bool = False


@dataclass(frozen=True, slots=True)
class StopResult:
    worker: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessResult:
    holders: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ResetResult:
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RebootResult:
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RediscoverResult:
    present: tuple[str, ...] = ()  # UnitGpu.key of every GPU that enumerated
    error: str | None = None


@dataclass(frozen=True, slots=True)
class HealthResult:
    problems: tuple[str, ...] = ()
    ue_counts: tuple[tuple[int, float], ...] = ()  # uncorrectable-error counter per GPU index


@dataclass(frozen=True, slots=True)
class BurnInResult:
    error: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StartResult:
    worker: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReadyResult:
    worker: str
    ready: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RerouteResult:
    worker: str
    error: str | None = None


Event = (
    Tick
    | Resumed
    | Cancel
    | LeaseResult
    | UnrouteResult
    | LoadResult
    | StopResult
    | ProcessResult
    | ResetResult
    | RebootResult
    | RediscoverResult
    | HealthResult
    | BurnInResult
    | StartResult
    | ReadyResult
    | RerouteResult
)

Step = tuple[Run, list[Command]]


# ------------------------------------------------------------------------------------ creation
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
) -> Step:
    """A new run in ``planned``; its first command asks for the node slot and the lease."""
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
        next_at=now,  # due at once: the first tick asks for the lease
        held_gpus=tuple(sorted(set(held_gpus) & {g.index for g in gpus})),
    )
    gpu_list = ", ".join(str(g.index) for g in gpus)
    names = ", ".join(workers) or "none"
    mode = "dry-run " if dry_run else ""
    held = (
        f"; GPUs {', '.join(map(str, run.held_gpus))} stay held out of service"
        if run.held_gpus
        else ""
    )
    record = Record(
        "run_planned",
        f"{mode}{plan.value} planned for GPUs {gpu_list} (workers: {names}){held}; "
        f"trigger: {trigger.describe()}",
    )
    return run, [record, AcquireLease()]


# ------------------------------------------------------------------------------------ the step
def step(run: Run, event: Event, now: float) -> Step:
    """Advance ``run`` by one event at time ``now``; return the new run and what to do next."""
    if run.terminal:
        return run, []
    if isinstance(event, Cancel):
        return _cancel(run, event, now)
    if isinstance(event, Resumed):
        run = replace(run, resumed=run.resumed + 1)
    handler = _HANDLERS[run.state]
    return handler(run, event, now)


# ------------------------------------------------------------------------------------ helpers
def _enter(
    run: Run,
    state: RunState,
    now: float,
    *,
    deadline: float | None = None,
    next_at: float | None = None,
    **changes: Any,
) -> Run:
    return replace(run, state=state, entered_at=now, deadline=deadline, next_at=next_at, **changes)


def _set_worker(run: Run, name: str, **changes: Any) -> Run:
    return replace(
        run,
        workers=tuple(replace(w, **changes) if w.name == name else w for w in run.workers),
    )


def _workers_in(run: Run, *phases: WorkerPhase) -> list[str]:
    return [w.name for w in run.workers if w.phase in phases]


def _all_in(run: Run, *phases: WorkerPhase) -> bool:
    return all(w.phase in phases for w in run.workers)


def _evidence(run: Run, *lines: str) -> Run:
    return replace(run, evidence=(*run.evidence, *lines)[-50:])


def _worker_outcome(
    run: Run,
    worker: str,
    error: str | None,
    *,
    done: tuple[WorkerPhase, str, str],
    failed: tuple[WorkerPhase, str, str],
    evidence: str | None = None,
    **done_fields: Any,
) -> tuple[Run, list[Command]]:
    """One worker's command came back: move it to the done or failed phase and record it.

    ``done`` and ``failed`` are (phase, record kind, record text); a failure is a warning
    and, with ``evidence``, also a line of the run's evidence.
    """
    if error is not None:
        phase, kind, text = failed
        run = _set_worker(run, worker, phase=phase, detail=error)
        if evidence is not None:
            run = _evidence(run, evidence)
        return run, [Record(kind, text, severity="warning")]
    phase, kind, text = done
    return _set_worker(run, worker, phase=phase, **done_fields), [Record(kind, text)]


def _names(names: list[str] | tuple[str, ...]) -> str:
    return ", ".join(names) or "none"


# ---- draining -----------------------------------------------------------------------------
def _start_draining(run: Run, now: float) -> Step:
    targets = _workers_in(run, WorkerPhase.SERVING, WorkerPhase.UNROUTING)
    if not targets:
        return _after_unrouted(run, now)
    run = _enter(run, RunState.UNROUTING, now)
    for name in targets:
        run = _set_worker(run, name, phase=WorkerPhase.UNROUTING)
    cmds: list[Command] = [Record("draining", f"taking workers out of rotation: {_names(targets)}")]
    cmds += [Unroute(name) for name in targets]
    return run, cmds


def _after_unrouted(run: Run, now: float) -> Step:
    delay = run.settings.balancer_delay
    if delay > 0 and run.workers:
        run = _enter(run, RunState.BALANCER_WAIT, now, next_at=now + delay)
        return run, [Record("balancer_wait", f"waiting {delay:g}s for the load balancer to act")]
    return _start_quiescing(run, now)


def _start_quiescing(run: Run, now: float) -> Step:
    if not run.workers:
        return _after_stopped(run, now)
    deadline = now + run.settings.drain_timeout
    run = _enter(run, RunState.QUIESCING, now, deadline=deadline)
    run = replace(run, workers=tuple(replace(w, idle_reads=0, in_flight=None) for w in run.workers))
    return run, [
        Record("quiescing", "waiting for in-flight requests to finish"),
        *[ReadLoad(w.name) for w in run.workers],
    ]


def _quiesce_pending(run: Run) -> list[str]:
    return [w.name for w in run.workers if w.idle_reads < run.settings.idle_reads]


def _start_stopping(run: Run, now: float, note: Record) -> Step:
    targets = _workers_in(run, WorkerPhase.UNROUTED, WorkerPhase.UNROUTING, WorkerPhase.STOPPING)
    run = _enter(run, RunState.STOPPING, now)
    for name in targets:
        run = _set_worker(run, name, phase=WorkerPhase.STOPPING)
    cmds: list[Command] = [note, Record("stopping", f"stopping workers: {_names(targets)}")]
    cmds += [StopUnit(name) for name in targets]
    if not targets:
        nxt, more = _after_stopped(run, now)
        return nxt, cmds + more
    return run, cmds


def _after_stopped(run: Run, now: float) -> Step:
    if run.plan is Plan.QUARANTINE:
        return _quarantine(run, now, run.outcome or "quarantined: kept out of service")
    if run.plan is Plan.DRAIN:
        run = _enter(run, RunState.DRAINED, now, holding=True, outcome="drained on request")
        return run, [
            Record(
                "drained",
                f"workers {_names(run.worker_names)} drained on request and held out of "
                f"service; GPUs {_gpu_list(run)} wait for an undrain",
                severity="warning",
                raise_alert=True,
                evidence=run.evidence,
            )
        ]
    if run.plan is Plan.REBOOT:
        return _start_reboot(run, now, "rebooting the node")
    deadline = now + run.settings.release_timeout
    run = _enter(run, RunState.RELEASE_CHECK, now, deadline=deadline)
    return run, [
        Record("release_check", "confirming no process still holds the GPUs"),
        CheckProcesses(),
    ]


def _gpu_list(run: Run) -> str:
    return ", ".join(str(i) for i in run.gpu_indices)


# ---- terminal ------------------------------------------------------------------------------
def _quarantine(run: Run, now: float, reason: str) -> Step:
    run = _enter(run, RunState.QUARANTINED, now, holding=True, outcome=reason)
    out = run.out_of_rotation()
    return run, [
        Record(
            "quarantined",
            f"GPUs {_gpu_list(run)} quarantined: {reason}. Workers held out of service: "
            f"{_names(out)}. A human must look (trigger: {run.trigger.describe()}).",
            severity="critical",
            raise_alert=True,
            evidence=run.evidence,
        )
    ]


def _abort(run: Run, now: float, reason: str, *, page: bool) -> Step:
    """Conclude without a reset. Workers still out of rotation are held and alerted on."""
    # an undrain that stops short leaves its GPUs to the earlier run that still holds them
    held = () if run.plan is Plan.UNDRAIN else run.out_of_rotation()
    if held:
        run = _enter(run, RunState.ABORTED, now, holding=True, outcome=reason)
        return run, [
            Record(
                "aborted",
                f"run aborted: {reason}. Workers left out of service: {_names(held)}; "
                "undrain them to restore",
                severity="critical" if page else "warning",
                raise_alert=True,
                evidence=run.evidence,
            )
        ]
    run = _enter(run, RunState.ABORTED, now, outcome=reason)
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


def _done(run: Run, now: float) -> Step:
    run = _enter(run, RunState.DONE, now, outcome="completed", lease_held=False)
    verb = "back in service" if run.workers else "verified"
    cmds: list[Command] = [
        Record(
            "done",
            f"GPUs {_gpu_list(run)} {verb}; workers re-admitted: {_names(run.worker_names)}",
            resolve_alert=True,
        ),
        ReleaseLease(),
    ]
    if run.plan is Plan.UNDRAIN:
        cmds.append(ReleaseHolds())
    return run, cmds


def _rollback(run: Run, now: float, reason: str, *, page: bool) -> Step:
    targets = _workers_in(run, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED)
    if not targets:
        return _abort(run, now, reason, page=page)
    run = _enter(run, RunState.ROLLING_BACK, now, outcome=reason, page_on_abort=page)
    cmds: list[Command] = [
        Record("rolling_back", f"{reason}; putting workers back: {_names(targets)}")
    ]
    cmds += [Reroute(name) for name in targets]
    return run, cmds


# ---- cancel --------------------------------------------------------------------------------
def _cancel(run: Run, event: Cancel, now: float) -> Step:
    reason = f"cancelled by {event.who}: {event.why}"
    if run.state is RunState.ROLLING_BACK:
        return run, [Record("cancel_ignored", f"{reason} (already rolling back)")]
    if run.state in (RunState.UNROUTING, RunState.BALANCER_WAIT, RunState.QUIESCING):
        return _rollback(run, now, reason, page=False)
    return _abort(run, now, reason, page=False)


# ---- per-state handlers --------------------------------------------------------------------
def _planned(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, LeaseResult):
        if event.granted:
            run = replace(run, lease_held=True, lease_note=None)
            note = Record("lease_granted", "node slot and fleet capacity granted")
            if run.plan is Plan.UNDRAIN:
                nxt, cmds = _start_starting(run, now)
            else:
                nxt, cmds = _start_draining(run, now)
            return nxt, [note, *cmds]
        if event.final or (run.deadline is not None and now >= run.deadline):
            why = event.reason if event.final else f"no capacity in time ({event.reason})"
            return _abort(run, now, why, page=False)
        nxt = replace(run, next_at=now + run.settings.lease_retry_interval)
        if event.reason != run.lease_note:
            nxt = replace(nxt, lease_note=event.reason)
            return nxt, [Record("lease_waiting", f"waiting: {event.reason}")]
        return nxt, []
    if isinstance(event, Resumed) or (isinstance(event, Tick) and due(run, now)):
        return replace(run, next_at=None), [AcquireLease()]
    return run, []


def _unrouting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, UnrouteResult):
        w = run.worker(event.worker)
        if w is None or w.phase is not WorkerPhase.UNROUTING:
            return run, []
        if event.error is not None:
            run = _set_worker(run, event.worker, detail=event.error)
            run = _evidence(run, f"taking {event.worker} out of rotation failed: {event.error}")
            return _rollback(run, now, f"could not take {event.worker} out of rotation", page=True)
        run = _set_worker(run, event.worker, phase=WorkerPhase.UNROUTED)
        cmds: list[Command] = [Record("worker_unrouted", f"{event.worker} out of rotation")]
        if _all_in(run, WorkerPhase.UNROUTED):
            nxt, more = _after_unrouted(run, now)
            return nxt, cmds + more
        return run, cmds
    if isinstance(event, Resumed):
        return run, [Unroute(n) for n in _workers_in(run, WorkerPhase.UNROUTING)]
    return run, []


def _balancer_wait(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, Tick | Resumed) and due(run, now):
        return _start_quiescing(run, now)
    return run, []


def _quiescing(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, LoadResult):
        w = run.worker(event.worker)
        if w is None or w.idle_reads >= s.idle_reads:
            return run, []
        if event.error is not None and event.gone:
            # An engine that is gone serves nothing: it counts as idle, and the evidence
            # says so (integrations.md 1.6, "engine already dead").
            in_flight = None
            idle = True
            detail = f"unreachable: {event.error}"
        elif event.error is not None:
            # no reading is not zero requests: wait (the drain timeout bounds the wait)
            in_flight = None
            idle = False
            detail = f"load unknown: {event.error}"
        else:
            in_flight = (event.running or 0.0) + (event.waiting or 0.0)
            idle = in_flight == 0
            detail = f"running {event.running or 0:g}, waiting {event.waiting or 0:g}"
        reads = w.idle_reads + 1 if idle else 0
        run = _set_worker(run, event.worker, idle_reads=reads, in_flight=in_flight, detail=detail)
        cmds: list[Command] = []
        if reads >= s.idle_reads:
            cmds.append(Record("worker_idle", f"{event.worker} idle ({detail})"))
        if not _quiesce_pending(run):
            nxt, more = _start_stopping(run, now, Record("drained_gracefully", "every worker idle"))
            return nxt, cmds + more
        if run.next_at is None:
            run = replace(run, next_at=now + s.drain_poll_interval)
        return run, cmds
    if isinstance(event, Tick | Resumed):
        if run.deadline is not None and now >= run.deadline:
            busy = [
                f"{w.name} ({w.detail or 'no reading'})"
                for w in run.workers
                if w.idle_reads < s.idle_reads
            ]
            line = f"drain timed out after {s.drain_timeout:g}s; still busy: {_names(busy)}"
            run = _evidence(run, line)
            if s.on_drain_timeout == "abort" and run.plan is Plan.RESET:
                return _rollback(run, now, line, page=True)
            return _start_stopping(
                run, now, Record("drain_timeout", f"{line}; proceeding", severity="warning")
            )
        if isinstance(event, Resumed) or due(run, now):
            run = replace(run, next_at=None)
            return run, [ReadLoad(n) for n in _quiesce_pending(run)]
    return run, []


def _stopping(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, StopResult):
        w = run.worker(event.worker)
        if w is None or w.phase is not WorkerPhase.STOPPING:
            return run, []
        run, cmds = _worker_outcome(
            run,
            event.worker,
            event.error,
            done=(WorkerPhase.STOPPED, "worker_stopped", f"{event.worker} stopped"),
            failed=(
                WorkerPhase.STOP_FAILED,
                "worker_stop_failed",
                f"{event.worker}: {event.error}",
            ),
            evidence=f"stopping {event.worker} failed: {event.error}",
        )
        if _all_in(run, WorkerPhase.STOPPED, WorkerPhase.STOP_FAILED):
            nxt, more = _after_stopped(run, now)
            return nxt, cmds + more
        return run, cmds
    if isinstance(event, Resumed):
        return run, [StopUnit(n) for n in _workers_in(run, WorkerPhase.STOPPING)]
    return run, []


def _release_check(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, ProcessResult):
        if event.error is None and not event.holders:
            return _start_reset(run, now)
        what = event.error or f"still on the GPUs: {', '.join(event.holders)}"
        if run.deadline is not None and now >= run.deadline:
            run = _evidence(run, f"reset refused: {what}")
            return _quarantine(run, now, f"reset refused, {what}")
        return replace(run, next_at=now + s.release_poll_interval, last_problems=(what,)), []
    if isinstance(event, Resumed) or (isinstance(event, Tick) and due(run, now)):
        return replace(run, next_at=None), [CheckProcesses()]
    return run, []


def _start_reset(run: Run, now: float) -> Step:
    if run.reset_count > 0:  # never twice in one run, whatever happened before
        return _start_verifying(run, now, "reset already issued by this run")
    target = run.reset_target
    run = _enter(run, RunState.RESETTING, now, reset_count=run.reset_count + 1)
    return run, [
        Record(
            "reset_intent",
            f"resetting GPU {target} once; the reset reaches GPUs {_gpu_list(run)}",
            severity="warning",
        ),
        ResetGpu(target),
    ]


def _resetting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, ResetResult):
        if event.error is None:
            return _start_verifying(run, now, "reset done")
        run = _evidence(run, f"reset failed: {event.error}")
        if run.settings.escalate_to_reboot and run.reboot_count == 0:
            return _start_reboot(run, now, f"reset failed ({event.error}); escalating to reboot")
        return _quarantine(run, now, f"reset failed: {event.error}")
    if isinstance(event, Resumed):
        # The intent is journaled; the reset may have happened. Never issue it again.
        return _start_verifying(
            run, now, "restarted during the reset; verifying instead of resetting again"
        )
    return run, []


def _start_reboot(run: Run, now: float, why: str) -> Step:
    if run.reboot_count > 0:
        return _quarantine(run, now, "a reboot was already requested by this run")
    deadline = now + run.settings.reboot_timeout
    run = _enter(run, RunState.REBOOTING, now, deadline=deadline, reboot_count=run.reboot_count + 1)
    return run, [
        Record("reboot_intent", f"{why}: requesting a node reboot", severity="warning"),
        RequestReboot(),
    ]


def _rebooting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, RebootResult):
        if event.error is not None:
            run = _evidence(run, f"reboot request failed: {event.error}")
            return _quarantine(run, now, f"reboot request failed: {event.error}")
        return run, [Record("reboot_requested", "reboot requested; waiting for the node")]
    if isinstance(event, Resumed):
        return _start_verifying(run, now, "daemon restarted after the reboot request")
    if isinstance(event, Tick) and due(run, now):
        return _quarantine(run, now, "reboot requested but the node did not restart in time")
    return run, []


def _start_verifying(run: Run, now: float, why: str) -> Step:
    deadline = now + run.settings.verify_timeout
    run = _enter(
        run,
        RunState.VERIFYING,
        now,
        deadline=deadline,
        rediscovered=False,
        healthy_polls=0,
        ue_baseline=(),
        last_problems=(),
    )
    return run, [Record("verifying", f"{why}; verifying GPUs {_gpu_list(run)}"), Rediscover()]


def _verify_failed(run: Run, now: float, why: str) -> Step:
    run = _evidence(run, f"verification failed: {why}")
    if run.settings.escalate_to_reboot and run.reboot_count == 0:
        return _start_reboot(run, now, f"verification failed ({why})")
    return _quarantine(run, now, f"verification failed: {why}")


def _verifying(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, RediscoverResult):
        missing = [
            g for g in run.gpus if g.key not in event.present and g.index not in run.held_gpus
        ]
        if event.error is None and not missing:
            run = replace(run, rediscovered=True, next_at=now + s.verify_poll_interval)
            if s.verify_poll_interval <= 0:
                return replace(run, next_at=None), [
                    Record("rediscovered", "every GPU re-enumerated"),
                    PollHealth(),
                ]
            return run, [Record("rediscovered", "every GPU re-enumerated")]
        what = event.error or "missing after reset: GPU " + ", ".join(str(g.index) for g in missing)
        return replace(run, next_at=now + s.verify_poll_interval, last_problems=(what,)), []
    if isinstance(event, HealthResult):
        if not run.rediscovered:
            return run, []
        problems = list(event.problems)
        baseline = dict(run.ue_baseline)
        counts = dict(event.ue_counts)
        new_ue = [
            f"GPU {gpu}: {count - baseline[gpu]:g} new uncorrectable errors"
            for gpu, count in sorted(counts.items())
            if gpu in baseline and count > baseline[gpu]
        ]
        if new_ue:
            return _verify_failed(run, now, "; ".join(new_ue))
        # the first reading after the reset is the baseline; a counter that went down was reset
        merged = {
            **baseline,
            **{g: c for g, c in counts.items() if g not in baseline or c < baseline[g]},
        }
        run = replace(run, ue_baseline=tuple(sorted(merged.items())))
        if problems:
            run = replace(
                run,
                healthy_polls=0,
                last_problems=tuple(problems),
                next_at=now + s.verify_poll_interval,
            )
            return run, []
        polls = run.healthy_polls + 1
        run = replace(run, healthy_polls=polls, last_problems=())
        if polls >= s.verify_polls:
            note = Record("verified", f"GPUs {_gpu_list(run)} healthy on {polls} polls")
            if s.burn_in:
                nxt, cmds = _start_burn_in(run, now)
            else:
                nxt, cmds = _start_starting(run, now)
            return nxt, [note, *cmds]
        if s.verify_poll_interval <= 0:
            return replace(run, next_at=None), [PollHealth()]
        return replace(run, next_at=now + s.verify_poll_interval), []
    if isinstance(event, Tick | Resumed):
        if run.deadline is not None and now >= run.deadline:
            why = "; ".join(run.last_problems) or "not healthy in time"
            return _verify_failed(run, now, f"{why} (after {s.verify_timeout:g}s)")
        if isinstance(event, Resumed):  # a new process: enumerate again before polling
            return replace(run, next_at=None, rediscovered=False), [Rediscover()]
        if due(run, now):
            run = replace(run, next_at=None)
            return run, [PollHealth() if run.rediscovered else Rediscover()]
    return run, []


def _start_burn_in(run: Run, now: float) -> Step:
    run = _enter(run, RunState.BURN_IN, now)
    return run, [Record("burn_in", "running the burn-in command"), RunBurnIn()]


def _burn_in(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, BurnInResult):
        if event.error is not None:
            run = _evidence(run, f"burn-in failed: {event.error} {event.detail}".strip())
            return _verify_failed(run, now, f"burn-in failed: {event.error}")
        note = Record("burn_in_passed", f"burn-in passed {event.detail}".strip())
        nxt, cmds = _start_starting(run, now)
        return nxt, [note, *cmds]
    if isinstance(event, Resumed):
        return run, [RunBurnIn()]
    return run, []


# ---- readmitting ---------------------------------------------------------------------------
def _start_starting(run: Run, now: float) -> Step:
    targets = _workers_in(
        run,
        WorkerPhase.STOPPED,
        WorkerPhase.STOP_FAILED,
        WorkerPhase.STARTING,
        WorkerPhase.UNROUTED,
        WorkerPhase.SERVING,
    )
    if not run.workers:
        return _done(run, now)
    run = _enter(run, RunState.STARTING, now)
    for name in targets:
        run = _set_worker(run, name, phase=WorkerPhase.STARTING, detail=None)
    cmds: list[Command] = [Record("readmitting", f"starting workers: {_names(targets)}")]
    cmds += [StartUnit(name) for name in targets]
    if not targets:
        nxt, more = _start_await_ready(run, now)
        return nxt, cmds + more
    return run, cmds


def _starting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, StartResult):
        w = run.worker(event.worker)
        if w is None or w.phase is not WorkerPhase.STARTING:
            return run, []
        run, cmds = _worker_outcome(
            run,
            event.worker,
            event.error,
            done=(WorkerPhase.STARTED, "worker_started", f"{event.worker} started"),
            failed=(WorkerPhase.FAILED, "worker_start_failed", f"{event.worker}: {event.error}"),
            evidence=f"starting {event.worker} failed: {event.error}",
        )
        if not _workers_in(run, WorkerPhase.STARTING):
            nxt, more = _start_await_ready(run, now)
            return nxt, cmds + more
        return run, cmds
    if isinstance(event, Resumed):
        return run, [StartUnit(n) for n in _workers_in(run, WorkerPhase.STARTING)]
    return run, []


def _start_await_ready(run: Run, now: float) -> Step:
    deadline = now + run.settings.ready_timeout
    run = _enter(run, RunState.AWAIT_READY, now, deadline=deadline)
    pending = _workers_in(run, WorkerPhase.STARTED)
    if not pending:
        return _conclude_readmission(run, now)
    return run, [CheckReady(n) for n in pending]


def _conclude_readmission(run: Run, now: float) -> Step:
    failed = _workers_in(run, WorkerPhase.FAILED)
    if failed:
        details = [f"{w.name}: {w.detail or 'not ready'}" for w in run.workers if w.name in failed]
        run = _evidence(run, *details)
        return _quarantine(run, now, f"workers did not come back: {_names(failed)}")
    return _done(run, now)


def _await_ready(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, ReadyResult):
        w = run.worker(event.worker)
        if w is None or w.phase is not WorkerPhase.STARTED:
            return run, []
        if not event.ready:
            run = _set_worker(run, event.worker, detail=event.detail)
            if run.next_at is None:
                run = replace(run, next_at=now + s.ready_poll_interval)
            return run, []
        run = _set_worker(run, event.worker, phase=WorkerPhase.READY, detail=event.detail)
        return run, [
            Record("worker_ready", f"{event.worker} healthy {event.detail}".strip()),
            Reroute(event.worker),
        ]
    if isinstance(event, RerouteResult):
        w = run.worker(event.worker)
        if w is None or w.phase is not WorkerPhase.READY:
            return run, []
        run, cmds = _worker_outcome(
            run,
            event.worker,
            event.error,
            done=(WorkerPhase.REROUTED, "worker_rerouted", f"{event.worker} back in rotation"),
            failed=(
                WorkerPhase.FAILED,
                "worker_reroute_failed",
                f"putting {event.worker} back into rotation failed: {event.error}",
            ),
        )
        if _all_in(run, WorkerPhase.REROUTED, WorkerPhase.FAILED):
            nxt, more = _conclude_readmission(run, now)
            return nxt, cmds + more
        return run, cmds
    if isinstance(event, Tick | Resumed):
        if run.deadline is not None and now >= run.deadline:
            late = _workers_in(run, WorkerPhase.STARTED)
            for name in late:
                w = run.worker(name)
                why = f"not ready after {s.ready_timeout:g}s" + (
                    f" ({w.detail})" if w is not None and w.detail else ""
                )
                run = _set_worker(run, name, phase=WorkerPhase.FAILED, detail=why)
            if not _workers_in(run, WorkerPhase.READY):
                return _conclude_readmission(run, now)
            return run, [Reroute(n) for n in _workers_in(run, WorkerPhase.READY)]
        if isinstance(event, Resumed) or due(run, now):
            run = replace(run, next_at=None)
            cmds2: list[Command] = [CheckReady(n) for n in _workers_in(run, WorkerPhase.STARTED)]
            cmds2 += [Reroute(n) for n in _workers_in(run, WorkerPhase.READY)]
            return run, cmds2
    return run, []


def _rolling_back(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, RerouteResult):
        w = run.worker(event.worker)
        if w is None or w.phase not in (WorkerPhase.UNROUTING, WorkerPhase.UNROUTED):
            return run, []
        run, cmds = _worker_outcome(
            run,
            event.worker,
            event.error,
            done=(WorkerPhase.SERVING, "worker_rerouted", f"{event.worker} back in rotation"),
            failed=(WorkerPhase.FAILED, "worker_reroute_failed", f"{event.worker}: {event.error}"),
            evidence=f"putting {event.worker} back failed: {event.error}",
            idle_reads=0,
        )
        if not _workers_in(run, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED):
            nxt, more = _abort(run, now, run.outcome or "aborted", page=run.page_on_abort)
            return nxt, cmds + more
        return run, cmds
    if isinstance(event, Resumed):
        return run, [
            Reroute(n) for n in _workers_in(run, WorkerPhase.UNROUTING, WorkerPhase.UNROUTED)
        ]
    return run, []


def _terminal(run: Run, event: Event, now: float) -> Step:
    return run, []


_HANDLERS = {
    RunState.PLANNED: _planned,
    RunState.UNROUTING: _unrouting,
    RunState.BALANCER_WAIT: _balancer_wait,
    RunState.QUIESCING: _quiescing,
    RunState.STOPPING: _stopping,
    RunState.RELEASE_CHECK: _release_check,
    RunState.RESETTING: _resetting,
    RunState.REBOOTING: _rebooting,
    RunState.VERIFYING: _verifying,
    RunState.BURN_IN: _burn_in,
    RunState.STARTING: _starting,
    RunState.AWAIT_READY: _await_ready,
    RunState.ROLLING_BACK: _rolling_back,
    RunState.DONE: _terminal,
    RunState.QUARANTINED: _terminal,
    RunState.ABORTED: _terminal,
    RunState.DRAINED: _terminal,
}


# ------------------------------------------------------------------------------------ storage
def run_to_dict(run: Run) -> dict[str, Any]:
    """Plain JSON-able data for the journal."""
    return {
        "run_id": run.run_id,
        "node": run.node,
        "plan": run.plan.value,
        "trigger": _dc(run.trigger),
        "gpus": [_dc(g) for g in run.gpus],
        "workers": [_dc(w) for w in run.workers],
        "settings": _dc(run.settings),
        "created_at": run.created_at,
        "state": run.state.value,
        "dry_run": run.dry_run,
        "entered_at": run.entered_at,
        "deadline": run.deadline,
        "next_at": run.next_at,
        "lease_held": run.lease_held,
        "holding": run.holding,
        "resumed": run.resumed,
        "reset_count": run.reset_count,
        "reboot_count": run.reboot_count,
        "rediscovered": run.rediscovered,
        "healthy_polls": run.healthy_polls,
        "ue_baseline": [list(p) for p in run.ue_baseline],
        "last_problems": list(run.last_problems),
        "evidence": list(run.evidence),
        "outcome": run.outcome,
        "lease_note": run.lease_note,
        "page_on_abort": run.page_on_abort,
        "held_gpus": list(run.held_gpus),
    }


def _dc(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        if isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        elif isinstance(value, StrEnum):
            value = value.value
        out[name] = value
    return out


def run_from_dict(data: dict[str, Any]) -> Run:
    """The inverse of ``run_to_dict``."""
    trig = dict(data["trigger"])
    trig["labels"] = tuple((str(k), str(v)) for k, v in trig.get("labels", ()))
    return Run(
        run_id=data["run_id"],
        node=data["node"],
        plan=Plan(data["plan"]),
        trigger=Trigger(**trig),
        gpus=tuple(UnitGpu(**g) for g in data["gpus"]),
        workers=tuple(
            WorkerProgress(**{**w, "phase": WorkerPhase(w["phase"])}) for w in data["workers"]
        ),
        settings=RunSettings(**data["settings"]),
        created_at=data["created_at"],
        state=RunState(data["state"]),
        dry_run=data["dry_run"],
        entered_at=data["entered_at"],
        deadline=data["deadline"],
        next_at=data["next_at"],
        lease_held=data["lease_held"],
        holding=data["holding"],
        resumed=data["resumed"],
        reset_count=data["reset_count"],
        reboot_count=data["reboot_count"],
        rediscovered=data["rediscovered"],
        healthy_polls=data["healthy_polls"],
        ue_baseline=tuple((int(g), float(c)) for g, c in data["ue_baseline"]),
        last_problems=tuple(data["last_problems"]),
        evidence=tuple(data["evidence"]),
        outcome=data["outcome"],
        lease_note=data["lease_note"],
        page_on_abort=data.get("page_on_abort", False),
        held_gpus=tuple(int(g) for g in data.get("held_gpus", ())),
    )


__all__ = [
    "MANUAL_PLANS",
    "TERMINAL",
    "Command",
    "Event",
    "Plan",
    "Record",
    "Run",
    "RunSettings",
    "RunState",
    "Step",
    "Trigger",
    "UnitGpu",
    "WorkerPhase",
    "WorkerProgress",
    "due",
    "plan_run",
    "run_from_dict",
    "run_to_dict",
    "step",
]
