"""The evidence bundle in a run: asked for before the reset and on quarantine, its outcome
recorded (path and sha256 in the journal and the change event), a failure recorded and
never a reason to stop. The capture's phase and attempt are in the run, journaled before the
capture starts: a restart during it takes it again as a new attempt, into a new file, at
most ``MAX_ATTEMPTS`` times in all."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy.messages import CaptureEvidence, Command, EvidenceResult, Record
from fleetd.remedy.run import Bundle, Run
from fleetd.remedy.steps.common import Step, add_evidence

MAX_ATTEMPTS = 2


def wanted(run: Run) -> bool:
    return run.settings.capture_evidence


def start_capture(run: Run, phase: str, now: float) -> Step:
    started = (*run.captures_started, (phase, now))
    run = replace(run, capturing=phase, capture_attempt=1, captures_started=started)
    return run, [CaptureEvidence(phase, 1)]


def expected(run: Run, event: EvidenceResult) -> bool:
    """The outcome of the capture under way (not a late one of an earlier attempt)."""
    return bool(run.capturing) and (event.phase, event.attempt) == (
        run.capturing,
        run.capture_attempt,
    )


def taken(run: Run, event: EvidenceResult) -> Step:
    """Record the capture's outcome and clear the capture under way."""
    run = replace(run, capturing="")
    phase = event.phase.replace("_", "-")
    if event.error is not None:
        line = f"evidence bundle ({phase}) not captured: {event.error}"
        return add_evidence(run, line), [Record("evidence_failed", line, severity="warning")]
    if event.path is None or event.sha256 is None:  # dry-run: nothing written
        line = f"evidence bundle ({phase}): {event.note or 'not written'}"
        return run, [Record("evidence_captured", line)]
    bundle = Bundle(event.phase, event.path, event.sha256, event.size)
    line = f"evidence bundle ({phase}): {event.path} sha256:{event.sha256}"
    cut = f" (cut to fit the size cap: {', '.join(event.cut)})" if event.cut else ""
    run = add_evidence(replace(run, bundles=(*run.bundles, bundle)), line)
    return run, [Record("evidence_captured", f"{line}, {event.size} bytes{cut}", evidence=(line,))]


def given_up(run: Run, why: str) -> Step:
    """The capture under way will not be finished: say so and clear it."""
    line = f"evidence bundle ({run.capturing.replace('_', '-')}) not captured: {why}"
    run = add_evidence(replace(run, capturing=""), line)
    return run, [Record("evidence_failed", line, severity="warning")]


def resumed(run: Run) -> Step:
    """The daemon restarted during the capture: a new attempt into a new file, or give up."""
    phase = run.capturing.replace("_", "-")
    if run.capture_attempt >= MAX_ATTEMPTS:
        return given_up(run, f"interrupted by a restart {run.capture_attempt} times")
    attempt = run.capture_attempt + 1
    run = replace(run, capture_attempt=attempt)
    cmds: list[Command] = [
        Record(
            "evidence_capture_resumed",
            f"evidence capture ({phase}) interrupted by a restart; attempt {attempt} "
            "into a new bundle",
        ),
        CaptureEvidence(run.capturing, attempt),
    ]
    return run, cmds


def bundle_lines(run: Run) -> tuple[str, ...]:
    """Each bundle written so far, as the notifications show it (path and digest)."""
    return tuple(
        f"evidence bundle ({b.phase.replace('_', '-')}): {b.path} sha256:{b.sha256}"
        for b in run.bundles
    )
