"""The reset (once), the reboot rung, and verification with the optional burn-in."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import (
    BurnInResult,
    Command,
    Event,
    EvidenceResult,
    HealthResult,
    PollHealth,
    RebootResult,
    Record,
    Rediscover,
    RediscoverResult,
    RequestReboot,
    ResetGpu,
    ResetResult,
    Resumed,
    RunBurnIn,
    Tick,
)
from fleetd.remedy.run import Run, RunState, WorkerPhase, due
from fleetd.remedy.steps import evidence
from fleetd.remedy.steps.common import (
    Step,
    add_evidence,
    after,
    enter,
    gpu_list,
    gpu_ranges,
    name_list,
    plural,
)
from fleetd.remedy.steps.counters import EFFECT_TEXT, lowest_counts, new_errors, reset_effect
from fleetd.remedy.steps.terminal import quarantine
from fleetd.remedy.steps.validate import start_validating


def start_reset(run: Run, now: float) -> Step:
    if run.reset_count > 0:  # never twice in one run, whatever happened before
        return _start_verifying(run, now, "reset already issued by this run")
    target = run.reset_target
    run = enter(run, RunState.RESETTING, now, reset_count=run.reset_count + 1, reset_at=now)
    return run, [
        Record(
            "reset_intent",
            f"resetting GPU {target} once; the reset reaches GPUs {gpu_list(run)}",
            severity="warning",
        ),
        ResetGpu(target),
    ]


def on_resetting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, ResetResult):
        if event.error is None:
            note = Record(
                "reset_done",
                f"GPU {run.reset_target} reset once; the reset reached GPUs {gpu_list(run)} "
                f"({_drain_report(run)}); verifying",
                severity="warning",
                evidence=evidence.bundle_lines(run),
            )
            return after([note], _start_verifying(run, now, "reset done"))
        run = add_evidence(run, f"reset failed: {event.error}")
        if run.settings.escalate_to_reboot and run.reboot_count == 0:
            return start_reboot(run, now, f"reset failed ({event.error}); escalating to reboot")
        return quarantine(run, now, f"reset failed: {event.error}")
    if isinstance(event, Resumed):
        # The intent is journaled; the reset may have happened. Never issue it again.
        return _start_verifying(
            run, now, "restarted during the reset; verifying instead of resetting again"
        )
    return run, []


def start_reboot(run: Run, now: float, why: str) -> Step:
    if run.reboot_count > 0:
        return quarantine(run, now, "a reboot was already requested by this run")
    deadline = now + run.settings.reboot_timeout
    run = enter(run, RunState.REBOOTING, now, deadline=deadline, reboot_count=run.reboot_count + 1)
    capture: list[Command] = []
    if evidence.wanted(run):  # the failure's state, before the reboot wipes it
        run, capture = evidence.start_capture(run, "failure", now)
    return run, [
        Record("reboot_intent", f"{why}: requesting a node reboot", severity="warning"),
        *capture,
        RequestReboot(),
    ]


def on_rebooting(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, EvidenceResult):
        return evidence.taken(run, event) if evidence.expected(run, event) else (run, [])
    if isinstance(event, Resumed) and run.capturing:  # the reboot came: nothing to capture
        run, cmds = evidence.given_up(run, "interrupted by the restart")
        return after(cmds, on_rebooting(run, event, now))
    if isinstance(event, RebootResult):
        if event.error is not None:
            run = add_evidence(run, f"reboot request failed: {event.error}")
            return quarantine(run, now, f"reboot request failed: {event.error}")
        return run, [Record("reboot_requested", "reboot requested; waiting for the node")]
    if isinstance(event, Resumed):
        return _start_verifying(run, now, "daemon restarted after the reboot request")
    if isinstance(event, Tick) and due(run, now):
        return quarantine(run, now, "reboot requested but the node did not restart in time")
    return run, []


def _start_verifying(run: Run, now: float, why: str) -> Step:
    deadline = now + run.settings.verify_timeout
    run = enter(
        run,
        RunState.VERIFYING,
        now,
        deadline=deadline,
        rediscovered=False,
        healthy_polls=0,
        ue_low=(),
        ce_low=(),
        last_problems=(),
    )
    return run, [Record("verifying", f"{why}; verifying GPUs {gpu_list(run)}"), Rediscover()]


def _verify_failed(run: Run, now: float, why: str) -> Step:
    run = add_evidence(run, f"verification failed: {why}")
    if run.settings.escalate_to_reboot and run.reboot_count == 0:
        return start_reboot(run, now, f"verification failed ({why})")
    return quarantine(run, now, f"verification failed: {why}")


def on_verifying(run: Run, event: Event, now: float) -> Step:
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
        if event.reset_failed:  # the driver says so: no need to wait for the counters
            said = "; ".join(f"GPU {gpu}: {line}" for gpu, line in event.reset_failed)
            return _verify_failed(run, now, f"the driver reports the reset failed ({said})")
        if event.reset_succeeded and not run.reset_confirmed:
            gpus = sorted(gpu for gpu, _line in event.reset_succeeded)
            text = f"GPUs {gpu_ranges(tuple(gpus))}: {event.reset_succeeded[0][1]}"
            run = add_evidence(
                replace(run, reset_confirmed=text), f"the driver confirms the reset ({text})"
            )
        problems = list(event.problems)
        run = replace(
            run,
            ue_low=lowest_counts(run.ue_low, event.ue_counts),
            ce_low=lowest_counts(run.ce_low, event.ce_counts),
        )
        effect = reset_effect(run)
        if effect != "unknown" and effect != run.reset_effect and run.ue_baseline:
            run = add_evidence(
                replace(run, reset_effect=effect),
                f"RAS counters after the reset: {EFFECT_TEXT[effect]}",
            )
        new_ue = new_errors(run, event.ue_counts)
        if new_ue:
            return _verify_failed(run, now, "; ".join(new_ue))
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
            note = Record(
                "verified", f"GPUs {gpu_list(run)} healthy on {plural(polls, 'poll')} in a row"
            )
            if s.burn_in:
                return after([note], _start_burn_in(run, now))
            return after([note], start_validating(run, now))
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
    run = enter(run, RunState.BURN_IN, now)
    return run, [Record("burn_in", "running the burn-in command"), RunBurnIn()]


def on_burn_in(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, BurnInResult):
        if event.error is not None:
            run = add_evidence(run, f"burn-in failed: {event.error} {event.detail}".strip())
            return _verify_failed(run, now, f"burn-in failed: {event.error}")
        note = Record("burn_in_passed", f"burn-in passed {event.detail}".strip())
        return after([note], start_validating(run, now))
    if isinstance(event, Resumed):
        return run, [RunBurnIn()]
    return run, []


def _drain_report(run: Run) -> str:
    """How each worker left service, grouped, for the one message after the reset."""
    stopped = [w.name for w in run.workers if w.phase is WorkerPhase.STOPPED]
    busy = [
        f"{w.name} ({w.in_flight:g} in flight)"
        for w in run.workers
        if w.phase is WorkerPhase.STOPPED and w.in_flight
    ]
    failed = [f"{w.name} ({w.detail})" for w in run.workers if w.phase is WorkerPhase.STOP_FAILED]
    parts = [f"workers stopped: {name_list(stopped)}"] if run.workers else ["no workers"]
    if busy:
        parts.append(f"still busy when stopped: {', '.join(busy)}")
    if failed:
        parts.append(f"stop failed: {', '.join(failed)}")
    return "; ".join(parts)
