"""When to try again, and how fast an integration may send.

Backoff is capped exponential with "equal jitter" (half the delay fixed, half random) so
many integrations failing at once do not retry in lockstep; the random source is injected so
tests are exact. The token bucket keeps each integration inside its vendor's rate limit
(PagerDuty: about 120 events a minute per routing key; Slack: one message a second).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


def backoff_delay(attempts: int, *, initial: float, cap: float, rng: random.Random) -> float:
    """Delay before attempt ``attempts + 1`` after ``attempts`` failures (>= 1)."""
    exponent = min(max(attempts - 1, 0), 60)
    ceiling = min(cap, initial * (2.0**exponent))
    return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


RECOVERY_SECONDS = 10.0  # after a 429 the bucket's pace climbs back to its rate over this
MIN_PACE = 1 / 32


@dataclass
class TokenBucket:
    """``burst`` sends at once, refilled at ``rate`` per second; time is passed in.

    A receiver's 429 (``hold``) empties the bucket until its Retry-After and halves the pace;
    the pace then climbs back to the full rate over ``RECOVERY_SECONDS``. A receiver whose
    real limit is below ``rate`` (an account-wide limit, a shared key) thus sees the sends
    slow down instead of one 429 every time a slot frees.
    """

    rate: float
    burst: int
    tokens: float = -1.0
    updated: float | None = None
    held_until: float | None = None
    pace: float = 1.0  # fraction of ``rate`` in use: 1 until a receiver says 429

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = float(self.burst)

    def _refill(self, now: float) -> None:
        if self.held_until is not None:
            if now < self.held_until:
                return
            self.tokens, self.updated, self.held_until = 1.0, self.held_until, None
        if self.updated is not None and now > self.updated:
            elapsed = now - self.updated
            rate = self.rate * self.pace
            self.tokens = min(float(self.burst), self.tokens + elapsed * rate)
            self.pace = min(1.0, self.pace + elapsed / RECOVERY_SECONDS)
        if self.updated is None or now > self.updated:
            self.updated = now

    def available(self, now: float) -> int:
        self._refill(now)
        return int(self.tokens + 1e-9)

    def hold(self, until: float) -> None:
        """Empty until ``until`` (a receiver's Retry-After), then one token, then half the
        pace: what a pause saves up is not spent in a burst that would be limited again."""
        self.tokens = 0.0
        self.held_until = until
        self.pace = max(MIN_PACE, self.pace / 2)

    def take(self, now: float) -> bool:
        """Spend one token if there is one."""
        self._refill(now)
        if self.tokens + 1e-9 >= 1.0:
            self.tokens -= 1.0
            return True
        return False
