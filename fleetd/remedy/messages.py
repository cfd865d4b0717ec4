"""What the machine and the executor say to each other.

A *command* is what a step asks for (one small frozen value each: the executor looks up how
to carry it out by its type); an *event* is what happened — a command's outcome, time
passing, a restart, a person's cancel — and is the input of the next step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["info", "warning", "critical"]


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
    details: tuple[tuple[str, str], ...] = ()  # structured fields (the RMA ticket's body)


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
class WorkerCommand:
    """A command for one worker of the run, independent of the others: the executor carries
    out a step's batch of one kind in parallel."""

    worker: str


@dataclass(frozen=True, slots=True)
class Unroute(WorkerCommand):
    """Take the worker out of the load balancer's rotation."""


@dataclass(frozen=True, slots=True)
class ReadLoad(WorkerCommand):
    """Read the worker's in-flight requests."""


@dataclass(frozen=True, slots=True)
class StopUnit(WorkerCommand):
    """Stop the worker's service."""


@dataclass(frozen=True, slots=True)
class CheckProcesses:
    pass


@dataclass(frozen=True, slots=True)
class CaptureBaseline:
    """Read the unit's uncorrectable-error counters just before the reset (read-only)."""


@dataclass(frozen=True, slots=True)
class CaptureEvidence:
    """Write the unit's evidence bundle for ``phase`` (``pre_reset``, ``quarantine``); a
    capture cut short by a restart is taken again as the next ``attempt``, into a new file."""

    phase: str
    attempt: int = 1


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
class RunValidator:
    """Run the command validator ``name`` of the ladder on the unit (``attempt`` > 1: the one
    before was cut short by a restart)."""

    name: str
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class StartUnit(WorkerCommand):
    """Start the worker's service."""


@dataclass(frozen=True, slots=True)
class CheckReady(WorkerCommand):
    """Ask whether the worker serves again."""


@dataclass(frozen=True, slots=True)
class Reroute(WorkerCommand):
    """Put the worker back into the load balancer's rotation."""


Command = (
    Record
    | AcquireLease
    | ReleaseLease
    | ReleaseHolds
    | Unroute
    | ReadLoad
    | StopUnit
    | CheckProcesses
    | CaptureBaseline
    | CaptureEvidence
    | ResetGpu
    | RequestReboot
    | Rediscover
    | PollHealth
    | RunBurnIn
    | RunValidator
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
class Abandon:
    """Give up a proactive validation at once (the node's load rose, an incident began, the
    fleet said no): the workers go back into service; nothing is quarantined for it."""

    why: str


@dataclass(frozen=True, slots=True)
class Replan:
    """Another report of the run's incident calls for a more severe plan (physical ⇒
    quarantine, reboot): taken while the run is still ``planned`` (nothing done yet), with
    the unit and workers of the new plan; refused (recorded) after that."""

    plan: str  # a Plan value (run.py imports this module's neighbours, not the reverse)
    gpus: tuple[tuple[int, str | None, str | None], ...]  # (index, uuid, bdf) of the new unit
    workers: tuple[str, ...]
    held_gpus: tuple[int, ...]
    why: str


@dataclass(frozen=True, slots=True)
class LeaseResult:
    granted: bool
    reason: str = ""
    final: bool = False  # denied for good (e.g. automatic remediation was switched off)


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """A worker command's outcome: ``error`` None when it was carried out."""

    worker: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class UnrouteResult(WorkerResult):
    pass


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
class StopResult(WorkerResult):
    note: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessResult:
    holders: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class BaselineResult:
    """The pre-reset uncorrectable-error counters per GPU index; ``error``: none read."""

    ue_counts: tuple[tuple[int, float], ...] = ()
    ce_counts: tuple[tuple[int, float], ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class EvidenceResult:
    """Where the bundle went and its sha256; or ``error`` (timed out, disk full): recorded,
    never a reason to skip the reset."""

    phase: str
    attempt: int = 1
    path: str | None = None
    sha256: str | None = None
    size: int = 0
    cut: tuple[str, ...] = ()
    error: str | None = None
    note: str = ""


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
    ue_counts: tuple[tuple[int, float], ...] = ()  # uncorrectable + deferred, per GPU index
    ce_counts: tuple[tuple[int, float], ...] = ()  # correctable, per GPU index
    # the driver's word on the reset since it was issued (post-reset event, kernel lines)
    reset_succeeded: tuple[tuple[int, str], ...] = ()
    reset_failed: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BurnInResult:
    error: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ValidatorResult:
    """A command validator's verdict: ``ok`` only when it exited 0 and its parser read a pass
    from its output."""

    name: str
    attempt: int
    ok: bool
    summary: str
    kind: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    duration: float = 0.0
    output: str = ""


@dataclass(frozen=True, slots=True)
class StartResult(WorkerResult):
    pass


@dataclass(frozen=True, slots=True)
class ReadyResult:
    worker: str
    ready: bool
    detail: str = ""
    benchmark: str = ""  # the benchmark gate's word (figures, or why it was skipped)
    below_baseline: bool = False  # serving, but slower than its baseline: quarantine


@dataclass(frozen=True, slots=True)
class RerouteResult(WorkerResult):
    pass


Event = (
    Tick
    | Resumed
    | Cancel
    | Abandon
    | Replan
    | LeaseResult
    | UnrouteResult
    | LoadResult
    | StopResult
    | ProcessResult
    | BaselineResult
    | EvidenceResult
    | ResetResult
    | RebootResult
    | RediscoverResult
    | HealthResult
    | BurnInResult
    | ValidatorResult
    | StartResult
    | ReadyResult
    | RerouteResult
)
