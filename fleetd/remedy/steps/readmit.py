"""Readmission: start the workers, wait until each serves, put them back into rotation."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import (
    CheckReady,
    Command,
    Event,
    ReadyResult,
    Record,
    Reroute,
    RerouteResult,
    Resumed,
    StartResult,
    StartUnit,
    Tick,
)
from fleetd.remedy.run import Run, RunState, ValidatorOutcome, WorkerPhase, due
from fleetd.remedy.steps.common import (
    Step,
    add_evidence,
    after,
    all_in,
    awaited,
    enter,
    name_list,
    reissued,
    set_worker,
    worker_outcome,
    workers_in,
)
from fleetd.remedy.steps.terminal import finish, quarantine
from fleetd.remedy.validators import INFERENCE


def start_readmitting(run: Run, now: float) -> Step:
    targets = workers_in(
        run,
        WorkerPhase.STOPPED,
        WorkerPhase.STOP_FAILED,
        WorkerPhase.STARTING,
        WorkerPhase.UNROUTED,
        WorkerPhase.SERVING,
    )
    if not run.workers:
        return finish(run, now)
    run = enter(run, RunState.STARTING, now)
    for name in targets:
        run = set_worker(run, name, phase=WorkerPhase.STARTING, detail=None)
    cmds: list[Command] = [Record("readmitting", f"starting workers: {name_list(targets)}")]
    cmds += [StartUnit(name) for name in targets]
    if not targets:
        return after(cmds, _start_await_ready(run, now))
    return run, cmds


def on_starting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, StartResult) and awaited(run, event.worker, WorkerPhase.STARTING):
        run, cmds = worker_outcome(
            run,
            event,
            done=(WorkerPhase.STARTED, "worker_started", f"{event.worker} started"),
            failed=(WorkerPhase.FAILED, "worker_start_failed", f"{event.worker}: {event.error}"),
            evidence=f"starting {event.worker} failed: {event.error}",
        )
        if not workers_in(run, WorkerPhase.STARTING):
            return after(cmds, _start_await_ready(run, now))
        return run, cmds
    return reissued(run, event, StartUnit, WorkerPhase.STARTING)


def _start_await_ready(run: Run, now: float) -> Step:
    deadline = now + run.settings.ready_timeout
    run = enter(run, RunState.AWAIT_READY, now, deadline=deadline)
    pending = workers_in(run, WorkerPhase.STARTED)
    if not pending:
        return _conclude_readmission(run, now)
    return run, [CheckReady(n) for n in pending]


def _below_baseline(run: Run, event: ReadyResult, now: float) -> Step:
    """Serving, but the probe fell short of the baseline: held out, and the run will page
    with the figures (a GPU whose clocks stay latched low after the reset)."""
    text = f"{event.worker}: {event.benchmark}"
    run = set_worker(run, event.worker, phase=WorkerPhase.FAILED, detail=event.benchmark)
    run = add_evidence(run, f"benchmark {text}")
    cmds: list[Command] = [Record("worker_below_baseline", text, severity="warning")]
    if all_in(run, WorkerPhase.REROUTED, WorkerPhase.FAILED):
        return after(cmds, _conclude_readmission(run, now))
    return run, cmds


def _inference_verdict(run: Run, event: ReadyResult, now: float) -> tuple[Run, ReadyResult]:
    """The ladder's inference rung on one worker: the probe's verdict is the validator's. A
    probe that did not run (the gate off, no baseline) is no validation: it fails, like any
    required validator that cannot give a verdict."""
    word = event.benchmark
    if not word or word.startswith("benchmark skipped"):
        why = word or "the benchmark gate (vllm.benchmark) is off"
        word = f"benchmark probe failed: the inference validator could not run ({why})"
        event = replace(event, benchmark=word, below_baseline=True)
    outcome = ValidatorOutcome(
        name=INFERENCE,
        kind=INFERENCE,
        ok=not event.below_baseline,
        summary=word,
        started_at=now,
        target=event.worker,
    )
    return replace(run, validation=(*run.validation, outcome)), event


def _conclude_readmission(run: Run, now: float) -> Step:
    failed = workers_in(run, WorkerPhase.FAILED)
    slow = [w for w in run.workers if w.name in failed and _is_slow(w.detail)]
    if slow:
        figures = "; ".join(f"{w.name} {w.detail}" for w in slow)
        rest = [n for n in failed if n not in {w.name for w in slow}]
        more = f"; workers did not come back: {name_list(rest)}" if rest else ""
        return quarantine(run, now, f"benchmark after the reset: {figures}{more}")
    if failed:
        details = [f"{w.name}: {w.detail or 'not ready'}" for w in run.workers if w.name in failed]
        run = add_evidence(run, *details)
        return quarantine(run, now, f"workers did not come back: {name_list(failed)}")
    return finish(run, now)


def on_await_ready(run: Run, event: Event, now: float) -> Step:
    s = run.settings
    if isinstance(event, ReadyResult) and awaited(run, event.worker, WorkerPhase.STARTED):
        if not event.ready:
            run = set_worker(run, event.worker, detail=event.detail)
            if run.next_at is None:
                run = replace(run, next_at=now + s.ready_poll_interval)
            return run, []
        if INFERENCE in run.settings.validators:
            run, event = _inference_verdict(run, event, now)
        if event.below_baseline:
            return _below_baseline(run, event, now)
        run = set_worker(run, event.worker, phase=WorkerPhase.READY, detail=event.detail)
        cmds: list[Command] = [
            Record("worker_ready", f"{event.worker} healthy {event.detail}".strip())
        ]
        if event.benchmark:
            cmds.append(Record("worker_benchmark", f"{event.worker}: {event.benchmark}"))
        return run, [*cmds, Reroute(event.worker)]
    if isinstance(event, RerouteResult) and awaited(run, event.worker, WorkerPhase.READY):
        run, cmds = worker_outcome(
            run,
            event,
            done=(WorkerPhase.REROUTED, "worker_rerouted", f"{event.worker} back in rotation"),
            failed=(
                WorkerPhase.FAILED,
                "worker_reroute_failed",
                f"putting {event.worker} back into rotation failed: {event.error}",
            ),
        )
        if all_in(run, WorkerPhase.REROUTED, WorkerPhase.FAILED):
            return after(cmds, _conclude_readmission(run, now))
        return run, cmds
    if isinstance(event, Tick | Resumed):
        if run.deadline is not None and now >= run.deadline:
            late = workers_in(run, WorkerPhase.STARTED)
            for name in late:
                w = run.worker(name)
                why = f"not ready after {s.ready_timeout:g}s" + (
                    f" ({w.detail})" if w is not None and w.detail else ""
                )
                run = set_worker(run, name, phase=WorkerPhase.FAILED, detail=why)
            if not workers_in(run, WorkerPhase.READY):
                return _conclude_readmission(run, now)
            return run, [Reroute(n) for n in workers_in(run, WorkerPhase.READY)]
        if isinstance(event, Resumed) or due(run, now):
            run = replace(run, next_at=None)
            cmds2: list[Command] = [CheckReady(n) for n in workers_in(run, WorkerPhase.STARTED)]
            cmds2 += [Reroute(n) for n in workers_in(run, WorkerPhase.READY)]
            return run, cmds2
    return run, []


def _is_slow(detail: str | None) -> bool:
    return bool(detail) and str(detail).startswith(("below baseline", "benchmark probe failed"))
