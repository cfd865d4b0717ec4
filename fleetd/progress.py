"""What systemd hears of the poll loop: READY=1 once the first poll is done, STATUS= after
each, and WATCHDOG=1 only while polls keep finishing on time (``PollTiming``), so a hung
loop stops the pings and systemd restarts the daemon."""

from __future__ import annotations

from fleetd.clock import Clock
from fleetd.polltiming import PollTiming
from fleetd.sdnotify import SystemdNotify, watchdog_interval


class PollProgress:
    """When the last poll finished, on the monotonic clock, and what systemd was told."""

    def __init__(self, notifier: SystemdNotify, clock: Clock) -> None:
        self._notifier = notifier
        self._clock = clock
        self._done: float | None = None  # clock.monotonic() when a poll finished
        self._ready_sent = False

    def age(self) -> float | None:
        """Seconds since the last poll finished (never negative, and no wall-clock step
        makes a stale poll look fresh); None before the first."""
        done = self._done
        return None if done is None else max(0.0, self._clock.monotonic() - done)

    def poll_done(self, summary: str) -> None:
        """A poll finished: READY=1 the first time, STATUS= after, and a watchdog ping."""
        self._done = self._clock.monotonic()
        if not self._ready_sent:
            self._notifier.ready(summary)
            self._ready_sent = True
        else:
            self._notifier.status(summary)
        if watchdog_interval() is not None:
            self._notifier.watchdog()

    def watchdog(self, timing: PollTiming) -> None:
        """WATCHDOG=1 between polls, while the last one is no older than the timing allows."""
        age = self.age()
        if age is not None and age <= timing.watchdog_after_s:
            self._notifier.watchdog()
