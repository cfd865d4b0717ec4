"""Inhibition: a firing source alert mutes matching target alerts that share its ``equal`` labels.

Alertmanager's rules (inhibit/inhibit.go): a label missing on both sides counts as equal; an
alert that matches both the source and the target side cannot be muted by alerts that also
match both sides, so such an alert can never inhibit itself.

One guarantee Alertmanager does not have: a source never mutes an alert it names as its
cause. An alert raised *because of* another one (``GpuRemediationInProgress`` for the fault
that started the run) lists that alert's fingerprint in its ``caused_by`` annotation
(comma-separated), so however broad a rule is, the fault that set things off still notifies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fleetd.alert.config import InhibitRuleConfig
from fleetd.alert.matchers import parse_matcher
from fleetd.alert.notification import AlertRecord
from fleetd.model import label_value
from fleetd.query import Matcher, matches_all


@dataclass(frozen=True, slots=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    @classmethod
    def from_config(cls, config: InhibitRuleConfig) -> InhibitRule:
        return cls(
            source=tuple(parse_matcher(m) for m in config.source_matchers),
            target=tuple(parse_matcher(m) for m in config.target_matchers),
            equal=tuple(config.equal),
        )


class _Source(NamedTuple):
    alert: AlertRecord
    causes: frozenset[str]  # fingerprints it must never mute


class Inhibitions:
    """The firing source alerts of every rule, indexed by their ``equal`` label values.

    Build one per flush from all known alerts, then ask ``muted_by`` per target.
    """

    def __init__(self, rules: Sequence[InhibitRule], alerts: Iterable[AlertRecord]) -> None:
        self._rules = rules
        self._sources: list[dict[tuple[str, ...], list[_Source]]] = [{} for _ in rules]
        for alert in alerts:
            if not alert.firing:
                continue
            source: _Source | None = None
            for rule, index in zip(rules, self._sources, strict=True):
                if matches_all(alert.labels, rule.source):
                    source = source or _Source(alert, caused_by(alert))
                    index.setdefault(_key(alert, rule), []).append(source)

    def muted_by(self, alert: AlertRecord) -> str | None:
        """The fingerprint of an alert that inhibits ``alert``, or None."""
        for rule, index in zip(self._rules, self._sources, strict=True):
            if not matches_all(alert.labels, rule.target):
                continue
            two_sided = matches_all(alert.labels, rule.source)
            for source, causes in index.get(_key(alert, rule), ()):
                if source.fingerprint == alert.fingerprint or alert.fingerprint in causes:
                    continue
                if two_sided and matches_all(source.labels, rule.target):
                    continue
                return source.fingerprint
        return None


CAUSED_BY = "caused_by"


def caused_by(alert: AlertRecord) -> frozenset[str]:
    """The fingerprints ``alert`` names as its cause (annotation ``caused_by``)."""
    text = alert.annotation(CAUSED_BY) or ""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _key(alert: AlertRecord, rule: InhibitRule) -> tuple[str, ...]:
    return tuple(label_value(alert.labels, name) or "" for name in rule.equal)
