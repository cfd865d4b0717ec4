"""The ``alerting:`` section of fleetd.yaml: receivers, the routing tree, inhibition, delivery.

Shaped like Alertmanager's configuration (same names, defaults and inheritance) so people who
know Alertmanager can read it: a receiver has one or more integrations; the root route matches
everything and children inherit ``group_by``/``group_wait``/``group_interval``/
``repeat_interval``. Secrets (routing keys, webhook URLs, tokens) are ``Secret`` and may come
from ``*_file`` or ``*_env`` instead of the YAML.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from fleetd.alert.matchers import parse_matcher
from fleetd.configbase import Duration, Secret, StrictModel

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

    per_second: float = Field(gt=0)
    burst: int = Field(default=1, ge=1)


class _HttpIntegration(StrictModel):
    timeout: Duration = 10.0
    rate_limit: RateLimitConfig | None = None  # None: the integration's own default

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, value: float) -> float:
        if not 0 < value <= 300:
            raise ValueError("timeout must be between 0s and 5m")
        return value


class PagerDutyConfig(_HttpIntegration):
    """PagerDuty Events API v2: one alert per (node, GPU, rule), change events for remediation."""

    routing_key: Secret
    url: str = Field(default="https://events.pagerduty.com/v2/enqueue", pattern=_URL)
    change_url: str = Field(default="https://events.pagerduty.com/v2/change/enqueue", pattern=_URL)
    send_resolved: bool = True
    send_changes: bool = True
    source: str | None = None  # default: the node name
    group: str | None = None
    client: str = "fleetd"
    client_url: str | None = None  # default: alerting.external_url


class SlackConfig(_HttpIntegration):
    """Slack: an incoming webhook, or a bot token for threaded firing → resolved messages."""

    webhook_url: Secret | None = None
    bot_token: Secret | None = None
    channel: str | None = None
    api_url: str = Field(default="https://slack.com/api", pattern=_URL)
    reply_broadcast: bool = False
    send_resolved: bool = False
    send_changes: bool = True
    max_alerts: int = Field(default=20, ge=1, le=40)

    @model_validator(mode="after")
    def _one_transport(self) -> SlackConfig:
        if (self.webhook_url is None) == (self.bot_token is None):
            raise ValueError("give exactly one of webhook_url or bot_token")
        if self.bot_token is not None and not self.channel:
            raise ValueError("channel is required with bot_token")
        return self


class WebhookConfig(_HttpIntegration):
    """A generic webhook receiving Alertmanager's webhook payload (version 4)."""

    url: Secret
    send_resolved: bool = True
    send_changes: bool = False
    max_alerts: int = Field(default=0, ge=0)  # 0: all


class AlertmanagerConfig(_HttpIntegration):
    """One Alertmanager to feed through POST /api/v2/alerts (list one entry per HA peer)."""

    url: str = Field(pattern=_URL)  # base URL, e.g. http://127.0.0.1:9093
    bearer_token: Secret | None = None
    resend_interval: Duration = 60.0
    resolved_retention: Duration = 900.0

    @field_validator("resend_interval")
    @classmethod
    def _resend_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than zero")
        return value


class ConsoleConfig(StrictModel):
    """Print one line per alert as it fires and resolves (the demo's receiver)."""

    send_resolved: bool = True
    send_changes: bool = True
    format: Literal["text", "json"] = "text"


class ReceiverConfig(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    pagerduty: list[PagerDutyConfig] = Field(default_factory=list)
    slack: list[SlackConfig] = Field(default_factory=list)
    webhook: list[WebhookConfig] = Field(default_factory=list)
    alertmanager: list[AlertmanagerConfig] = Field(default_factory=list)
    console: list[ConsoleConfig] = Field(default_factory=list)


def _check_matchers(values: list[str]) -> list[str]:
    for text in values:
        parse_matcher(text)
    return values


MatcherList = Annotated[list[str], AfterValidator(_check_matchers)]


class RouteConfig(StrictModel):
    """One node of the routing tree; unset timing and grouping fields inherit from the parent."""

    receiver: str | None = None
    matchers: MatcherList = Field(default_factory=list)
    continue_: bool = Field(default=False, alias="continue")
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    routes: list[RouteConfig] = Field(default_factory=list)

    @field_validator("group_interval", "repeat_interval")
    @classmethod
    def _interval_positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be greater than zero")
        return value

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and "..." in value and len(value) > 1:
            raise ValueError("'...' (group by every label) cannot be combined with other labels")
        return value


class InhibitRuleConfig(StrictModel):
    """A firing alert matching ``source_matchers`` mutes alerts matching ``target_matchers``
    whose ``equal`` labels have the same values (a missing label counts as empty)."""

    source_matchers: MatcherList = Field(min_length=1)
    target_matchers: MatcherList = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)


def _default_inhibit_rules() -> list[InhibitRuleConfig]:
    return [
        # While a GPU is being remediated its follow-on alerts (worker down, ...) are expected.
        InhibitRuleConfig(
            source_matchers=[f'alertname="{REMEDIATION_ALERT}"'],
            target_matchers=[f'alertname!="{REMEDIATION_ALERT}"', 'gpu=~".+"'],
            equal=["node", "gpu"],
        ),
        # A critical node-level alert (no gpu label) explains its GPUs' alerts.
        InhibitRuleConfig(
            source_matchers=['gpu=""', 'severity="critical"'],
            target_matchers=['gpu=~".+"'],
            equal=["node"],
        ),
    ]


class DeliveryConfig(StrictModel):
    """Retry policy of the outbox: capped exponential backoff with jitter."""

    initial_backoff: Duration = 1.0
    max_backoff: Duration = 300.0
    max_retry_after: Duration = 3600.0
    give_up_after: Duration = 86400.0
    retention: Duration = 86400.0  # how long delivered/failed entries stay for inspection

    @model_validator(mode="after")
    def _ordered(self) -> DeliveryConfig:
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        return self


def _default_receivers() -> list[ReceiverConfig]:
    return [ReceiverConfig(name=DEFAULT_RECEIVER, console=[ConsoleConfig()])]


class AlertingConfig(StrictModel):
    """The ``alerting:`` section."""

    external_url: str | None = Field(default=None, pattern=_URL)
    receivers: list[ReceiverConfig] = Field(default_factory=_default_receivers)
    route: RouteConfig | None = None  # None: everything to the first receiver
    inhibit_rules: list[InhibitRuleConfig] = Field(default_factory=_default_inhibit_rules)
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)

    @model_validator(mode="after")
    def _references(self) -> AlertingConfig:
        names = [r.name for r in self.receivers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"receiver names must be unique: {', '.join(duplicates)}")
        if not self.receivers:
            raise ValueError("at least one receiver is required")
        if self.route is not None:
            if self.route.receiver is None:
                raise ValueError("route.receiver is required on the root route")
            if self.route.matchers:
                raise ValueError("the root route matches everything: remove route.matchers")
            problems: list[str] = []
            _check_route_receivers(self.route, "route", set(names), problems)
            if problems:
                raise ValueError("; ".join(problems))
        return self

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


def _check_route_receivers(
    route: RouteConfig, where: str, names: set[str], problems: list[str]
) -> None:
    if route.receiver is not None and route.receiver not in names:
        problems.append(f"{where}.receiver: unknown receiver {route.receiver!r}")
    for i, child in enumerate(route.routes):
        _check_route_receivers(child, f"{where}.routes[{i}]", names, problems)
