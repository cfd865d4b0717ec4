"""What the dispatcher hands a notifier: value types that round-trip through the outbox as JSON.

A ``Notification`` is complete in itself (alerts, group, reason, node) so a restart can send it
exactly as it was decided; it never contains a secret, because notifiers add credentials from
their own configuration at the moment of sending.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, PlainSerializer, TypeAdapter

from fleetd.model import Alert, AlertState, Labels, label_value, make_labels

Status = Literal["firing", "resolved"]
Action = Literal["notify", "update", "acknowledge", "change"]
"""notify: alerts fired or resolved; update: edit an earlier message (Slack chat.update);
acknowledge: someone acknowledged (PagerDuty ack); change: a remediation step (never pages)."""

DetailValue = str | int | float | bool | None
JsonLabels = Annotated[Labels, BeforeValidator(make_labels), PlainSerializer(dict)]
"""``Labels`` stored as a JSON object ``{name: value}`` (``to_dict``/``from_dict`` below)."""


def iso8601(ts: float) -> str:
    """Unix seconds → RFC 3339 in UTC with milliseconds: ``2026-01-01T00:00:00.000Z``."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """One alert as the dispatcher knows it: the latest state the rules engine reported."""

    fingerprint: str
    rule: str
    status: Status
    severity: str
    labels: JsonLabels
    annotations: JsonLabels = ()
    value: float | None = None
    starts_at: float = 0.0
    ends_at: float | None = None  # set once resolved
    received_at: float = 0.0  # when the dispatcher first saw this firing episode

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    def label(self, name: str) -> str | None:
        return label_value(self.labels, name)

    def annotation(self, name: str) -> str | None:
        return label_value(self.annotations, name)

    @property
    def alertname(self) -> str:
        return self.label("alertname") or self.rule

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _ALERT_RECORD.dump_python(self)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlertRecord:
        return _ALERT_RECORD.validate_python(data)


def record_from_alert(alert: Alert, at: float, received_at: float) -> AlertRecord:
    """The dispatcher's record of a rules-engine alert; ``alertname`` and ``severity`` are
    always present in the labels because routes, silences and receivers match on them."""
    labels = dict(alert.labels)
    labels.setdefault("alertname", alert.key.rule)
    labels.setdefault("severity", str(alert.severity))
    firing = alert.state == AlertState.FIRING
    starts = alert.fired_at if alert.fired_at is not None else (alert.active_at or at)
    ends = None if firing else (alert.resolved_at if alert.resolved_at is not None else at)
    return AlertRecord(
        fingerprint=alert.key.fingerprint(),
        rule=alert.key.rule,
        status="firing" if firing else "resolved",
        severity=str(alert.severity),
        labels=make_labels(labels),
        annotations=alert.annotations,
        value=alert.value,
        starts_at=starts,
        ends_at=ends,
        received_at=received_at,
    )


@dataclass(frozen=True, slots=True)
class HeldAlert:
    """An alert the dispatcher holds, with what mutes it now (the API's view of delivery)."""

    alert: AlertRecord
    silenced_by: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()
    acknowledged: bool = False


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Where a chat message lives, so later messages can reply in its thread or edit it."""

    channel: str
    ts: str


JsonRef = Annotated[
    MessageRef,
    PlainSerializer(lambda ref: [ref.channel, ref.ts]),
    BeforeValidator(lambda pair: MessageRef(*pair) if isinstance(pair, list) else pair),
]
"""A ``MessageRef`` stored as ``[channel, ts]``."""


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """A remediation step worth telling people about; it never pages.

    ``id`` makes a submission idempotent: the same id is queued once per integration, so a
    remediation executor that retries after a crash does not announce a step twice.
    ``thread`` ties the steps of one story together (remediation uses the run id): Slack with
    a bot token posts the first event of a thread as a message and the later ones as replies
    in its thread; every other integration sends each event as it comes.
    """

    summary: str
    at: float
    labels: JsonLabels = ()
    details: Mapping[str, DetailValue] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()  # (href, text)
    id: str | None = None
    thread: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _CHANGE_EVENT.dump_python(self)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChangeEvent:
        return _CHANGE_EVENT.validate_python(data)  # no thread in entries stored before threads


@dataclass(frozen=True, slots=True)
class Notification:
    """One payload for one integration, decided by the dispatcher and stored in the outbox."""

    receiver: str
    integration: str
    action: Action
    status: Status
    node: str
    created_at: float
    group_key: str = ""
    group_labels: JsonLabels = ()
    alerts: tuple[AlertRecord, ...] = ()
    reason: str = ""
    external_url: str | None = None
    truncated_alerts: int = 0
    change: ChangeEvent | None = None
    thread: JsonRef | None = None  # chat: reply in (notify) or edit (update) this message
    lease_until: float | None = None  # Alertmanager: endsAt of the firing alerts
    id: str = ""  # stable event id, set when queued (receivers de-duplicate redeliveries)
    node_labels: JsonLabels = ()  # the node's labels (fleetd.yaml node.labels)
    gpu_details: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # by gpu label

    @property
    def firing(self) -> tuple[AlertRecord, ...]:
        return tuple(a for a in self.alerts if a.firing)

    @property
    def resolved(self) -> tuple[AlertRecord, ...]:
        return tuple(a for a in self.alerts if not a.firing)

    def common_labels(self) -> dict[str, str]:
        """Labels every alert shares with the same value."""
        return _shared([a.labels for a in self.alerts])

    def common_annotations(self) -> dict[str, str]:
        return _shared([a.annotations for a in self.alerts])

    def with_thread(self, thread: MessageRef | None) -> Notification:
        return replace(self, thread=thread)

    @property
    def event_id(self) -> str:
        """The id a receiver de-duplicates on: the same on every retry and after a restart.

        Set once when the notification is queued (``fleetd.alert.entries``) and stored with
        it; an entry queued by a fleetd without ids gets one derived from its content.
        """
        if self.id:
            return self.id
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:32]

    def to_json(self) -> str:
        data = _NOTIFICATION.dump_python(self)
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Notification:
        return _NOTIFICATION.validate_python(json.loads(text))


# the JSON form of the outbox's notifications, field by field in declaration order (labels as
# objects, a thread as [channel, ts]); loading takes a field's default where an older entry
# has no key
_ALERT_RECORD = TypeAdapter(AlertRecord)
_CHANGE_EVENT = TypeAdapter(ChangeEvent)
_NOTIFICATION = TypeAdapter(Notification)


def _shared(label_sets: Sequence[Labels]) -> dict[str, str]:
    """The names every set has, with the same value in each (none for no sets)."""
    if not label_sets:
        return {}
    common = dict(label_sets[0])
    for labels in label_sets[1:]:
        here = dict(labels)
        common = {k: v for k, v in common.items() if here.get(k) == v}
    return common


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a successful send reports back: where the message landed, when that matters."""

    ref: MessageRef | None = None
