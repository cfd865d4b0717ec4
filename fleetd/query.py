"""The read side of stored telemetry: the only view rules, the API and fleetctl have of data.

Implementations: the in-memory recent window (fast, used on every rule evaluation) and the
database store (long ranges, rollups); ``fleetd.store`` provides both behind this protocol.
Counter functions (``increase``, ``rate``) treat any decrease as a counter reset (a GPU
reset or driver reload zeroes ECC and PCIe counters), as Prometheus does.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from fleetd.model import Labels, Sample, SeriesKey

MatchOp = Literal["=", "!=", "=~", "!~"]
WindowFn = Literal["avg", "min", "max", "last", "count", "changes", "increase", "rate", "delta"]
RangeAgg = Literal["last", "first", "avg", "min", "max", "count"]
"""How ``Query.range`` summarises one step bucket."""


@dataclass(frozen=True, slots=True)
class Matcher:
    """A label matcher, as in PromQL: ``gpu="3"``, ``block!="umc"``, ``sensor=~"hot.*"``."""

    name: str
    op: MatchOp
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.op in ("=~", "!~"):
            object.__setattr__(self, "_regex", re.compile(f"(?:{self.value})\\Z"))

    def matches(self, labels: Labels) -> bool:
        actual = ""
        for key, value in labels:
            if key == self.name:
                actual = value
                break
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self._regex is not None
        hit = self._regex.match(actual) is not None
        return hit if self.op == "=~" else not hit


def matches_all(labels: Labels, matchers: Sequence[Matcher]) -> bool:
    return all(m.matches(labels) for m in matchers)


class Query(Protocol):
    """Read access to time series. All times are Unix seconds; ``now`` is always passed in."""

    def series(self, metric: str, matchers: Sequence[Matcher] = ()) -> list[SeriesKey]:
        """Every known series of ``metric`` whose labels satisfy all matchers."""
        ...

    def latest(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        now: float,
        max_age: float | None = None,
    ) -> dict[SeriesKey, Sample]:
        """The newest sample per series at or before ``now`` (and no older than ``max_age``)."""
        ...

    def window(
        self,
        fn: WindowFn,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        window: float,
        now: float,
    ) -> dict[SeriesKey, float]:
        """``fn`` over the samples in ``(now - window, now]`` per series.

        ``increase``/``rate`` are reset-aware; ``rate`` is per second; ``changes`` counts value
        changes. Series with no sample in the window are absent from the result (``increase``
        and ``rate`` need two samples).
        """
        ...

    def range(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        start: float,
        end: float,
        step: float | None = None,
        agg: RangeAgg = "last",
    ) -> dict[SeriesKey, list[Sample]]:
        """Samples in ``[start, end]``; with ``step``, one ``agg`` sample per step bucket
        ``(t - step, t]`` (the store may answer from rollups)."""
        ...


class RangeSpan(NamedTuple):
    """``Query.range``'s arguments after the selector, parsed once."""

    start: float
    end: float
    step: float | None = None
    agg: RangeAgg = "last"


class QueryBase(ABC):
    """``Query``'s keyword signatures, written once for every implementation in the store.

    An implementation answers the positional hooks ``_latest``, ``_window`` and ``_range``;
    the store's composites (``HybridQuery``, ``ResilientStore``) pass the parsed arguments
    straight to their parts' hooks.
    """

    def latest(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        now: float,
        max_age: float | None = None,
    ) -> dict[SeriesKey, Sample]:
        return self._latest(metric, matchers, now, max_age)

    def window(
        self,
        fn: WindowFn,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        window: float,
        now: float,
    ) -> dict[SeriesKey, float]:
        return self._window(fn, metric, matchers, window, now)

    def range(
        self,
        metric: str,
        matchers: Sequence[Matcher] = (),
        *,
        start: float,
        end: float,
        step: float | None = None,
        agg: RangeAgg = "last",
    ) -> dict[SeriesKey, list[Sample]]:
        return self._range(metric, matchers, RangeSpan(start, end, step, agg))

    @abstractmethod
    def _latest(
        self, metric: str, matchers: Sequence[Matcher], now: float, max_age: float | None
    ) -> dict[SeriesKey, Sample]: ...

    @abstractmethod
    def _window(
        self, fn: WindowFn, metric: str, matchers: Sequence[Matcher], window: float, now: float
    ) -> dict[SeriesKey, float]: ...

    @abstractmethod
    def _range(
        self, metric: str, matchers: Sequence[Matcher], span: RangeSpan
    ) -> dict[SeriesKey, list[Sample]]: ...
