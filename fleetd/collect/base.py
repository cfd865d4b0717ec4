"""The collector contract and the small helpers every collector shares.

A collector reads one GPU through a ``GpuSource`` and returns ``Reading``s named after the
catalog. It must not raise for a failing GPU call: each failure becomes one missing reading
(``value=None`` with a reason) and the other readings carry on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from fleetd.collect import parse
from fleetd.collect.source import REASON_ERROR, GpuSource, ReadError
from fleetd.model import GpuIdentity, Labels, Reading

T = TypeVar("T")
P = ParamSpec("P")


class Collector(Protocol):
    """Reads one aspect of one GPU; ``name`` labels its self-metrics.

    A collector may set ``needs_gpu = False`` when it only publishes what is already known
    (identity); the poller then runs it even for a GPU that is hung or gone.
    """

    name: str

    def collect(self, gpu: GpuSource, now: float) -> list[Reading]: ...


def attempt(read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> tuple[T | None, str | None]:
    """Run one raw call: (result, None) or (None, reason). Never raises for the GPU's sake."""
    try:
        return read(*args, **kwargs), None
    except ReadError as exc:
        return None, exc.reason
    except Exception as exc:  # a wrapper bug must cost one reading, not the collector
        return None, f"{REASON_ERROR}:{type(exc).__name__}"


def field(result: object, key: str) -> object:
    """``result[key]`` when result is a dict; None (absent) otherwise."""
    if isinstance(result, dict):
        return result.get(key)
    return None


class Readings:
    """Builds one GPU's readings for one poll with the GPU's ``gpu``/``uuid`` labels."""

    __slots__ = ("_gpu", "items", "ts")

    def __init__(self, gpu: GpuIdentity, ts: float) -> None:
        self._gpu = gpu
        self.ts = ts
        self.items: list[Reading] = []

    def labels(self, extra: tuple[tuple[str, str], ...]) -> Labels:
        return self._gpu.labels_with(extra)

    def add(
        self,
        metric: str,
        value: float | None,
        raw: object = None,
        *,
        reason: str | None = None,
        labels: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """One reading; ``value`` None is missing, because of ``reason`` or of ``raw``."""
        reason = (reason or parse.missing_reason(raw)) if value is None else None
        self.items.append(Reading(metric, self.labels(labels), value, self.ts, reason))

    def missing(
        self, metric: str, reason: str, *, labels: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.items.append(Reading(metric, self.labels(labels), None, self.ts, reason))
