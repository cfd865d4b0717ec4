"""Receivers' integrations built from configuration: a notifier plus its delivery settings.

An integration is one entry under a receiver (``receivers[].slack[0]``...); its id,
``<receiver>/<kind>/<index>``, names its outbox queue, its notification-log entries and its
metrics. Each gets a token bucket sized to its vendor's rate limit unless configured.

A vendor's notifier module is imported only when a receiver uses it: a node that sends to
Alertmanager alone does not load the PagerDuty, Slack and webhook code (docs/performance.md,
footprint).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import requests

from fleetd.alert.base import DeliveryMode, Notifier
from fleetd.alert.config import AlertingConfig, RateLimitConfig
from fleetd.alert.console import ConsoleNotifier
from fleetd.alert.retry import TokenBucket
from fleetd.alert.ticket import TICKET_KIND, TicketNotifier
from fleetd.configbase import Secret

# (per second, burst). PagerDuty: "approximately 120 calls/minute per integration key" over a
# sliding minute (developer-docs 05-Rate-Limits.md), so 20 + 1.5/s = 110 stays under 120 in
# any minute (alert and change events share the key, and so this bucket). Slack: "no more
# than one message per second" for a webhook, about one per second per channel for
# chat.postMessage (https://api.slack.com/docs/rate-limits): one a second, no burst, since
# Slack does not say how short a "short burst" is and apps that keep hitting 429 get disabled.
DEFAULT_RATE_LIMITS: dict[str, tuple[float, int] | None] = {
    "pagerduty": (1.5, 20),
    "slack": (1.0, 1),
    "webhook": (10.0, 20),
    "alertmanager": (10.0, 10),
    "console": None,
    "ticket": (1.0, 5),
}


@dataclass
class Integration:
    """One way of delivering a receiver's notifications."""

    receiver: str
    kind: str
    index: int
    notifier: Notifier
    send_resolved: bool
    send_changes: bool
    limiter: TokenBucket | None = None
    secrets: tuple[Secret, ...] = ()
    resend_interval: float = 60.0  # sync mode only
    resolved_retention: float = 900.0  # sync mode only

    @property
    def id(self) -> str:
        return f"{self.receiver}/{self.kind}/{self.index}"

    @property
    def name(self) -> str:
        """The ``integration`` label of its metrics: ``<kind>/<index>``."""
        return f"{self.kind}/{self.index}"

    @property
    def mode(self) -> DeliveryMode:
        return self.notifier.mode


def _limiter(kind: str, configured: RateLimitConfig | None) -> TokenBucket | None:
    if configured is not None:
        return TokenBucket(configured.per_second, configured.burst)
    default = DEFAULT_RATE_LIMITS.get(kind)
    return None if default is None else TokenBucket(default[0], default[1])


def _integration(
    receiver: str,
    kind: str,
    index: int,
    notifier: Notifier,
    delivery: tuple[bool, bool],
    rate_limit: RateLimitConfig | None,
    *secrets: Secret | None,
    **sync: float,
) -> Integration:
    """One integration: ``delivery`` is (send_resolved, send_changes); ``sync`` the sync-mode
    timings (``resend_interval``, ``resolved_retention``)."""
    send_resolved, send_changes = delivery
    return Integration(
        receiver,
        kind,
        index,
        notifier,
        send_resolved,
        send_changes,
        _limiter(kind, rate_limit),
        tuple(v for v in secrets if v is not None),
        **sync,
    )


def build_integrations(
    config: AlertingConfig,
    *,
    node: str,
    session: requests.Session,
    stream: TextIO,
) -> dict[str, list[Integration]]:
    """Every receiver's integrations, by receiver name."""
    out: dict[str, list[Integration]] = {}
    for receiver in config.receivers:
        name = receiver.name
        items: list[Integration] = []
        for i, pd in enumerate(receiver.pagerduty):
            from fleetd.alert.pagerduty import PagerDutyNotifier

            notifier: Notifier = PagerDutyNotifier(
                pd, session, source=node, external_url=config.external_url
            )
            delivery = (pd.send_resolved, pd.send_changes)
            items.append(
                _integration(
                    name, "pagerduty", i, notifier, delivery, pd.rate_limit, pd.routing_key
                )
            )
        for i, sl in enumerate(receiver.slack):
            from fleetd.alert.slack import SlackNotifier

            notifier = SlackNotifier(sl, session)
            delivery = (sl.send_resolved, sl.send_changes)
            secrets = (sl.webhook_url, sl.bot_token)
            items.append(
                _integration(name, "slack", i, notifier, delivery, sl.rate_limit, *secrets)
            )
        for i, wh in enumerate(receiver.webhook):
            from fleetd.alert.webhook import WebhookNotifier

            notifier = WebhookNotifier(wh, session)
            delivery = (wh.send_resolved, wh.send_changes)
            items.append(
                _integration(name, "webhook", i, notifier, delivery, wh.rate_limit, wh.url)
            )
        for i, am in enumerate(receiver.alertmanager):
            from fleetd.alert.alertmanager import AlertmanagerNotifier

            # a sync integration mirrors alerts: resolves always, change events never
            notifier = AlertmanagerNotifier(am, session)
            items.append(
                _integration(
                    name,
                    "alertmanager",
                    i,
                    notifier,
                    (True, False),
                    am.rate_limit,
                    am.bearer_token,
                    resend_interval=am.resend_interval,
                    resolved_retention=am.resolved_retention,
                )
            )
        for i, tk in enumerate(receiver.ticket):
            # RMA tickets are change events only
            notifier = TicketNotifier(tk, session)
            items.append(
                _integration(
                    name, "ticket", i, notifier, (False, True), tk.rate_limit, tk.url, tk.token
                )
            )
        for i, co in enumerate(receiver.console):
            delivery = (co.send_resolved, co.send_changes)
            items.append(
                _integration(name, "console", i, ConsoleNotifier(co, stream), delivery, None)
            )
        out[name] = items
    return out


def takes_change(integration: Integration, kind: str | None) -> bool:
    """Whether a change event of ``kind`` goes to ``integration``: RMA tickets to ticket
    integrations only, every other change to those with ``send_changes`` (never to a sync
    integration, which mirrors alerts)."""
    if integration.mode == "changes":
        return kind == TICKET_KIND
    return kind != TICKET_KIND and integration.send_changes and integration.mode != "sync"


def all_integrations(receivers: dict[str, list[Integration]]) -> Sequence[Integration]:
    return [i for items in receivers.values() for i in items]
