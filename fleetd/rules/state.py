"""The alert state machine: a pure function of the previous state, what was observed, and now.

    inactive ──match──► pending ──held for `for`──► firing ──no match──► resolved
        ▲                  │ no match                 │ (after keep_firing_for)   │
        └──────────────────┴──────────────────────────┴───── retention over ◄────┘

Beyond Prometheus' machine, an observation can be *no data* (the inputs behind this alert are
stale or missing). No data never resolves an alert and never counts towards ``for``: a firing
alert stays firing, marked with ``no_data_since`` (health shows the GPU as *unknown*, not
unhealthy and not healthy), and only after ``no_data_hold`` without data does it resolve,
saying why. ``restore`` applies the same thinking to a daemon restart.

A firing alert can also be *held* open by the remediation run it started: the fault is being
worked on, so its incident stays open until the run concludes, whatever a reset does to the
counters meanwhile. A held alert whose condition no longer holds is marked like one kept by
``keep_firing_for`` (``keep_firing_since``: when its condition was last seen clear), which is
what remediation's verification reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from fleetd.configbase import format_duration
from fleetd.model import Alert, AlertKey, AlertState, Transition

NO_DATA_REASON = "resolved_reason"


@dataclass(frozen=True, slots=True)
class Timing:
    """The durations that drive one rule's alerts."""

    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    no_data_hold_s: float = 3600.0
    resolved_retention_s: float = 900.0


@dataclass(frozen=True, slots=True)
class AlertEntry:
    """An alert plus what only the engine needs: since when its data has been missing."""

    alert: Alert
    no_data_since: float | None = None

    @property
    def state(self) -> AlertState:
        return self.alert.state


@dataclass(frozen=True, slots=True)
class StateChanges:
    """Alert state to persist since the last save: rows to write and rows to delete."""

    upserts: tuple[AlertEntry, ...] = ()
    deletes: tuple[AlertKey, ...] = ()
    last_eval_at: float | None = None


def merge_changes(pending: Iterable[StateChanges]) -> StateChanges:
    """Several saves that could not be written, as one: per alert the latest write or
    delete wins, and the latest evaluation time. A storage outage of N polls then costs
    one transaction when it ends, not N."""
    latest: dict[AlertKey, AlertEntry | None] = {}
    last_eval_at: float | None = None
    for changes in pending:
        for key in changes.deletes:
            latest[key] = None
        for entry in changes.upserts:
            latest[entry.alert.key] = entry
        if changes.last_eval_at is not None:
            last_eval_at = changes.last_eval_at
    upserts = tuple(entry for entry in latest.values() if entry is not None)
    deletes = tuple(key for key, entry in latest.items() if entry is None)
    return StateChanges(upserts, deletes, last_eval_at)


class Observation(NamedTuple):
    """What one evaluation saw for one label set.

    ``matched`` is True (condition holds), False (data present, condition false) or None (no
    data). ``current`` is the alert as it would look now (labels, annotations rendered with
    the current value); it is required when ``matched`` is True.
    """

    matched: bool | None
    current: Alert | None = None


class StepResult(NamedTuple):
    entry: AlertEntry | None  # None: nothing to remember (inactive)
    transition: Transition | None


def step(
    timing: Timing,
    previous: AlertEntry | None,
    seen: Observation,
    now: float,
    *,
    held: bool = False,
) -> StepResult:
    """Advance one alert by one evaluation at ``now``. Pure: no clock, no I/O.

    ``held``: a remediation run started by this alert is under way; a firing alert then
    neither resolves (its condition clearing is recorded in ``keep_firing_since``) nor times
    out without data.
    """
    state = previous.state if previous is not None else AlertState.INACTIVE
    if held and previous is not None and state == AlertState.FIRING and not seen.matched:
        return _held(previous, seen.matched, now)
    if seen.matched is None:
        return _no_data(timing, previous, now)
    if previous is not None and previous.no_data_since is not None:
        previous = _data_returned(previous, now)
    if seen.matched:
        assert seen.current is not None, "a matching observation carries the current alert"
        return _matched(timing, previous, seen.current, state, now)
    return _not_matched(timing, previous, state, now)


def _held(previous: AlertEntry, matched: bool | None, now: float) -> StepResult:
    """Keep a firing alert open for its run; note when its condition was seen clear."""
    old = previous.alert
    if matched is None:
        since = previous.no_data_since if previous.no_data_since is not None else now
        return StepResult(AlertEntry(replace(old, last_eval_at=now), no_data_since=since), None)
    clear_since = old.keep_firing_since if old.keep_firing_since is not None else now
    return StepResult(
        AlertEntry(replace(old, keep_firing_since=clear_since, last_eval_at=now)), None
    )


def _matched(
    timing: Timing, previous: AlertEntry | None, current: Alert, state: AlertState, now: float
) -> StepResult:
    if previous is None or state in (AlertState.INACTIVE, AlertState.RESOLVED):
        new = replace(
            current,
            state=AlertState.PENDING,
            active_at=now,
            fired_at=None,
            resolved_at=None,
            keep_firing_since=None,
            last_eval_at=now,
        )
        if timing.for_s <= 0:
            new = replace(new, state=AlertState.FIRING, fired_at=now)
        return StepResult(AlertEntry(new), Transition(new, state, new.state, now))
    old = previous.alert
    updated = replace(
        old,
        labels=current.labels,
        annotations=current.annotations,
        value=current.value,
        severity=current.severity,
        remediation_plan=current.remediation_plan,
        keep_firing_since=None,
        last_eval_at=now,
    )
    if state == AlertState.PENDING:
        active_at = old.active_at if old.active_at is not None else now
        if now - active_at >= timing.for_s:
            fired = replace(updated, state=AlertState.FIRING, fired_at=now)
            return StepResult(
                AlertEntry(fired), Transition(fired, AlertState.PENDING, AlertState.FIRING, now)
            )
    return StepResult(AlertEntry(updated), None)


def _not_matched(
    timing: Timing, previous: AlertEntry | None, state: AlertState, now: float
) -> StepResult:
    if previous is None or state == AlertState.INACTIVE:
        return StepResult(None, None)
    old = previous.alert
    if state == AlertState.PENDING:
        return _forget_pending(old, now)
    if state == AlertState.FIRING:
        if timing.keep_firing_for_s > 0:
            since = old.keep_firing_since if old.keep_firing_since is not None else now
            if now - since < timing.keep_firing_for_s:
                held = replace(old, keep_firing_since=since, last_eval_at=now)
                return StepResult(AlertEntry(held), None)
        return _resolve(old, now, reason=None)
    return _retain(previous, timing, now)


def _no_data(timing: Timing, previous: AlertEntry | None, now: float) -> StepResult:
    if previous is None or previous.state == AlertState.INACTIVE:
        return StepResult(None, None)
    if previous.state == AlertState.RESOLVED:
        return _retain(previous, timing, now)
    since = previous.no_data_since if previous.no_data_since is not None else now
    if now - since >= timing.no_data_hold_s:
        old = previous.alert
        if previous.state == AlertState.PENDING:
            return _forget_pending(old, now)
        reason = f"no data for {format_duration(now - since)}; resolved without evidence"
        return _resolve(old, now, reason=reason)
    held = replace(previous.alert, last_eval_at=now)
    return StepResult(AlertEntry(held, no_data_since=since), None)


def _data_returned(previous: AlertEntry, now: float) -> AlertEntry:
    """Time without data does not count towards ``for``: a pending alert's clock shifts."""
    alert = previous.alert
    assert previous.no_data_since is not None
    if alert.state == AlertState.PENDING and alert.active_at is not None:
        alert = replace(alert, active_at=alert.active_at + (now - previous.no_data_since))
    return AlertEntry(alert)


def _forget_pending(old: Alert, now: float) -> StepResult:
    """A pending alert that never fired is dropped, with its transition to inactive."""
    gone = replace(old, state=AlertState.INACTIVE, last_eval_at=now)
    return StepResult(None, Transition(gone, AlertState.PENDING, AlertState.INACTIVE, now))


def _resolve(old: Alert, now: float, reason: str | None) -> StepResult:
    annotations = old.annotations
    if reason is not None:
        annotations = tuple(sorted({**dict(annotations), NO_DATA_REASON: reason}.items()))
    resolved = replace(
        old,
        state=AlertState.RESOLVED,
        resolved_at=now,
        keep_firing_since=None,
        last_eval_at=now,
        annotations=annotations,
    )
    return StepResult(
        AlertEntry(resolved), Transition(resolved, AlertState.FIRING, AlertState.RESOLVED, now)
    )


def _retain(previous: AlertEntry, timing: Timing, now: float) -> StepResult:
    """Resolved alerts stay visible for a while (API, re-sends), then are forgotten quietly."""
    resolved_at = previous.alert.resolved_at
    if resolved_at is None or now - resolved_at >= timing.resolved_retention_s:
        return StepResult(None, None)
    return StepResult(previous, None)


# ---------------------------------------------------------------------------------- restart
def restore(
    entries: Iterable[AlertEntry],
    *,
    last_eval_at: float | None,
    now: float,
    for_of: dict[str, float],
    outage_tolerance_s: float,
    for_grace_period_s: float,
    resolved_retention_s: float,
) -> list[AlertEntry]:
    """Alert state to resume with after a restart at ``now``.

    1. Firing alerts stay firing, whatever the outage: a restart neither re-pages them (no
       new transition) nor forgets them; the next evaluation resolves them only on evidence.
    2. Pending alerts keep their progress towards ``for``, minus the time the daemon was down
       (unobserved time proves nothing). A rule whose ``for`` is longer than
       ``for_grace_period`` keeps at least that much to go, so that a restart does not fire
       everything at once (as Prometheus does). After an outage longer than
       ``outage_tolerance`` their progress is stale and they start over.
    3. Resolved alerts are kept for what is left of their retention.
    Alerts of rules that no longer exist are dropped (``for_of`` lists the current rules).
    """
    down_since = last_eval_at
    restored: list[AlertEntry] = []
    for entry in entries:
        alert = entry.alert
        rule_for = for_of.get(alert.key.rule)
        if rule_for is None and alert.state != AlertState.FIRING:
            continue
        if alert.state == AlertState.FIRING:
            restored.append(entry)
        elif alert.state == AlertState.PENDING and alert.active_at is not None:
            stopped = down_since if down_since is not None else alert.last_eval_at
            if stopped is None or now - stopped > outage_tolerance_s:
                continue
            assert rule_for is not None
            spent = max(0.0, stopped - alert.active_at)
            remaining = rule_for - spent
            if rule_for > for_grace_period_s and remaining < for_grace_period_s:
                remaining = for_grace_period_s
            active_at = now - (rule_for - remaining)
            restored.append(AlertEntry(replace(alert, active_at=active_at), None))
        elif (
            alert.state == AlertState.RESOLVED
            and alert.resolved_at is not None
            and now - alert.resolved_at < resolved_retention_s
        ):
            restored.append(entry)
    return restored
