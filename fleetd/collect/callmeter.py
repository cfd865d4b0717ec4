"""The amdsmi module seen through a meter: every call counted by function, with its time.

On a real node the amdsmi Python wrapper's own work (ctypes structures turned into dicts) is
a large share of fleetd's CPU, so the number of calls is what sets the cost
(docs/performance.md, "Cost model"). ``AmdSmiBackend`` wraps the module it is given in a
``MeteredAmdSmi``, so every caller that goes through the backend (collectors, discovery,
remediation, the CPER reader) is counted; ``readings`` turns the totals into the
``fleetd_amdsmi_calls_total`` and ``fleetd_amdsmi_call_seconds_total`` self-metrics.
Calls made by an ``AmdSmiEventReader`` object (``read``) are not module functions and are
not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from fleetd.model import Reading

CALLS = "fleetd_amdsmi_calls_total"
SECONDS = "fleetd_amdsmi_call_seconds_total"
PREFIX = "amdsmi_"


class MeteredAmdSmi:
    """Stands in for the amdsmi module; ``amdsmi_*`` functions are counted and timed.

    Everything else (enums, exception classes, ``AmdSmiEventReader``, ``__version__``,
    submodules) is the module's own attribute, unchanged. The function is looked up on the
    module at each call, so a module patched later is still the one called.
    """

    def __init__(self, module: Any, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self._module = module
        self._timer = timer
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self._seconds: dict[str, float] = {}
        self._wrapped: dict[str, Callable[..., Any]] = {}

    @property
    def module(self) -> Any:
        """The module being metered."""
        return self._module

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        if wrapped is not None:
            return wrapped
        target = getattr(self._module, name)
        if not (name.startswith(PREFIX) and callable(target) and not isinstance(target, type)):
            return target
        wrapped = self._meter(name)
        self._wrapped[name] = wrapped
        # found by plain attribute lookup from now on: __getattr__ runs only after a failed
        # lookup, and that costs an AttributeError on every call
        self.__dict__[name] = wrapped
        return wrapped

    def _meter(self, name: str) -> Callable[..., Any]:
        module, timer = self._module, self._timer

        def call(*args: Any, **kwargs: Any) -> Any:
            start = timer()
            try:
                return getattr(module, name)(*args, **kwargs)
            finally:
                spent = timer() - start
                with self._lock:
                    self._calls[name] = self._calls.get(name, 0) + 1
                    self._seconds[name] = self._seconds.get(name, 0.0) + spent

        call.__name__ = name
        return call

    def totals(self) -> dict[str, tuple[int, float]]:
        """function → (calls, seconds) since start, failed calls included."""
        with self._lock:
            return {name: (count, self._seconds[name]) for name, count in self._calls.items()}

    def readings(self, now: float) -> list[Reading]:
        """The counters as self-metric readings, one series per function called so far."""
        out: list[Reading] = []
        for name, (count, seconds) in sorted(self.totals().items()):
            labels = (("function", name),)
            out.append(Reading(CALLS, labels, float(count), now))
            out.append(Reading(SECONDS, labels, seconds, now))
        return out
