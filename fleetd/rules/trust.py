"""Per-rule staged trust: what a rule in ``shadow`` mode would have done, kept out of sight.

A shadow rule is evaluated like any other, but its transitions never reach the outbox or
remediation (``RuleEngine.take_shadow``); the daemon logs them here instead, as event-log
entries of kind ``shadow_alert`` (the same data as an ``alert`` entry, plus what the rule
would have done) and a log line, so ``fleetctl report`` and the ``fleetd_rule_*`` series can
count them (``fleetd.remedy.kpi``). Promotion — ``shadow`` → ``alert`` → ``remediate`` — is
an edit of the rule file by an operator, informed by those numbers; fleetd never promotes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetd.logs import get_logger
from fleetd.model import Transition
from fleetd.remedy.kpi import SHADOW_ALERT_KIND, RuleMode
from fleetd.rules.alert_events import alert_events
from fleetd.rules.loader import RuleSet

__all__ = ["SHADOW_ALERT_KIND", "log_shadow_events", "rule_modes", "would_do"]
log = get_logger("rules")


def would_do(rules: RuleSet, rule: str) -> str:
    """What a shadow rule's firing would have done under ``alert``/``remediate``."""
    found = rules.get(rule)
    plan = found.remediation_plan if found is not None else None
    return f"notify and remediate ({plan})" if plan else "notify"


def log_shadow_events(
    transitions: Iterable[Transition], rules: RuleSet, append: Callable[..., object]
) -> int:
    """Append a ``shadow_alert`` entry per shadow firing or resolving; return how many."""
    n = 0
    for event in alert_events(transitions):
        rule = str(event.data.get("rule"))
        would = would_do(rules, rule)
        log.info(
            "rule_shadow_transition",
            rule=rule,
            state=event.data.get("state"),
            gpu=event.gpu,
            would=would,
        )
        append(
            SHADOW_ALERT_KIND,
            now=event.at,
            gpu=event.gpu,
            message=f"[shadow, would {would}] {event.message}",
            data={**event.data, "mode": "shadow", "would": would},
            actor=event.actor,
        )
        n += 1
    return n


def rule_modes(rules: RuleSet) -> list[RuleMode]:
    """Each loaded rule's trust stage, for the reliability report."""
    return [RuleMode(r.name, r.mode, r.remediation_plan) for r in rules.rules]
