"""The steady clock: wall time at start, then monotonic time, slewing towards wall steps.

FakeSystemClock stands in for the real clocks: ``advance`` moves wall and monotonic time
together, ``step`` moves the wall clock alone, as NTP or ``date -s`` do.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetd.clock import SLEW_RATE, STEP_LIMIT_S, FakeSystemClock, SteadyClock

HOUR = 3600.0
START = 1_767_225_600.0


@pytest.fixture
def base() -> FakeSystemClock:
    return FakeSystemClock(START)


def test_it_starts_at_the_wall_clock_and_runs_on_the_monotonic_one(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    assert steady.now() == START
    base.advance(12.5)
    assert steady.now() == START + 12.5
    assert steady.monotonic() == base.monotonic()


def test_a_backward_step_is_not_taken_but_slewed_away(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    base.advance(60)
    base.step(-HOUR)
    assert steady.now() == START + 60  # nothing happens before a check...
    check = steady.check()
    assert steady.now() == START + 60  # ...nor at one: time goes on from where it was
    assert check.step == -HOUR and check.offset == -HOUR and not check.reanchored
    assert check.catch_up_s == pytest.approx(HOUR / SLEW_RATE)
    base.advance(100)  # slower by SLEW_RATE while it catches up with the wall clock
    assert steady.now() == pytest.approx(START + 60 + 100 * (1 - SLEW_RATE))
    assert steady.offset() == pytest.approx(-HOUR + 100 * SLEW_RATE)
    base.advance(HOUR / SLEW_RATE)  # caught up: on the wall clock again, at full speed
    assert steady.now() == pytest.approx(base.now())
    base.advance(10)
    assert steady.now() == pytest.approx(base.now())
    assert steady.offset() == pytest.approx(0.0, abs=1e-5)
    assert (steady.steps, steady.reanchors) == (1, 0)


def test_a_forward_step_is_slewed_by_running_faster(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    base.step(HOUR)
    assert steady.check().offset == HOUR
    base.advance(100)
    assert steady.now() == pytest.approx(START + 100 * (1 + SLEW_RATE))


def test_a_step_put_back_before_it_is_caught_up_leaves_a_small_offset(
    base: FakeSystemClock,
) -> None:
    steady = SteadyClock(base)
    base.step(-HOUR)
    steady.check()
    base.advance(20)
    base.step(HOUR)
    check = steady.check()
    assert check.step == HOUR
    assert check.offset == pytest.approx(20 * SLEW_RATE)  # what the slew had done meanwhile
    assert steady.steps == 2


def test_without_checks_it_never_follows_the_wall_clock(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    base.step(-HOUR)
    base.advance(10 * HOUR)
    assert steady.now() == START + 10 * HOUR


def test_jitter_is_followed_without_counting_a_step(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    base.step(0.2)
    check = steady.check()
    assert check.step == 0.0 and check.offset == pytest.approx(0.2)
    assert steady.steps == 0


def test_a_clock_that_was_never_set_is_re_anchored_once(base: FakeSystemClock) -> None:
    """A boot at 1970 corrected by NTP years later: slewing would take decades."""
    early = FakeSystemClock(86_400.0)
    steady = SteadyClock(early)
    early.step(START)
    check = steady.check()
    assert check.reanchored and check.offset == 0.0
    assert steady.now() == early.now() and steady.reanchors == 1
    # a step within the limit is slewed as usual
    early.step(-(STEP_LIMIT_S - 1))
    assert not steady.check().reanchored


def test_the_rate_must_be_a_fraction() -> None:
    with pytest.raises(ValueError):
        SteadyClock(FakeSystemClock(), slew_rate=1.5)


moves = st.lists(
    st.tuples(
        st.floats(0.0, 7200.0),  # monotonic seconds to advance
        st.floats(-HOUR, HOUR),  # then a wall-clock step (20 of them stay below the limit)
        st.booleans(),  # and a check or not
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(moves)
def test_durations_stay_within_the_slew_rate_whatever_the_wall_clock_does(
    sequence: list[tuple[float, float, bool]],
) -> None:
    """The guarantee every ``for``, deadline and timer relies on: between any two readings
    ``now`` moved forward, by the monotonic time elapsed give or take SLEW_RATE."""
    base = FakeSystemClock(START)
    steady = SteadyClock(base)
    last_now, last_mono = steady.now(), base.monotonic()
    for advance, step, check in sequence:
        base.advance(advance)
        base.step(step)
        if check:
            steady.check()
        now, mono = steady.now(), base.monotonic()
        elapsed = mono - last_mono
        assert now >= last_now
        assert (1 - SLEW_RATE) * elapsed - 1e-5 <= now - last_now
        assert now - last_now <= (1 + SLEW_RATE) * elapsed + 1e-5
        last_now, last_mono = now, mono
    # and once the wall clock stays put long enough, it is caught up
    steady.check()
    base.advance(abs(steady.offset()) / SLEW_RATE + 1)
    assert steady.now() == pytest.approx(base.now(), abs=1e-3)


def test_a_restart_resumes_from_the_last_stored_time_and_slews_back(
    base: FakeSystemClock,
) -> None:
    """The wall clock went back an hour while fleetd was down: it carries on from where
    the last run left off, then closes the gap like a step seen while running."""
    steady = SteadyClock(base)
    last = START + HOUR  # what the previous run stamped last
    assert steady.resume(last) == HOUR
    assert steady.now() == last
    check = steady.check()
    assert check.offset == -HOUR and check.step == 0.0 and not check.reanchored
    base.advance(100)
    assert steady.now() == pytest.approx(last + 100 * (1 - SLEW_RATE))


def test_resume_never_moves_the_clock_back_nor_a_day_ahead(base: FakeSystemClock) -> None:
    steady = SteadyClock(base)
    assert steady.resume(START - 60) == 0.0  # the clock is past it already
    assert steady.resume(START + STEP_LIMIT_S + 1) == 0.0  # stamped by a clock far off
    assert steady.now() == START
