"""Helpers for the rules tests: a real MemoryWindow to feed, and rule sets from YAML text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from fleetd.model import Labels, Reading, make_labels
from fleetd.rules.loader import RuleSet, load_rule_set
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
REPO = Path(__file__).resolve().parents[2]

Feed = Callable[[str, dict[str, object], Iterable[tuple[float, float]]], None]
MakeRules = Callable[[str], RuleSet]


def labels(**pairs: object) -> Labels:
    return make_labels(pairs)


@pytest.fixture
def window() -> MemoryWindow:
    return MemoryWindow(retention=7 * 86400)


@pytest.fixture
def feed(window: MemoryWindow) -> Feed:
    """``feed(metric, labels, [(seconds after T0, value), ...])`` into the window."""

    def _feed(metric: str, pairs: dict[str, object], points: Iterable[tuple[float, float]]) -> None:
        window.append([Reading(metric, make_labels(pairs), value, T0 + t) for t, value in points])

    return _feed


@pytest.fixture
def make_rules(tmp_path: Path) -> MakeRules:
    """Write YAML rule text to a file and load it as a rule set."""
    counter = iter(range(1_000_000))

    def _make(text: str) -> RuleSet:
        path = tmp_path / f"rules_{next(counter)}.yaml"
        path.write_text(text)
        return load_rule_set([path])

    return _make
