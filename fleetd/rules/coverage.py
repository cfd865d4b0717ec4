"""Blind spots: the rules whose GPU inputs this node never provides, so they can never fire.

A rule on XGMI error status where the library cannot read it (MI300X, MI355X), or on a
reading the SKU or driver does not support, is silent for good, and silence looks like
health. ``InputCoverage`` remembers every GPU metric that has carried a real value (readings
that are missing do not count) and, for a rule set, lists the rules with a GPU input that
never did. Only amdsmi's readings are judged: a vLLM or fleetd input depends on the
configuration, not on the hardware. A rule reading a metric fleetd never writes at all
(``fleetd.collect.catalog.SERIES_NAMES``: a misspelled name) is blind everywhere, from the
first poll on. The daemon feeds it every poll and scrape and exports
``fleetd_rule_inputs_supported{rule}``; ``FleetdRuleBlindSpots`` (rules/fleetd.yaml) turns
it into one info alert; ``fleetd doctor`` and ``fleetctl explain`` list the rules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from fleetd.collect.catalog import SERIES_NAMES
from fleetd.model import Labels, Reading, make_labels
from fleetd.rules.ast import metrics_used
from fleetd.rules.loader import RuleSet

SUPPORTED_METRIC = "fleetd_rule_inputs_supported"


@dataclass(frozen=True, slots=True)
class BlindSpot:
    rule: str
    missing: tuple[str, ...]  # input metrics never seen with a value on this node
    unwritten: tuple[str, ...] = ()  # those of them fleetd never writes on any node

    def describe(self) -> str:
        provided = [m for m in self.missing if m not in self.unwritten]
        parts = [f"fleetd never writes {', '.join(self.unwritten)}"] if self.unwritten else []
        if provided:
            parts.append(f"{', '.join(provided)} never provided")
        where = "" if self.unwritten else " here"
        return f"{self.rule} can never fire{where}: {'; '.join(parts)}"


class InputCoverage:
    """Which GPU metrics this node has provided with a value since the daemon started.

    ``judged``: the metric names whose absence is a blind spot (the GPU catalog's);
    ``written``: every name fleetd writes (a rule on any other can never fire anywhere)."""

    def __init__(
        self, judged: Iterable[str], *, min_polls: int = 3, written: Iterable[str] = SERIES_NAMES
    ) -> None:
        """Nothing is judged before ``min_polls`` polls: some readings are rates of two
        polls (throttle residency), some come at a slower cadence. Names fleetd never
        writes need no poll to be judged."""
        self._judged = frozenset(judged)
        self._written = frozenset(written) | self._judged  # a judged name is one fleetd writes
        self._min_polls = min_polls
        self._seen: set[str] = set()
        self._polls = 0
        self._lock = threading.Lock()
        self._blind: tuple[RuleSet, frozenset[str] | None, tuple[BlindSpot, ...]] | None = None

    def observe(self, readings: Iterable[Reading]) -> None:
        """Note the metrics of ``readings`` that carry a value (called on every poll)."""
        names = {r.metric for r in readings if r.value is not None and r.metric in self._judged}
        with self._lock:
            self._seen |= names
            self._polls += 1

    @property
    def observed(self) -> bool:
        """Whether enough polls were seen to judge."""
        return self._polls >= self._min_polls

    def blind_spots(self, rules: RuleSet) -> list[BlindSpot]:
        """The rules with an input never provided here, in rule order: those reading a
        metric fleetd never writes at once, those with a GPU input never seen only once the
        coverage has seen enough polls to judge."""
        observed = self.observed
        with self._lock:
            seen = frozenset(self._seen) if observed else None
        cached = self._blind
        if cached is not None and cached[0] is rules and cached[1] == seen:
            return list(cached[2])  # asked every tick; it changes only with the rules or seen
        out = []
        for rule in rules.rules:
            used = metrics_used(rule.expr)
            unwritten = used - self._written
            never = (used & self._judged) - seen if seen is not None else set()
            if unwritten or never:
                out.append(
                    BlindSpot(rule.name, tuple(sorted(never | unwritten)), tuple(sorted(unwritten)))
                )
        self._blind = (rules, seen, tuple(out))
        return out

    def readings(self, rules: RuleSet, now: float) -> list[Reading]:
        """``fleetd_rule_inputs_supported{rule}``: 1 when every input has been provided."""
        if not self.observed:
            return []
        blind = {b.rule for b in self.blind_spots(rules)}
        return [
            Reading(SUPPORTED_METRIC, rule_labels(rule.name), float(rule.name not in blind), now)
            for rule in rules.rules
        ]


@lru_cache(maxsize=4096)
def rule_labels(rule: str) -> Labels:
    """``{rule="..."}``: the labels of a per-rule series, built once a rule name."""
    return make_labels({"rule": rule})
