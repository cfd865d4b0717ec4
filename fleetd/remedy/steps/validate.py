"""The validation ladder: after verification (and the burn-in), before the workers start,
each command validator of the run's ladder runs in order; the first that fails quarantines
the unit with its output in the run's evidence (and so in the quarantine bundle and page).

The validator under way is in the run, journaled before it starts: a restart during it runs
it again as the next attempt — a required validator is never skipped — and gives up after
``MAX_ATTEMPTS`` (a validator that keeps taking the daemon down fails). The built-in
``inference`` probe is the ladder's last rung; it runs in readmission, once the workers
serve and before they go back into rotation (``steps.readmit``).
"""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import (
    Abandon,
    Event,
    Record,
    Resumed,
    RunValidator,
    ValidatorResult,
)
from fleetd.remedy.run import Run, RunState, ValidatorOutcome
from fleetd.remedy.steps.common import Step, add_evidence, after, enter
from fleetd.remedy.steps.readmit import start_readmitting
from fleetd.remedy.steps.terminal import abort, quarantine, rollback
from fleetd.remedy.validators import INFERENCE

MAX_ATTEMPTS = 2
OUTPUT_LINES_IN_PAGE = 8


def command_ladder(run: Run) -> tuple[str, ...]:
    """The run's command validators, in order (the inference probe runs in readmission)."""
    return tuple(name for name in run.settings.validators if name != INFERENCE)


def passed(run: Run) -> set[str]:
    return {o.name for o in run.validation if o.ok and not o.target}


def next_validator(run: Run) -> str | None:
    done = passed(run)
    for name in command_ladder(run):
        if name not in done:
            return name
    return None


def start_validating(run: Run, now: float) -> Step:
    """Run the ladder's first validator not yet passed, or go on to readmission."""
    name = next_validator(run)
    if name is None:
        if command_ladder(run) and run.validated_at is None:
            run = replace(run, validated_at=now)
        return start_readmitting(run, now)
    ladder = command_ladder(run)
    run = enter(run, RunState.VALIDATING, now, validating=name, validate_attempt=1)
    note = Record(
        "validating",
        f"validator {name} ({ladder.index(name) + 1} of {len(ladder)}) on GPUs "
        f"{','.join(str(g) for g in run.verify_gpus)}",
    )
    return run, [note, RunValidator(name, 1)]


def on_validating(run: Run, event: Event, now: float) -> Step:
    if isinstance(event, ValidatorResult):
        if (event.name, event.attempt) != (run.validating, run.validate_attempt):
            return run, []  # a late answer of an attempt already given up
        return _verdict(run, event, now)
    if isinstance(event, Resumed):
        if not run.validating:  # between two validators: carry on
            return start_validating(run, now)
        if run.validate_attempt >= MAX_ATTEMPTS:
            result = ValidatorResult(
                run.validating,
                run.validate_attempt,
                False,
                f"interrupted by a restart {run.validate_attempt} times: not validated",
                kind="interrupted",
            )
            return _verdict(run, result, now)
        attempt = run.validate_attempt + 1
        run = replace(run, validate_attempt=attempt, entered_at=now)
        note = Record(
            "validator_resumed",
            f"validator {run.validating} interrupted by a restart; running it again "
            f"(attempt {attempt})",
            severity="warning",
        )
        return run, [note, RunValidator(run.validating, attempt)]
    return run, []


def _verdict(run: Run, event: ValidatorResult, now: float) -> Step:
    keep = event.output
    outcome = ValidatorOutcome(
        name=event.name,
        kind=event.kind,
        ok=event.ok,
        summary=event.summary,
        attempt=event.attempt,
        started_at=run.entered_at,
        duration=event.duration,
        exit_code=event.exit_code,
        timed_out=event.timed_out,
        output=keep,
    )
    run = replace(run, validation=(*run.validation, outcome), validating="", validate_attempt=0)
    if not event.ok:
        lines = [f"validator {event.name} failed: {event.summary}"]
        shown = [ln for ln in keep.splitlines() if ln.strip()][-OUTPUT_LINES_IN_PAGE:]
        if shown:
            lines.append(f"validator {event.name} output (end): " + " | ".join(shown))
        run = add_evidence(run, *lines)
        note = Record(
            "validator_failed",
            f"validator {event.name} failed: {event.summary}",
            severity="warning",
            evidence=tuple(lines),
        )
        return after(
            [note], quarantine(run, now, f"validator {event.name} failed: {event.summary}")
        )
    note = Record(
        "validator_passed",
        f"validator {event.name} passed ({event.duration:.1f}s): {event.summary}",
    )
    return after([note], start_validating(run, now))


# ------------------------------------------------------------------ proactive validation
_TAKING_OUT = frozenset({RunState.UNROUTING, RunState.BALANCER_WAIT, RunState.QUIESCING})
_OUT = frozenset({RunState.STOPPING, RunState.RELEASE_CHECK, RunState.VALIDATING})


def abandon(run: Run, event: Abandon, now: float) -> Step:
    """Give a proactive validation up at once: workers still being taken out go back into
    rotation, stopped ones are started again (without the inference probe: nothing was
    found), and the run ends ``aborted`` with its GPUs in service — never quarantined."""
    if run.abandoned or run.state in (RunState.STARTING, RunState.AWAIT_READY):
        return run, [Record("abandon_noted", f"{event.why} (already re-admitting)")]
    if run.state is RunState.ROLLING_BACK:
        return run, [Record("abandon_noted", f"{event.why} (already rolling back)")]
    why = f"proactive validation abandoned: {event.why}"
    if run.state is RunState.PLANNED:
        return abort(run, now, why, page=False)
    if run.state in _TAKING_OUT:
        return rollback(run, now, why, page=False)
    if run.state in _OUT:
        settings = replace(run.settings, validators=())
        run = replace(run, abandoned=event.why, settings=settings, validating="")
        note = Record("abandoned", f"{why}; re-admitting the workers now", severity="warning")
        return after([note], start_readmitting(run, now))
    return run, [Record("abandon_noted", f"{event.why} (nothing to give up in {run.state})")]
