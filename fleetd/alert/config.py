"""The ``alerting:`` section of fleetd.yaml: receivers, the routing tree, inhibition, delivery.

Shaped like Alertmanager's configuration (same names, defaults and inheritance) so people who
know Alertmanager can read it: a receiver has one or more integrations; the root route matches
everything and children inherit ``group_by``/``group_wait``/``group_interval``/
``repeat_interval``. Secrets (routing keys, webhook URLs, tokens) are ``Secret`` and may come
from ``*_file`` or ``*_env`` instead of the YAML.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from fleetd.alert.matchers import parse_matcher
from fleetd.configbase import (
    Duration,
    HttpUrlText,
    Secret,
    Span,
    StrictModel,
    check_secret_http_url,
    documents,
)

# Alertmanager's defaults (prometheus/alertmanager docs/configuration.md, route section).
DEFAULT_GROUP_WAIT = 30.0
DEFAULT_GROUP_INTERVAL = 300.0
DEFAULT_REPEAT_INTERVAL = 4 * 3600.0

DEFAULT_RECEIVER = "console"
REMEDIATION_ALERT = "GpuRemediationInProgress"
"""alertname of the alert raised while a GPU's remediation runs (muting its follow-on alerts)."""

_URL = r"^https?://\S+$"


class RateLimitConfig(StrictModel):
    """A token bucket per integration: ``burst`` sends at once, then ``per_second``."""

    per_second: StrictFloat = Field(gt=0, le=10_000)
    """Sustained sends per second."""
    burst: StrictInt = Field(default=1, ge=1, le=10_000)
    """Sends allowed at once before the rate applies."""


class _HttpIntegration(StrictModel):
    timeout: Duration = 10.0
    """How long one HTTP request to the receiver may take."""
    rate_limit: RateLimitConfig | None = None  # None: the integration's own default
    """Token bucket for this integration. Unset: the integration's default (PagerDuty 1.5/s burst
    20, Slack 1/s burst 1, webhook 10/s burst 20, Alertmanager 10/s burst 10).
    """

    @field_validator("timeout")
    @classmethod
    @documents("timeout must be between 0s and 5m")
    def _timeout_positive(cls, value: float) -> float:
        if not 0 < value <= 300:
            raise ValueError("timeout must be between 0s and 5m")
        return value


class PagerDutyConfig(_HttpIntegration):
    """PagerDuty Events API v2: one alert per (node, GPU, rule), change events for remediation."""

    routing_key: Secret
    """Integration key of an Events API v2 integration."""
    url: HttpUrlText = Field(default="https://events.pagerduty.com/v2/enqueue", pattern=_URL)
    """Events API endpoint for alert events."""
    change_url: HttpUrlText = Field(
        default="https://events.pagerduty.com/v2/change/enqueue", pattern=_URL
    )
    """Events API endpoint for change events."""
    send_resolved: StrictBool = True
    """Send a resolve when the alert resolves."""
    send_changes: StrictBool = True
    """Send remediation steps as PagerDuty change events (they never page)."""
    source: str | None = None  # default: the node name
    """PagerDuty `payload.source`; unset: the node name."""
    group: str | None = None
    """PagerDuty `payload.group` (e.g. the cluster)."""
    client: str = "fleetd"
    """PagerDuty `client` (shown with the incident)."""
    client_url: HttpUrlText | None = None  # default: alerting.external_url
    """PagerDuty `client_url` (link on the incident); unset: `alerting.external_url`."""


class SlackConfig(_HttpIntegration):
    """Slack: an incoming webhook, or a bot token for threaded firing → resolved messages."""

    webhook_url: Annotated[Secret | None, AfterValidator(check_secret_http_url)] = None
    """Incoming-webhook URL (one message per notification)."""
    bot_token: Secret | None = None
    """Bot token for the Web API: the firing message is edited when the alert resolves and updates
    go in its thread. Needs `channel`.
    """
    channel: str | None = None
    """Channel to post to (with `bot_token`)."""
    api_url: HttpUrlText = Field(default="https://slack.com/api", pattern=_URL)
    """Slack Web API base URL."""
    reply_broadcast: StrictBool = False
    """Also show thread replies in the channel."""
    send_resolved: StrictBool = False
    """Notify when alerts resolve (as Alertmanager, off by default)."""
    send_changes: StrictBool = True
    """Post remediation steps."""
    max_alerts: StrictInt = Field(default=20, ge=1, le=40)
    """Most alerts listed in one message."""

    @model_validator(mode="after")
    @documents("give exactly one of webhook_url or bot_token", "channel is required with bot_token")
    def _one_transport(self) -> SlackConfig:
        if (self.webhook_url is None) == (self.bot_token is None):
            raise ValueError("give exactly one of webhook_url or bot_token")
        if self.bot_token is not None and not self.channel:
            raise ValueError("channel is required with bot_token")
        return self


class WebhookConfig(_HttpIntegration):
    """A generic webhook receiving Alertmanager's webhook payload (version 4)."""

    url: Annotated[Secret, AfterValidator(check_secret_http_url)]
    """The URL to POST to (a secret: it often carries a token)."""
    send_resolved: StrictBool = True
    """Send resolved alerts."""
    send_changes: StrictBool = False
    """Send remediation steps too."""
    max_alerts: StrictInt = Field(default=0, ge=0, le=10_000)  # 0: all
    """Most alerts in one payload (the rest are counted in `truncatedAlerts`); 0: all."""


class TicketReceiverConfig(_HttpIntegration):
    """The RMA ticket hook: a JSON body per new physical-action decision on a GPU (serial, node,
    fault class, AFIDs, operator message, evidence bundle), and nothing else (docs/remediation.md,
    "RMA record and ticket")."""

    url: Annotated[Secret, AfterValidator(check_secret_http_url)]
    """The URL to POST tickets to (a secret: it often carries a token)."""
    token: Secret | None = None
    """Bearer token sent with each ticket, if the ticketing system needs one."""


class AlertmanagerConfig(_HttpIntegration):
    """One Alertmanager to feed through POST /api/v2/alerts (list one entry per HA peer)."""

    url: HttpUrlText = Field(pattern=_URL)  # base URL, e.g. http://127.0.0.1:9093
    """Base URL of one Alertmanager, e.g. `http://127.0.0.1:9093`."""
    bearer_token: Secret | None = None
    """Bearer token for Alertmanager's API, if it needs one."""
    resend_interval: Annotated[Duration, Span(0, "1h")] = 60.0
    """Firing alerts are posted again this often, each with `endsAt` a few intervals ahead, so an
    Alertmanager that stops hearing from this node resolves them by itself.
    """
    resolved_retention: Annotated[Duration, Span(0, "1d")] = 900.0
    """How long resolved alerts keep being posted (so every HA peer hears of the resolve)."""

    @field_validator("resend_interval")
    @classmethod
    @documents("must be greater than zero")
    def _resend_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than zero")
        return value


class ConsoleConfig(StrictModel):
    """Print one line per alert as it fires and resolves (the demo's receiver)."""

    send_resolved: StrictBool = True
    """Print resolves."""
    send_changes: StrictBool = True
    """Print remediation steps."""
    format: Literal["text", "json"] = "text"
    """`text` lines or one JSON object per line."""


@dataclass(frozen=True, slots=True)
class _Receivers:
    """The receiver names of the ``alerting:`` section being validated, read from its raw
    data before any field is validated, so a route naming an unknown receiver is reported at
    the route's own key, and together with every other problem of the file."""

    names: frozenset[str]
    duplicates: frozenset[str]

    @classmethod
    def of(cls, data: Any) -> _Receivers | None:
        if not isinstance(data, dict):
            return None
        raw = data.get("receivers")
        if raw is None:
            return cls(frozenset({DEFAULT_RECEIVER}), frozenset())
        if not isinstance(raw, list):
            return None  # its own type error says enough
        names: list[str] = []
        for item in raw:
            name = item.name if isinstance(item, ReceiverConfig) else None
            if isinstance(item, dict):
                name = item.get("name")
            if isinstance(name, str):
                names.append(name)
        duplicates = frozenset(n for n in names if names.count(n) > 1)
        return cls(frozenset(names), duplicates)


_IN_SCOPE: ContextVar[_Receivers | None] = ContextVar("fleetd_alert_receivers", default=None)


@contextmanager
def _receivers_in_scope(receivers: _Receivers | None) -> Iterator[None]:
    token = _IN_SCOPE.set(receivers)
    try:
        yield
    finally:
        _IN_SCOPE.reset(token)


class ReceiverConfig(StrictModel):
    """One receiver: a name and one or more integrations of any kind."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    """Receiver name, referred to by `route.receiver`."""
    pagerduty: list[PagerDutyConfig] = Field(default_factory=list)
    """PagerDuty Events API v2 integrations."""
    slack: list[SlackConfig] = Field(default_factory=list)
    """Slack integrations (incoming webhook or bot token)."""
    webhook: list[WebhookConfig] = Field(default_factory=list)
    """Generic webhooks (Alertmanager's webhook payload, version 4)."""
    alertmanager: list[AlertmanagerConfig] = Field(default_factory=list)
    """Alertmanagers to feed (one entry per HA peer)."""
    console: list[ConsoleConfig] = Field(default_factory=list)
    """Print alerts as lines on standard output."""
    ticket: list[TicketReceiverConfig] = Field(default_factory=list)
    """RMA ticket hooks: they get only the tickets remediation raises (never alerts)."""

    @field_validator("name")
    @classmethod
    @documents("receiver names must be unique (… is used more than once)")
    def _unique(cls, value: str) -> str:
        scope = _IN_SCOPE.get()
        if scope is not None and value in scope.duplicates:
            raise ValueError(f"receiver names must be unique ({value!r} is used more than once)")
        return value


def _check_matchers(values: list[str]) -> list[str]:
    for text in values:
        parse_matcher(text)
    return values


MatcherList = Annotated[list[str], AfterValidator(_check_matchers)]


class RouteConfig(StrictModel):
    """One node of the routing tree; unset timing and grouping fields inherit from the parent."""

    receiver: str | None = None
    """Receiver for alerts this route matches; inherited when unset."""
    matchers: MatcherList = Field(default_factory=list)
    """Label matchers, all of which must match: `name="value"`, `!=`, `=~` and `!~` (regular
    expressions, anchored). Not allowed on the root route.
    """
    continue_: StrictBool = Field(default=False, alias="continue")
    """Keep trying the following sibling routes after this one matched (key `continue`)."""
    group_by: list[str] | None = None
    """Labels that split alerts into notification groups; `[...]` groups by every label. Inherited
    when unset.
    """
    group_wait: Duration | None = None
    """How long a new group waits for more alerts before its first notification."""
    group_interval: Duration | None = None
    """How long a group waits before notifying about alerts added to it."""
    repeat_interval: Duration | None = None
    """How often a still-firing group is notified again."""
    routes: list[RouteConfig] = Field(default_factory=list)
    """Child routes, tried in order; the first match wins unless `continue`."""

    @field_validator("group_interval", "repeat_interval")
    @classmethod
    @documents("must be greater than zero")
    def _interval_positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be greater than zero")
        return value

    @field_validator("receiver")
    @classmethod
    @documents("must name a receiver (unknown receiver …; receivers: …)")
    def _known_receiver(cls, value: str | None) -> str | None:
        scope = _IN_SCOPE.get()
        if value is not None and scope is not None and value not in scope.names:
            known = ", ".join(sorted(scope.names)) or "none"
            raise ValueError(
                f"must name a receiver (unknown receiver {value!r}; receivers: {known})"
            )
        return value

    @field_validator("group_by")
    @classmethod
    @documents("'...' (group by every label) cannot be combined with other labels")
    def _group_by(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and "..." in value and len(value) > 1:
            raise ValueError("'...' (group by every label) cannot be combined with other labels")
        return value


class InhibitRuleConfig(StrictModel):
    """A firing alert matching ``source_matchers`` mutes alerts matching ``target_matchers``
    whose ``equal`` labels have the same values (a missing label counts as empty)."""

    source_matchers: MatcherList = Field(min_length=1)
    """Matchers of the alert that mutes."""
    target_matchers: MatcherList = Field(min_length=1)
    """Matchers of the alerts it mutes."""
    equal: list[str] = Field(default_factory=list)
    """Labels that must have the same value on both (a missing label counts as empty)."""


REMEDIATION_CONSEQUENCES = (
    "GpuMissing",
    "GpuTelemetryStale",
    "GpuXgmiLinkDown",
    "GpuPcieLinkWidthDegraded",
    "GpuPcieLinkSpeedDegraded",
)
"""Alerts a GPU reset itself causes (the GPU leaves the bus, its readings pause, its XGMI
links drop and its PCIe link retrains): expected while the GPU is being remediated."""

DRAINED_WORKER_ALERTS = ("VllmWorkerDown", "VllmWorkerStalled")
"""Alerts of the vLLM workers a remediation drains. They carry ``worker``, not ``gpu`` (the
rules aggregate ``by (worker)``), so they are matched on ``node`` alone."""


def _one_of(names: tuple[str, ...]) -> str:
    return f'alertname=~"{"|".join(names)}"'


def _default_inhibit_rules() -> list[InhibitRuleConfig]:
    return [
        # While a GPU is being remediated, the consequences of its drain and reset are
        # expected; the fault that started the run is not among them and still pages.
        InhibitRuleConfig(
            source_matchers=[f'alertname="{REMEDIATION_ALERT}"'],
            target_matchers=[_one_of(REMEDIATION_CONSEQUENCES)],
            equal=["node", "gpu"],
        ),
        InhibitRuleConfig(
            source_matchers=[f'alertname="{REMEDIATION_ALERT}"'],
            target_matchers=[_one_of(DRAINED_WORKER_ALERTS)],
            equal=["node"],
        ),
        # A critical node-level alert (no gpu label) explains its GPUs' alerts; worker and
        # remediation alerts are node-level but explain nothing about a GPU's own faults.
        InhibitRuleConfig(
            source_matchers=[
                'gpu=""',
                'severity="critical"',
                'alertname!~"Vllm.*|GpuRemediation.*"',
            ],
            target_matchers=['gpu=~".+"'],
            equal=["node"],
        ),
    ]


class DeliveryConfig(StrictModel):
    """Retry policy of the outbox: capped exponential backoff with jitter."""

    initial_backoff: Annotated[Duration, Span(0, "1h")] = 1.0
    """First retry delay after a failed send."""
    max_backoff: Annotated[Duration, Span(0, "1d")] = 300.0
    """Longest retry delay (the backoff doubles up to it, with jitter)."""
    max_retry_after: Annotated[Duration, Span(0, "1d")] = 3600.0
    """Longest `Retry-After` from a receiver that is honoured."""
    give_up_after: Annotated[Duration, Span(0, "30d")] = 86400.0
    """A notification still failing this long after it was queued is given up
    (`fleetd_alert_notifications_failed_total`).
    """
    retention: Annotated[Duration, Span(0, "365d")] = 86400.0  # delivered/failed entries kept
    """How long delivered and given-up notifications (and expired silences) are kept for inspection.
    """

    @model_validator(mode="after")
    @documents("need 0 < initial_backoff <= max_backoff")
    def _ordered(self) -> DeliveryConfig:
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        return self


def _default_receivers() -> list[ReceiverConfig]:
    return [ReceiverConfig(name=DEFAULT_RECEIVER, console=[ConsoleConfig()])]


class AlertingConfig(StrictModel):
    """The ``alerting:`` section."""

    external_url: HttpUrlText | None = Field(default=None, pattern=_URL)
    """URL of this agent as people reach it; used in notification links (PagerDuty `client_url`,
    Alertmanager `generatorURL`).
    """
    receivers: list[ReceiverConfig] = Field(default_factory=_default_receivers)
    """Where notifications go; each receiver has one or more integrations. Required in a file, at
    least one (`[{name: console, console: [{}]}]` prints alerts to the journal only); the
    built-in configuration has that one `console` receiver.
    """
    route: RouteConfig | None = None  # None: everything to the first receiver
    """The routing tree. Unset: every alert goes to the first receiver, grouped by nothing, with
    Alertmanager's default timings.
    """
    inhibit_rules: list[InhibitRuleConfig] = Field(default_factory=_default_inhibit_rules)
    """Alerts that mute other alerts. Setting this key replaces the defaults shown, so keep them in
    your list if you want them.
    """
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)
    """Retry policy of the notification outbox."""

    @model_validator(mode="wrap")
    @classmethod
    @documents()
    def _with_receivers_in_scope(
        cls, data: Any, handler: ModelWrapValidatorHandler[AlertingConfig]
    ) -> AlertingConfig:
        """Routes and receivers check their names against the raw receiver list, as field
        errors: each at its own key, and never hidden by another field's error."""
        with _receivers_in_scope(_Receivers.of(data)):
            return handler(data)

    @field_validator("receivers")
    @classmethod
    @documents("at least one receiver is required")
    def _some_receiver(cls, value: list[ReceiverConfig]) -> list[ReceiverConfig]:
        if not value:
            raise ValueError("at least one receiver is required")
        return value

    @field_validator("route")
    @classmethod
    @documents(
        "receiver is required on the root route",
        "the root route matches everything: remove its matchers",
    )
    def _root(cls, route: RouteConfig | None) -> RouteConfig | None:
        if route is not None and route.receiver is None:
            raise ValueError("receiver is required on the root route")
        if route is not None and route.matchers:
            raise ValueError("the root route matches everything: remove its matchers")
        return route

    def root_route(self) -> RouteConfig:
        """The routing tree's root, with Alertmanager's defaults filled in."""
        route = self.route or RouteConfig(receiver=self.receivers[0].name)
        return route.model_copy(
            update={
                "group_by": route.group_by if route.group_by is not None else [],
                "group_wait": _or(route.group_wait, DEFAULT_GROUP_WAIT),
                "group_interval": _or(route.group_interval, DEFAULT_GROUP_INTERVAL),
                "repeat_interval": _or(route.repeat_interval, DEFAULT_REPEAT_INTERVAL),
            }
        )


def _or(value: Any, default: float) -> float:
    return float(default if value is None else value)
