"""From the lease to the release check: take the workers out of rotation, wait for the load
balancer and for in-flight requests, stop the units, and confirm nothing holds the GPUs."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import (
    Abandon,
    AcquireLease,
    BaselineResult,
    CaptureBaseline,
    CheckProcesses,
    Command,
    Event,
    EvidenceResult,
    LeaseResult,
    LoadResult,
    ProcessResult,
    ReadLoad,
    Record,
    Resumed,
    StopResult,
    StopUnit,
    Tick,
    Unroute,
    UnrouteResult,
)
from fleetd.remedy.run import Plan, Run, RunState, WorkerPhase, due
from fleetd.remedy.steps import evidence
from fleetd.remedy.steps.common import (
    Step,
    add_evidence,
    after,
    all_in,
    awaited,
    enter,
    gpu_list,
    name_list,
    reissued,
    set_worker,
    worker_outcome,
    workers_in,
)
from fleetd.remedy.steps.readmit import start_readmitting
from fleetd.remedy.steps.reset import start_reboot, start_reset
from fleetd.remedy.steps.terminal import abort, quarantine, rollback
from fleetd.remedy.steps.validate import abandon, start_validating


def _start_draining(run: Run, now: float) -> Step:
    targets = workers_in(run, WorkerPhase.SERVING, WorkerPhase.UNROUTING)
    if not targets:
        return _after_unrouted(run, now)
    run = enter(run, RunState.UNROUTING, now)
    for name in targets:
        run = set_worker(run, name, phase=WorkerPhase.UNROUTING)
    cmds: list[Command] = [
        Record("draining", f"taking workers out of rotation: {name_list(targets)}")
    ]
    cmds += [Unroute(name) for name in targets]
    return run, cmds


def _after_unrouted(run: Run, now: float) -> Step:
    delay = run.settings.balancer_delay
    if delay > 0 and run.workers:
        run = enter(run, RunState.BALANCER_WAIT, now, next_at=now + delay)
        return run, [Record("balancer_wait", f"waiting {delay:g}s for the load balancer to act")]
    return _start_quiescing(run, now)


def _start_quiescing(run: Run, now: float) -> Step:
    if not run.workers:
        return _after_stopped(run, now)
    deadline = now + run.settings.drain_timeout
    run = enter(run, RunState.QUIESCING, now, deadline=deadline)
    run = replace(run, workers=tuple(replace(w, idle_reads=0, in_flight=None) for w in run.workers))
    return run, [
        Record("quiescing", "waiting for in-flight requests to finish"),
        *[ReadLoad(w.name) for w in run.workers],
    ]


def _quiesce_pending(run: Run) -> list[str]:
    return [w.name for w in run.workers if w.idle_reads < run.settings.idle_reads]


def _start_stopping(run: Run, now: float, note: Record) -> Step:
    targets = workers_in(run, WorkerPhase.UNROUTED, WorkerPhase.UNROUTING, WorkerPhase.STOPPING)
    run = enter(run, RunState.STOPPING, now)
    for name in targets:
        run = set_worker(run, name, phase=WorkerPhase.STOPPING)
    cmds: list[Command] = [note, Record("stopping", f"stopping workers: {name_list(targets)}")]
    cmds += [StopUnit(name) for name in targets]
    if not targets:
        return after(cmds, _after_stopped(run, now))
    return run, cmds


def _after_stopped(run: Run, now: float) -> Step:
    if run.plan is Plan.QUARANTINE:
        return quarantine(run, now, run.outcome or "quarantined: kept out of service")
    if run.plan is Plan.DRAIN:
        run = enter(run, RunState.DRAINED, now, holding=True, outcome="drained on request")
        return run, [
            Record(
                "drained",
                f"workers {name_list(run.worker_names)} drained on request and held out of "
                f"service; GPUs {gpu_list(run)} wait for an undrain",
                severity="warning",
                raise_alert=True,
                evidence=run.evidence,
            )
        ]
    if run.plan is Plan.REBOOT:
        return start_reboot(run, now, "rebooting the node")
    deadline = now + run.settings.release_timeout
    run = enter(run, RunState.RELEASE_CHECK, now, deadline=deadline)
    return run, [
        Record("release_check", "confirming no process still holds the GPUs"),
        CheckProcesses(),
    ]


def on_planned(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, LeaseResult):
        if event.granted:
            run = replace(run, lease_held=True, lease_note=None)
            note = Record("lease_granted", "node slot and fleet capacity granted")
            if run.plan is Plan.UNDRAIN:
                return after([note], start_readmitting(run, now))
            return after([note], _start_draining(run, now))
        if event.final or (run.deadline is not None and now >= run.deadline):
            why = event.reason if event.final else f"no capacity in time ({event.reason})"
            return abort(run, now, why, page=False)
        nxt = replace(run, next_at=now + run.settings.lease_retry_interval)
        if event.reason != run.lease_note:
            nxt = replace(nxt, lease_note=event.reason)
            return nxt, [Record("lease_waiting", f"waiting: {event.reason}")]
        return nxt, []
    if isinstance(event, Resumed) or (isinstance(event, Tick) and due(run, now)):
        return replace(run, next_at=None), [AcquireLease()]
    return run, []


def on_unrouting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, UnrouteResult) and awaited(run, event.worker, WorkerPhase.UNROUTING):
        if event.error is not None:
            run = set_worker(run, event.worker, detail=event.error)
            run = add_evidence(run, f"taking {event.worker} out of rotation failed: {event.error}")
            return rollback(run, now, f"could not take {event.worker} out of rotation", page=True)
        run = set_worker(run, event.worker, phase=WorkerPhase.UNROUTED)
        cmds: list[Command] = [Record("worker_unrouted", f"{event.worker} out of rotation")]
        if all_in(run, WorkerPhase.UNROUTED):
            return after(cmds, _after_unrouted(run, now))
        return run, cmds
    return reissued(run, event, Unroute, WorkerPhase.UNROUTING)


def on_balancer_wait(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, Tick | Resumed) and due(run, now):
        return _start_quiescing(run, now)
    return run, []


def on_quiescing(run: Run, event: Event, now: float) -> Step:
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
        run = set_worker(run, event.worker, idle_reads=reads, in_flight=in_flight, detail=detail)
        cmds: list[Command] = []
        if reads >= s.idle_reads:
            cmds.append(Record("worker_idle", f"{event.worker} idle ({detail})"))
        if not _quiesce_pending(run):
            return after(
                cmds, _start_stopping(run, now, Record("drained_gracefully", "every worker idle"))
            )
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
            line = f"drain timed out after {s.drain_timeout:g}s; still busy: {name_list(busy)}"
            run = add_evidence(run, line)
            if s.on_drain_timeout == "abort" and run.plan is Plan.RESET:
                return rollback(run, now, line, page=True)
            if run.plan is Plan.PROACTIVE:  # never stop a busy worker for a check-up
                return rollback(run, now, f"proactive validation abandoned: {line}", page=False)
            return _start_stopping(
                run, now, Record("drain_timeout", f"{line}; proceeding", severity="warning")
            )
        if isinstance(event, Resumed) or due(run, now):
            run = replace(run, next_at=None)
            return run, [ReadLoad(n) for n in _quiesce_pending(run)]
    return run, []


def on_stopping(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, StopResult) and awaited(run, event.worker, WorkerPhase.STOPPING):
        run, cmds = worker_outcome(
            run,
            event,
            done=(
                WorkerPhase.STOPPED,
                "worker_stopped",
                f"{event.worker}: {event.note}" if event.note else f"{event.worker} stopped",
            ),
            failed=(
                WorkerPhase.STOP_FAILED,
                "worker_stop_failed",
                f"{event.worker}: {event.error}",
            ),
            evidence=f"stopping {event.worker} failed: {event.error}",
        )
        if all_in(run, WorkerPhase.STOPPED, WorkerPhase.STOP_FAILED):
            return after(cmds, _after_stopped(run, now))
        return run, cmds
    return reissued(run, event, StopUnit, WorkerPhase.STOPPING)


def on_release_check(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, ProcessResult):
        if event.error is None and not event.holders:
            if run.plan is Plan.PROACTIVE:  # no reset: the ladder on the free GPUs
                return start_validating(replace(run, next_at=None), now)
            return replace(run, next_at=None), [CaptureBaseline()]
        what = event.error or f"still on the GPUs: {', '.join(event.holders)}"
        if run.deadline is not None and now >= run.deadline:
            if run.plan is Plan.PROACTIVE:  # a check-up never quarantines for a busy GPU
                return abandon(run, Abandon(f"GPUs not free: {what}"), now)
            run = add_evidence(run, f"reset refused: {what}")
            return quarantine(run, now, f"reset refused, {what}")
        return replace(run, next_at=now + s.release_poll_interval, last_problems=(what,)), []
    if isinstance(event, BaselineResult):
        # journaled with the reset intent, so a crash inside the reset cannot lose it
        if event.error is not None:
            run = add_evidence(run, f"no pre-reset baseline: {event.error}")
        else:
            counts = ", ".join(f"GPU {g}: {c:g}" for g, c in event.ue_counts) or "none reported"
            run = add_evidence(run, f"uncorrectable errors before the reset: {counts}")
        run = replace(run, ue_baseline=event.ue_counts, ce_baseline=event.ce_counts)
        if evidence.wanted(run):  # the state the reset destroys, kept first
            return evidence.start_capture(run, "pre_reset", now)
        return start_reset(run, now)
    if isinstance(event, EvidenceResult):
        if not evidence.expected(run, event):
            return run, []
        run, cmds = evidence.taken(run, event)
        return after(cmds, start_reset(run, now))
    if run.capturing:  # a capture under way: only its outcome or a restart moves the run
        if isinstance(event, Resumed):
            run, cmds = evidence.resumed(run)
            return (run, cmds) if run.capturing else after(cmds, start_reset(run, now))
        return run, []
    if isinstance(event, Resumed) or (isinstance(event, Tick) and due(run, now)):
        return replace(run, next_at=None), [CheckProcesses()]
    return run, []
