"""When to re-enumerate the GPUs (amdsmi shut-down + init), between polls.

Real amdsmi lists devices only at init and never answers NOT_FOUND for a GPU that fell off
the bus, so a fresh enumeration (with the PCI sysfs check each poll) is how a lost GPU is
noticed: soon while one looks gone, and periodically regardless.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.serial import SerialPoller
from fleetd.logs import get_logger

log = get_logger("collect.rediscovery")

REDISCOVER_INTERVAL_S = 30.0
"""At most this often while a GPU is missing or suspected gone."""
REDISCOVER_PERIOD_S = 60.0
"""This often even when every GPU looks present."""


class Rediscovery:
    """Re-enumerates at most every REDISCOVER_INTERVAL_S while a GPU is missing or suspected
    gone, and every REDISCOVER_PERIOD_S regardless — but not while ``busy`` (a remediation
    run rediscovers itself after its reset) nor while a hung call is inside amdsmi."""

    def __init__(
        self, backend: AmdSmiBackend, poller: SerialPoller, busy: Callable[[], bool]
    ) -> None:
        self._backend = backend
        self._poller = poller
        self._busy = busy
        self._last = 0.0
        self._period_start: float | None = None

    @property
    def last_at(self) -> float:
        """When the GPUs were last re-enumerated here (0 before the first time)."""
        return self._last

    def maybe(self, now: float) -> None:
        backend = self._backend
        if self._period_start is None:
            self._period_start = now
        wanted = backend.rediscovery_wanted or not all(
            backend.present(g.index) for g in backend.gpus()
        )
        busy = self._poller.busy() or self._busy()
        periodic = now - self._period_start >= REDISCOVER_PERIOD_S and not busy
        if not periodic and not (wanted and now - self._last >= REDISCOVER_INTERVAL_S):
            return
        self._last = self._period_start = now
        before = sum(1 for g in backend.gpus() if backend.present(g.index))
        found = self._poller.rediscover(backend)
        after = sum(1 for g in found if backend.present(g.index))
        level = log.warning if after < before else log.info
        level("gpus_rediscovered", gpus=len(found), present=after, present_before=before)
