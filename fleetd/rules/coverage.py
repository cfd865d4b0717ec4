"""Blind spots: the rules whose GPU inputs this node never provides, so they can never fire.

A rule on XGMI error status where the library cannot read it (MI300X, MI355X), or on a
reading the SKU or driver does not support, is silent for good, and silence looks like
health. ``InputCoverage`` remembers every GPU metric that has carried a real value (readings
that are missing do not count) and, for a rule set, lists the rules with a GPU input that
never did. Only amdsmi's readings are judged: a vLLM or fleetd input depends on the
configuration, not on the hardware. The daemon feeds it every poll and scrape and exports
``fleetd_rule_inputs_supported{rule}``; ``FleetdRuleBlindSpots`` (rules/fleetd.yaml) turns
it into one info alert; ``fleetd doctor`` and ``fleetctl explain`` list the rules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from fleetd.model import Labels, Reading, make_labels
from fleetd.rules.ast import metrics_used
from fleetd.rules.loader import RuleSet

SUPPORTED_METRIC = "fleetd_rule_inputs_supported"


@dataclass(frozen=True, slots=True)
class BlindSpot:
    rule: str
    missing: tuple[str, ...]  # input metrics never seen with a value on this node

    def describe(self) -> str:
        return f"{self.rule} can never fire here: {', '.join(self.missing)} never provided"


class InputCoverage:
    """Which GPU metrics this node has provided with a value since the daemon started.

    ``judged``: the metric names whose absence is a blind spot (the GPU catalog's)."""

    def __init__(self, judged: Iterable[str], *, min_polls: int = 3) -> None:
        """Nothing is judged before ``min_polls`` polls: some readings are rates of two
        polls (throttle residency), some come at a slower cadence."""
        self._judged = frozenset(judged)
        self._min_polls = min_polls
        self._seen: set[str] = set()
        self._polls = 0
        self._lock = threading.Lock()
        self._blind: tuple[RuleSet, frozenset[str], tuple[BlindSpot, ...]] | None = None

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
        """The rules with an input never provided here, in rule order (none before the
        coverage has seen enough polls to judge)."""
        if not self.observed:
            return []
        with self._lock:
            seen = frozenset(self._seen)
        cached = self._blind
        if cached is not None and cached[0] is rules and cached[1] == seen:
            return list(cached[2])  # asked every tick; it changes only with the rules or seen
        out = []
        for rule in rules.rules:
            missing = tuple(sorted((metrics_used(rule.expr) & self._judged) - seen))
            if missing:
                out.append(BlindSpot(rule.name, missing))
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
