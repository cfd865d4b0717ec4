"""Time as an argument: the Clock protocol, the real clock, and a fake one for tests.

Only the daemon's loop holds a SystemClock; every piece of logic takes ``now`` (Unix
seconds, float) as a parameter, so tests advance a FakeClock instead of sleeping.
"""

from __future__ import annotations

import threading
import time
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
