"""Every "the poll is late" judgement in one place.

Four parts of fleetd decide, each for its own reason, that polls stopped arriving on time.
Their margins differ on purpose; written side by side the differences are deliberate and
visible instead of four formulas in four files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PollTiming:
    """The poll interval and per-GPU timeout (``poll:``) and the rules' ``stale_polls``."""

    interval_s: float
    gpu_timeout_s: float = 0.0
    stale_polls: int = 3

    @property
    def stale_after_s(self) -> float:
        """A reading older than this is no longer the current value (rules, API data age):
        ``stale_polls`` polls and a half, so one late poll never blanks a series."""
        return (self.stale_polls + 0.5) * self.interval_s

    @property
    def late_margin_s(self) -> float:
        """How late a sample may arrive and still be counted by the rules' range functions:
        a slow poll (two intervals) plus 5 s of scheduling slack."""
        return 5.0 + 2 * self.interval_s

    @property
    def watchdog_after_s(self) -> float:
        """Stop pinging systemd's watchdog once the last poll is older than this: one poll
        may run late by its whole GPU timeout, a second missing one means the loop is stuck."""
        return 2 * self.interval_s + self.gpu_timeout_s

    @property
    def healthz_after_s(self) -> float:
        """``/healthz`` says ``stalled`` past this: one interval more than the watchdog, so a
        load balancer never drops a node that systemd still considers alive."""
        return 3 * self.interval_s + self.gpu_timeout_s
