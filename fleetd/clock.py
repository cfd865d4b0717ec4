"""Time as an argument: the Clock protocol, the real clocks, and fakes for tests.

Only the daemon's wiring holds a real clock; every piece of logic takes ``now`` (Unix
seconds, float) as a parameter, so tests advance a FakeClock instead of sleeping.

``fleetd run`` uses a SteadyClock: the wall clock can be stepped (NTP, ``date -s``) and every
duration fleetd derives from ``now`` (rule ``for``, group timers, remediation deadlines, data
age) would jump with it. The steady clock starts at the wall time and then runs on the
monotonic clock, following later wall-clock changes only by a bounded slew.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """Where the daemon gets the time from."""

    def now(self) -> float:
        """Wall-clock time in Unix seconds."""
        ...

    def monotonic(self) -> float:
        """A clock that never goes backwards, for measuring durations."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a fake clock advances instead."""
        ...


class SystemClock:
    """The real clock. Only daemon wiring should construct one."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to; ``sleep`` advances it at once."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        return self.now()

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError("a clock never goes backwards")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> None:
        """Jump to ``when``; must not be earlier than the current time."""
        with self._lock:
            if when < self._now:
                raise ValueError("a clock never goes backwards")
            self._now = float(when)


SLEW_RATE = 0.05
"""How fast the steady clock closes a gap to the wall clock: 50 ms per second. A duration
measured on it while it slews is off by 5 % at most; a 1 h step is absorbed in 20 h."""
STEP_LIMIT_S = 86_400.0
"""A gap larger than this (a clock that was never set: 1970, an RTC reset) is not slewed
(that would take years): the steady clock re-anchors to the wall clock in one step."""
STEP_DETECT_S = 0.5
"""A change of wall minus monotonic time larger than this counts as a wall-clock step."""


@dataclass(frozen=True)
class ClockCheck:
    """What one ``SteadyClock.check`` found."""

    offset: float
    """Wall clock minus the steady clock after the check (positive: the steady clock is
    behind and speeds up; negative: it is ahead and slows down)."""
    step: float
    """How far the wall clock moved against the monotonic clock since the last check (0.0
    when it did not step)."""
    reanchored: bool
    """The gap was beyond STEP_LIMIT_S and the steady clock jumped to the wall clock."""
    catch_up_s: float
    """Seconds until the slew has closed the gap (if the wall clock steps no more)."""


class SteadyClock:
    """Wall time at start plus monotonic time since: ``now`` never steps with the wall clock.

    ``check`` (the daemon calls it every second) compares with the wall clock. A gap is
    closed by running at 1 ± SLEW_RATE against the monotonic clock, so ``now`` stays
    continuous and strictly increasing and every duration measured on it stays within
    SLEW_RATE of the truth; only a gap beyond STEP_LIMIT_S re-anchors (one jump, reported).
    Without checks it never follows the wall clock at all. Thread-safe.
    """

    def __init__(
        self,
        base: Clock | None = None,
        *,
        slew_rate: float = SLEW_RATE,
        step_limit: float = STEP_LIMIT_S,
    ) -> None:
        if not 0 < slew_rate < 1:
            raise ValueError("slew_rate must be between 0 and 1")
        self._base: Clock = base or SystemClock()
        self._rate = slew_rate
        self._limit = step_limit
        self._lock = threading.Lock()
        mono = self._base.monotonic()
        # now() = monotonic + offset, the offset moving from _ref_offset (at _ref_mono)
        # towards _target (wall minus monotonic at the last check) at _rate per second
        self._target = self._base.now() - mono
        self._ref_offset = self._target
        self._ref_mono = mono
        self.steps = 0
        self.reanchors = 0

    def _offset_at(self, mono: float) -> float:
        gap = self._target - self._ref_offset
        moved = self._rate * max(0.0, mono - self._ref_mono)
        if moved >= abs(gap):
            return self._target
        return self._ref_offset + math.copysign(moved, gap)

    def now(self) -> float:
        with self._lock:  # read inside: a check in between must not see an older reading
            mono = self._base.monotonic()
            return mono + self._offset_at(mono)

    def monotonic(self) -> float:
        return self._base.monotonic()

    def sleep(self, seconds: float) -> None:
        self._base.sleep(seconds)

    def offset(self) -> float:
        """Wall clock minus ``now`` as of the last check."""
        with self._lock:
            return self._target - self._offset_at(self._base.monotonic())

    def resume(self, floor: float) -> float:
        """Never start behind ``floor`` (the last time a previous run stamped): a restart
        after a backward wall-clock step must not act as that step (stored samples ahead of
        the new ones, timers and deadlines stretched). Up to STEP_LIMIT_S ahead, ``now``
        moves forward to ``floor`` and then slews back to the wall clock like any step;
        further (a clock that was wrong then), it stays on the wall clock. Call it once,
        before anything is measured. Returns how far ``now`` moved (0.0: not at all)."""
        with self._lock:
            mono = self._base.monotonic()
            current = self._offset_at(mono)
            gap = floor - (mono + current)
            if gap <= 0 or gap > self._limit:
                return 0.0
            self._ref_mono, self._ref_offset = mono, current + gap
            return gap

    def check(self) -> ClockCheck:
        """Compare with the wall clock; start slewing towards it (or re-anchor)."""
        with self._lock:
            mono = self._base.monotonic()
            target = self._base.now() - mono
            current = self._offset_at(mono)
            step = target - self._target
            if abs(step) < STEP_DETECT_S:
                step = 0.0
            else:
                self.steps += 1
            reanchored = abs(target - current) > self._limit
            if reanchored:
                current = target
                self.reanchors += 1
            self._ref_mono, self._ref_offset, self._target = mono, current, target
            gap = target - current
            return ClockCheck(gap, step, reanchored, abs(gap) / self._rate)


class FakeSystemClock:
    """A fake of the real clocks for SteadyClock's tests: ``advance`` moves both, ``step``
    moves the wall clock alone, either way (what NTP or ``date -s`` does)."""

    def __init__(self, start: float = 1_767_225_600.0, monotonic: float = 1_000.0) -> None:
        self._wall = float(start)
        self._mono = float(monotonic)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time never goes backwards")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

    def step(self, seconds: float) -> None:
        with self._lock:
            self._wall += seconds


class ScaledClock:
    """Real time sped up by ``speed`` from the moment it is created (``fleetd demo --speed``).

    The whole daemon runs on it, so rule durations, group waits and remediation timeouts all
    stay consistent while a five-minute scenario plays in one minute.
    """

    def __init__(self, speed: float, *, base: SystemClock | None = None) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self._base = base or SystemClock()
        self._speed = speed
        self._wall0 = self._base.now()
        self._mono0 = self._base.monotonic()

    def now(self) -> float:
        return self._wall0 + (self._base.monotonic() - self._mono0) * self._speed

    def monotonic(self) -> float:
        return self._mono0 + (self._base.monotonic() - self._mono0) * self._speed

    def sleep(self, seconds: float) -> None:
        self._base.sleep(seconds / self._speed)
