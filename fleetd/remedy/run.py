"""The run a remediation is: what it touches, where it stands, and the waits it was planned with.

Frozen values only: ``fleetd.remedy.machine`` moves a ``Run`` from state to state and the
journal keeps every one of them. ``RunState.phase`` is the coarse word people read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


class Plan(StrEnum):
    RESET = "reset"
    QUARANTINE = "quarantine"
    REBOOT = "reboot"
    DRAIN = "drain"
    UNDRAIN = "undrain"
    PROACTIVE = "proactive"  # rolling validation of a healthy hive: no reset, the ladder


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
    VALIDATING = "validating"
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

    kind: Literal["alert", "manual", "schedule"]
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
        if self.kind == "schedule":
            return f"proactive validation ({self.why or 'due'})"
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        value = f" (value {self.value:g})" if self.value is not None else ""
        return f"alert {self.rule}{where}{value}"


@dataclass(frozen=True, slots=True)
class UnitGpu:
    """One GPU the run touches; ``uuid`` lets verification recognise it after re-enumeration."""

    index: int
    uuid: str | None = None
    bdf: str | None = None
    serial: str | None = None  # the physical GPU's board serial: its RMA record's key

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
class Bundle:
    """One evidence bundle a run wrote: its phase, file and sha256 digest."""

    phase: str
    path: str
    sha256: str
    size: int = 0


@dataclass(frozen=True, slots=True)
class ValidatorOutcome:
    """One validator's verdict in a run (the ladder's record): its output's end is kept, the
    whole of it up to ``validation.output_bytes`` when it failed."""

    name: str
    kind: str
    ok: bool
    summary: str
    attempt: int = 1
    started_at: float = 0.0
    duration: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    target: str = ""  # the worker, for the inference probe
    output: str = ""


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
    capture_evidence: bool = False  # an evidence bundle before the reset and on quarantine
    validators: tuple[str, ...] = ()  # the validation ladder, in order (``inference`` last)


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
    # RAS counters per GPU (uncorrectable + deferred; correctable) read just before the
    # reset, and the lowest of each seen since: what verification compares
    ue_baseline: tuple[tuple[int, float], ...] = ()
    ue_low: tuple[tuple[int, float], ...] = ()
    ce_baseline: tuple[tuple[int, float], ...] = ()
    ce_low: tuple[tuple[int, float], ...] = ()
    reset_effect: str = ""  # what the counters showed the reset did, once they showed it
    reset_at: float | None = None  # when the reset was issued (its intent journaled)
    reset_confirmed: str = ""  # the driver's word that the reset happened, once seen
    last_problems: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    outcome: str | None = None
    lease_note: str | None = None
    page_on_abort: bool = False
    held_gpus: tuple[int, ...] = ()  # in the unit but held out by an earlier run: not verified
    # evidence bundles: the capture under way (its phase and attempt, journaled before it
    # starts, so a restart never writes into the same bundle twice) and those written
    capturing: str = ""
    capture_attempt: int = 0
    bundles: tuple[Bundle, ...] = ()
    # the validation ladder: the validator under way (journaled before it starts: a restart
    # runs it again as the next attempt, never skips it) and every verdict so far
    validating: str = ""
    validate_attempt: int = 0
    validation: tuple[ValidatorOutcome, ...] = ()
    validated_at: float | None = None  # when the command validators were through
    # when each capture began, by phase (the first attempt's time): the KPIs' capture stage
    captures_started: tuple[tuple[str, float], ...] = ()
    # a proactive validation given up (load rose, an incident began): why; it re-admits at once
    abandoned: str = ""

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
