"""Receivers' integrations built from configuration: a notifier plus its delivery settings.

An integration is one entry under a receiver (``receivers[].slack[0]``...); its id,
``<receiver>/<kind>/<index>``, names its outbox queue, its notification-log entries and its
metrics. Each gets a token bucket sized to its vendor's rate limit unless configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import requests

from fleetd.alert.alertmanager import AlertmanagerNotifier
from fleetd.alert.base import DeliveryMode, Notifier
from fleetd.alert.config import AlertingConfig, RateLimitConfig
from fleetd.alert.console import ConsoleNotifier
from fleetd.alert.pagerduty import PagerDutyNotifier
from fleetd.alert.retry import TokenBucket
from fleetd.alert.slack import SlackNotifier
from fleetd.alert.ticket import TICKET_KIND, TicketNotifier
from fleetd.alert.webhook import WebhookNotifier
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


def _secrets(*values: Secret | None) -> tuple[Secret, ...]:
    return tuple(v for v in values if v is not None)


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
        items: list[Integration] = []
        name = receiver.name
        for i, pd in enumerate(receiver.pagerduty):
            notifier = PagerDutyNotifier(pd, session, source=node, external_url=config.external_url)
            items.append(
                Integration(
                    name,
                    "pagerduty",
                    i,
                    notifier,
                    pd.send_resolved,
                    pd.send_changes,
                    _limiter("pagerduty", pd.rate_limit),
                    _secrets(pd.routing_key),
                )
            )
        for i, sl in enumerate(receiver.slack):
            items.append(
                Integration(
                    name,
                    "slack",
                    i,
                    SlackNotifier(sl, session),
                    sl.send_resolved,
                    sl.send_changes,
                    _limiter("slack", sl.rate_limit),
                    _secrets(sl.webhook_url, sl.bot_token),
                )
            )
        for i, wh in enumerate(receiver.webhook):
            items.append(
                Integration(
                    name,
                    "webhook",
                    i,
                    WebhookNotifier(wh, session),
                    wh.send_resolved,
                    wh.send_changes,
                    _limiter("webhook", wh.rate_limit),
                    _secrets(wh.url),
                )
            )
        for i, am in enumerate(receiver.alertmanager):
            items.append(
                Integration(
                    name,
                    "alertmanager",
                    i,
                    AlertmanagerNotifier(am, session),
                    True,
                    False,
                    _limiter("alertmanager", am.rate_limit),
                    _secrets(am.bearer_token),
                    resend_interval=am.resend_interval,
                    resolved_retention=am.resolved_retention,
                )
            )
        for i, tk in enumerate(receiver.ticket):
            items.append(
                Integration(
                    name,
                    "ticket",
                    i,
                    TicketNotifier(tk, session),
                    False,
                    True,
                    _limiter("ticket", tk.rate_limit),
                    _secrets(tk.url, tk.token),
                )
            )
        for i, co in enumerate(receiver.console):
            items.append(
                Integration(
                    name,
                    "console",
                    i,
                    ConsoleNotifier(co, stream),
                    co.send_resolved,
                    co.send_changes,
                    None,
                )
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
