"""When to try again, and how fast an integration may send.

Backoff is capped exponential with "equal jitter" (half the delay fixed, half random) so
many integrations failing at once do not retry in lockstep; the random source is injected so
tests are exact. The token bucket keeps each integration inside its vendor's rate limit
(PagerDuty: about 120 events a minute per routing key; Slack: about one message a second).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


def backoff_delay(attempts: int, *, initial: float, cap: float, rng: random.Random) -> float:
    """Delay before attempt ``attempts + 1`` after ``attempts`` failures (>= 1)."""
    exponent = min(max(attempts - 1, 0), 60)
    ceiling = min(cap, initial * (2.0**exponent))
    return ceiling / 2 + rng.uniform(0.0, ceiling / 2)


@dataclass
class TokenBucket:
    """``burst`` sends at once, refilled at ``rate`` per second; time is passed in."""

    rate: float
    burst: int
    tokens: float = -1.0
    updated: float | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = float(self.burst)

    def _refill(self, now: float) -> None:
        if self.updated is not None and now > self.updated:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        if self.updated is None or now > self.updated:
            self.updated = now

    def available(self, now: float) -> int:
        self._refill(now)
        return int(self.tokens + 1e-9)

    def take(self, now: float) -> bool:
        """Spend one token if there is one."""
        self._refill(now)
        if self.tokens + 1e-9 >= 1.0:
            self.tokens -= 1.0
            return True
        return False
