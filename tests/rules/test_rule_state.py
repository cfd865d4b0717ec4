"""The alert state machine, tick by tick on a fake clock, and its restart rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleetd.clock import FakeClock
from fleetd.model import Alert, AlertKey, AlertState, Severity, make_labels
from fleetd.rules.state import (
    AlertEntry,
    Observation,
    StateChanges,
    Timing,
    merge_changes,
    restore,
    step,
)

KEY = AlertKey("GpuHot", make_labels({"gpu": "3"}))
P, F, R, I = AlertState.PENDING, AlertState.FIRING, AlertState.RESOLVED, AlertState.INACTIVE  # noqa: E741


def current(value: float = 99.0) -> Alert:
    return Alert(
        KEY, I, Severity.WARNING, make_labels({"alertname": "GpuHot", "gpu": "3"}), value=value
    )


class Machine:
    """Drives one alert through ``step`` on a fake clock and records what happened."""

    def __init__(self, timing: Timing, clock: FakeClock) -> None:
        self.timing = timing
        self.clock = clock
        self.entry: AlertEntry | None = None
        self.transitions: list[tuple[AlertState, AlertState, float]] = []

    def tick(
        self,
        matched: bool | None,
        *,
        advance: float = 10.0,
        value: float = 99.0,
        held: bool = False,
    ) -> AlertState:
        now = self.clock.advance(advance)
        seen = Observation(matched, current(value) if matched else None)
        result = step(self.timing, self.entry, seen, now, held=held)
        self.entry = result.entry
        if result.transition is not None:
            t = result.transition
            assert t.at == now and t.alert.state == t.current
            self.transitions.append((t.previous, t.current, now - START))
        return self.state

    @property
    def state(self) -> AlertState:
        return I if self.entry is None else self.entry.state


START = 1_767_225_600.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def test_pending_then_firing_exactly_when_for_has_elapsed(clock: FakeClock) -> None:
    m = Machine(Timing(for_s=30.0), clock)
    assert [m.tick(True) for _ in range(4)] == [P, P, P, F]  # t = 10, 20, 30, 40
    assert m.transitions == [(I, P, 10.0), (P, F, 40.0)]
    assert m.entry is not None
    assert m.entry.alert.active_at == START + 10 and m.entry.alert.fired_at == START + 40


def test_without_for_it_fires_on_the_first_match(clock: FakeClock) -> None:
    m = Machine(Timing(), clock)
    assert m.tick(True) == F
    assert m.transitions == [(I, F, 10.0)]


def test_pending_that_stops_matching_goes_away(clock: FakeClock) -> None:
    m = Machine(Timing(for_s=60.0), clock)
    m.tick(True)
    m.tick(True)
    assert m.tick(False) == I
    assert m.entry is None
    assert m.transitions == [(I, P, 10.0), (P, I, 30.0)]
    # a new match starts the clock again
    m.tick(True)
    assert m.entry is not None and m.entry.alert.active_at == START + 40


def test_firing_resolves_when_the_condition_stops(clock: FakeClock) -> None:
    m = Machine(Timing(), clock)
    m.tick(True, value=97)
    m.tick(True, value=98)
    assert m.entry is not None and m.entry.alert.value == 98
    assert m.tick(False) == R
    assert m.entry is not None and m.entry.alert.resolved_at == START + 30
    assert m.transitions[-1] == (F, R, 30.0)


def test_keep_firing_for_holds_through_short_gaps(clock: FakeClock) -> None:
    m = Machine(Timing(keep_firing_for_s=25.0), clock)
    m.tick(True)  # 10: firing
    assert [m.tick(False), m.tick(False)] == [F, F]  # 20, 30: held (since 20)
    assert m.tick(True) == F  # 40: matched again, the hold is cleared
    assert m.entry is not None and m.entry.alert.keep_firing_since is None
    held = [m.tick(False) for _ in range(4)]  # 50 (hold starts), 60, 70 held; 80 is 30 s ≥ 25
    assert held == [F, F, F, R]
    assert m.transitions == [(I, F, 10.0), (F, R, 80.0)]


def test_keep_firing_for_boundary_is_exact(clock: FakeClock) -> None:
    m = Machine(Timing(keep_firing_for_s=20.0), clock)
    m.tick(True)  # 10
    m.tick(False)  # 20: hold starts
    m.tick(False, advance=19.0)  # 39: 19 s held
    assert m.state == F
    m.tick(False, advance=1.0)  # 40: 20 s held → resolved
    assert m.state == R
    assert m.transitions[-1] == (F, R, 40.0)


def test_resolved_alerts_are_kept_for_the_retention_then_forgotten_quietly(
    clock: FakeClock,
) -> None:
    m = Machine(Timing(resolved_retention_s=60.0), clock)
    m.tick(True)
    m.tick(False)  # resolved at 20
    assert m.tick(False, advance=59.0) == R
    assert m.tick(False, advance=1.0) == I
    assert m.transitions == [(I, F, 10.0), (F, R, 20.0)]


def test_a_match_during_retention_starts_a_new_episode(clock: FakeClock) -> None:
    m = Machine(Timing(for_s=10.0), clock)
    m.tick(True)
    m.tick(True)  # firing at 20
    m.tick(False)  # resolved at 30
    assert m.tick(True) == P  # 40
    assert m.transitions[-1] == (R, P, 40.0)
    assert m.entry is not None
    alert = m.entry.alert
    assert alert.active_at == START + 40 and alert.fired_at is None and alert.resolved_at is None


class TestNoData:
    def test_a_firing_alert_without_data_is_held_not_resolved(self, clock: FakeClock) -> None:
        m = Machine(Timing(no_data_hold_s=100.0), clock)
        m.tick(True)
        assert [m.tick(None) for _ in range(5)] == [F] * 5
        assert m.transitions == [(I, F, 10.0)]
        assert m.entry is not None and m.entry.no_data_since == START + 20

    def test_data_back_and_false_resolves_normally(self, clock: FakeClock) -> None:
        m = Machine(Timing(no_data_hold_s=100.0), clock)
        m.tick(True)
        m.tick(None)
        assert m.tick(False) == R
        assert m.entry is not None and m.entry.no_data_since is None

    def test_data_back_and_true_clears_the_mark(self, clock: FakeClock) -> None:
        m = Machine(Timing(no_data_hold_s=100.0), clock)
        m.tick(True)
        m.tick(None)
        assert m.tick(True) == F
        assert m.entry is not None and m.entry.no_data_since is None

    def test_after_the_hold_it_resolves_and_says_why(self, clock: FakeClock) -> None:
        m = Machine(Timing(no_data_hold_s=30.0), clock)
        m.tick(True)
        assert [m.tick(None), m.tick(None), m.tick(None)] == [F, F, F]  # 20 (since), 30, 40
        assert m.tick(None) == R  # 50: 30 s without data
        assert m.entry is not None
        reason = dict(m.entry.alert.annotations)["resolved_reason"]
        assert reason.startswith("no data for 30s")

    def test_time_without_data_does_not_count_towards_for(self, clock: FakeClock) -> None:
        m = Machine(Timing(for_s=30.0, no_data_hold_s=1000.0), clock)
        m.tick(True)  # 10: pending
        m.tick(None)  # 20: no data (since 20)
        m.tick(None)  # 30
        m.tick(None)  # 40
        assert m.tick(True) == P  # 50: 30 s of which 30 unobserved → active_at moves to 40
        assert m.entry is not None and m.entry.alert.active_at == START + 40
        assert m.tick(True) == P  # 60: 20 s observed
        assert m.tick(True) == F  # 70: 30 s observed

    def test_no_data_never_creates_an_alert(self, clock: FakeClock) -> None:
        m = Machine(Timing(), clock)
        assert m.tick(None) == I and m.transitions == []

    def test_a_pending_alert_without_data_for_the_hold_is_dropped(self, clock: FakeClock) -> None:
        m = Machine(Timing(for_s=1000.0, no_data_hold_s=20.0), clock)
        m.tick(True)
        m.tick(None)
        m.tick(None)
        assert m.tick(None) == I
        assert m.transitions[-1] == (P, I, 40.0)


class TestRestore:
    def entry(self, state: AlertState, **fields: object) -> AlertEntry:
        return AlertEntry(replace(current(), state=state, **fields))  # type: ignore[arg-type]

    def test_firing_alerts_survive_any_outage(self) -> None:
        firing = self.entry(F, active_at=START, fired_at=START + 60, last_eval_at=START + 100)
        kept = restore(
            [firing],
            last_eval_at=START + 100,
            now=START + 10 * 86400,
            for_of={"GpuHot": 60.0},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        assert kept == [firing]

    def test_pending_progress_is_kept_minus_the_downtime(self) -> None:
        pending = self.entry(P, active_at=START, last_eval_at=START + 200)
        kept = restore(
            [pending],
            last_eval_at=START + 200,
            now=START + 500,
            for_of={"GpuHot": 600.0},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        # 200 s of 600 were seen before the restart; 400 remain from now
        assert kept[0].alert.active_at == START + 500 - 200

    def test_pending_gets_a_grace_period_so_a_restart_does_not_fire_everything(self) -> None:
        pending = self.entry(P, active_at=START, last_eval_at=START + 590)
        kept = restore(
            [pending],
            last_eval_at=START + 590,
            now=START + 700,
            for_of={"GpuHot": 600.0},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        # only 10 s were left, the grace period gives 60: it fires 60 s after the restart
        assert kept[0].alert.active_at == START + 700 - 540

    def test_pending_after_a_long_outage_starts_over(self) -> None:
        pending = self.entry(P, active_at=START, last_eval_at=START + 100)
        kept = restore(
            [pending],
            last_eval_at=START + 100,
            now=START + 100 + 3601,
            for_of={"GpuHot": 600.0},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        assert kept == []

    def test_resolved_alerts_keep_what_is_left_of_their_retention(self) -> None:
        recent = self.entry(R, resolved_at=START + 100)
        old = AlertEntry(
            replace(
                recent.alert, key=AlertKey("GpuHot", make_labels({"gpu": "4"})), resolved_at=START
            )
        )
        kept = restore(
            [recent, old],
            last_eval_at=START + 100,
            now=START + 950,
            for_of={"GpuHot": 0.0},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        assert kept == [recent]

    def test_alerts_of_removed_rules_are_dropped_unless_firing(self) -> None:
        firing = self.entry(F, active_at=START, fired_at=START)
        pending = AlertEntry(
            replace(firing.alert, state=P, key=AlertKey("GpuHot", make_labels({"gpu": "5"})))
        )
        kept = restore(
            [firing, pending],
            last_eval_at=START,
            now=START + 10,
            for_of={},
            outage_tolerance_s=3600,
            for_grace_period_s=60,
            resolved_retention_s=900,
        )
        assert kept == [firing]  # the engine then resolves it, saying the rule is gone


def test_unsaved_changes_merge_into_one_save() -> None:
    """Saves that failed during a storage outage are written as one: last word per alert."""
    a = AlertEntry(current())
    other_key = AlertKey("Other", make_labels({"gpu": "1"}))
    b = AlertEntry(replace(current(), key=other_key))
    firing = AlertEntry(replace(current(), state=AlertState.FIRING))
    merged = merge_changes(
        [
            StateChanges(upserts=(a, b), last_eval_at=10.0),
            StateChanges(deletes=(a.alert.key,), last_eval_at=15.0),
            StateChanges(upserts=(firing,), last_eval_at=20.0),
            StateChanges(deletes=(other_key,), last_eval_at=None),
        ]
    )
    assert merged.upserts == (firing,)
    assert merged.deletes == (other_key,)
    assert merged.last_eval_at == 20.0
    assert merge_changes([]) == StateChanges()


# ---------------------------------------------------------------------- held by remediation
def test_a_held_alert_stays_firing_until_its_run_lets_go() -> None:
    m = Machine(Timing(), FakeClock(START))
    assert m.tick(True) == F
    assert m.tick(False, held=True) == F  # the reset zeroed the counter: condition clear
    assert m.entry is not None and m.entry.alert.keep_firing_since == START + 20
    assert m.tick(False, held=True) == F
    assert m.entry is not None and m.entry.alert.keep_firing_since == START + 20
    assert m.tick(False) == R  # the run concluded: the incident resolves now
    assert m.transitions == [(I, F, 10.0), (F, R, 40.0)]


def test_a_held_alert_whose_condition_returns_is_marked_holding_again() -> None:
    m = Machine(Timing(), FakeClock(START))
    m.tick(True)
    m.tick(False, held=True)
    assert m.tick(True, held=True) == F
    assert m.entry is not None and m.entry.alert.keep_firing_since is None


def test_a_held_alert_never_times_out_without_data() -> None:
    m = Machine(Timing(no_data_hold_s=15.0), FakeClock(START))
    m.tick(True)
    for _ in range(5):  # the GPU is gone while it resets: no data for 50 s > no_data_hold
        assert m.tick(None, held=True) == F
    assert m.entry is not None and m.entry.no_data_since == START + 20
    assert m.tick(True) == F
    assert m.transitions == [(I, F, 10.0)]


def test_holding_never_fires_an_alert_that_was_not_firing() -> None:
    m = Machine(Timing(for_s=60.0), FakeClock(START))
    assert m.tick(True) == P
    assert m.tick(False, held=True) == I
