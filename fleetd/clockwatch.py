"""The daemon's watch over the wall clock: the steady clock slews a step instead of taking
it, resumes from the previous run's last evaluation, and exports the offset between them
(see docs/operations.md, "Time")."""

from __future__ import annotations

from fleetd.clock import SteadyClock
from fleetd.logs import get_logger
from fleetd.model import Reading, make_labels
from fleetd.store.functions import at_ms

log = get_logger("daemon")


def resume_after_restart(clock: SteadyClock, last_eval_at: float, now: float) -> None:
    """Carry on from the previous run's last evaluation: the wall clock may have gone back
    while fleetd was down, and what is stored (samples, timers, deadlines) must not lie ahead
    of the new run (``SteadyClock.resume``)."""
    moved = clock.resume(last_eval_at)
    if moved:
        log.warning(
            "clock_resumed",
            ahead_of_wall_s=round(moved, 3),
            detail="the wall clock is behind the last run's time; slewing back to it",
        )
    elif last_eval_at > now:
        log.warning(
            "stored_time_ahead",
            ahead_s=round(last_eval_at - now, 3),
            detail="stored by a clock over a day ahead; the data are kept as stamped",
        )


def check_clock(clock: SteadyClock) -> list[Reading]:
    """Follow the wall clock (a step is slewed, not taken); the offset and step counters."""
    check = clock.check()
    if check.step:
        log.warning(
            "wall_clock_step",
            step_s=round(check.step, 3),
            offset_s=round(check.offset, 3),
            action="re-anchored to the wall clock" if check.reanchored else "slewing",
            catch_up_s=round(check.catch_up_s),
        )
    now, none = at_ms(clock.now()), make_labels()
    return [
        Reading("fleetd_clock_offset_seconds", none, check.offset, now),
        Reading("fleetd_clock_steps_total", none, float(clock.steps), now),
        Reading("fleetd_clock_reanchors_total", none, float(clock.reanchors), now),
    ]
