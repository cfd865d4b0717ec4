"""Frozen value types that flow between fleetd's parts.

A *reading* is one value of one series at one time; ``value=None`` means the reading is
missing (unsupported, "N/A", a raw sentinel, an exception, a timeout) and is never a zero.
Metric names are the exported Prometheus names from ``fleetd.collect.catalog``, so rules,
the store, /metrics and dashboards all speak one vocabulary.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from math import copysign
from typing import NamedTuple

Labels = tuple[tuple[str, str], ...]
"""Label pairs sorted by name: hashable, comparable, cheap to build once per series."""


def make_labels(pairs: Mapping[str, object] | Iterable[tuple[str, object]] = ()) -> Labels:
    """Build sorted ``Labels`` from a mapping or pairs; values become strings."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return tuple(sorted((str(k), str(v)) for k, v in items))


NON_IDENTIFYING_LABELS = frozenset({"uuid"})
"""Labels shown on a series and an alert but not part of what the alert *is*: the GPU's UUID
changes format between amdsmi releases (7.13), while ``gpu`` (its index, by BDF) does not."""


def identity_labels(labels: Labels) -> Labels:
    """``labels`` without the non-identifying ones (what an alert's key is made of)."""
    return tuple(pair for pair in labels if pair[0] not in NON_IDENTIFYING_LABELS)


def label_value(labels: Labels, name: str) -> str | None:
    """The value of one label, or None."""
    for key, value in labels:
        if key == name:
            return value
    return None


def with_labels(labels: Labels, **extra: object) -> Labels:
    """Labels with ``extra`` added or replaced."""
    merged = dict(labels)
    merged.update({k: str(v) for k, v in extra.items()})
    return make_labels(merged)


def same_value(a: float | None, b: float | None) -> bool:
    """Whether ``a`` and ``b`` are the same double, stored and written alike: 0.0 and -0.0
    differ, NaN is never the same; None is the same only as None (a missing value)."""
    if a is None or b is None:
        return a is b
    return a == b and (a != 0.0 or copysign(1.0, a) == copysign(1.0, b))


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """Identity of one time series: metric name plus labels.

    Its hash is computed once: keys are looked up in dicts hundreds of times a tick (the
    window, the rules, the store), and hashing the label tuples again each time showed."""

    metric: str
    labels: Labels = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.metric, self.labels)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[SeriesKey], tuple[str, Labels]]:
        return SeriesKey, (self.metric, self.labels)  # the hash is per process: made anew

    def label(self, name: str) -> str | None:
        return label_value(self.labels, name)

    def __str__(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.metric}{{{inner}}}"


class Sample(NamedTuple):
    """One stored point: Unix seconds and a value (never None: missing points are not stored)."""

    ts: float
    value: float


@dataclass(frozen=True, slots=True, init=False)
class Reading:
    """One value read in one poll; ``value is None`` marks it missing and ``reason`` says why."""

    metric: str
    labels: Labels
    value: float | None
    ts: float
    reason: str | None = None

    def __init__(
        self, metric: str, labels: Labels, value: float | None, ts: float, reason: str | None = None
    ) -> None:
        # ~900 readings a tick: filling the slots through their descriptors costs 45 % less
        # than the frozen dataclass's generated object.__setattr__ per field, and it stays
        # frozen (assignment still raises)
        _SET_METRIC(self, metric)
        _SET_LABELS(self, labels)
        _SET_VALUE(self, value)
        _SET_TS(self, ts)
        _SET_REASON(self, reason)

    @property
    def key(self) -> SeriesKey:
        return SeriesKey(self.metric, self.labels)

    @property
    def missing(self) -> bool:
        return self.value is None


_SET_METRIC, _SET_LABELS, _SET_VALUE, _SET_TS, _SET_REASON = (
    Reading.__dict__[name].__set__ for name in ("metric", "labels", "value", "ts", "reason")
)


@dataclass(frozen=True)
class GpuIdentity:
    """What identifies one GPU; read once at start-up and after every re-enumeration.

    Not slotted: what every reading of every poll asks of it (``labels``, ``primary``) is
    worked out once and kept in the instance's ``__dict__`` (``cached_property``), outside the
    dataclass fields, so equality, hashing and ``asdict`` see the fields alone."""

    index: int
    uuid: str
    bdf: str
    serial: str | None = None
    product: str | None = None
    model: str | None = None  # normalised product family: MI300X, MI325X, MI350X, MI355X
    vbios: str | None = None
    driver_version: str | None = None
    kfd_id: int | None = None
    hip_id: int | None = None
    hive_id: str | None = None
    partition_id: int | None = None  # kfd current_partition_id: 0 on SPX and on primaries
    compute_partition: str | None = None  # SPX, DPX, QPX, CPX (None: unreadable)
    memory_partition: str | None = None  # NPS1, NPS4 (None: unreadable)

    @property
    def partitioned(self) -> bool:
        """Whether this logical device is one of several partitions of its physical GPU."""
        return self.compute_partition not in (None, "SPX")

    @cached_property
    def primary(self) -> bool:
        """Whether board-level data (power, temperatures, PCIe, RAS, the reset) lives here:
        partition 0, or an unpartitioned GPU (or one whose partition is unreadable)."""
        if not self.partitioned:
            return True
        if self.partition_id is not None:
            return self.partition_id == 0
        return self.bdf.endswith(".0")  # the BDF's function digit carries the partition

    @property
    def physical_bdf(self) -> str:
        """The BDF of the physical GPU's partition 0 (the function digit is the partition)."""
        if not self.partitioned:
            return self.bdf
        return self.bdf.rsplit(".", 1)[0] + ".0"

    @cached_property
    def labels(self) -> Labels:
        """The labels every per-GPU series carries (plus AMD device-metrics-exporter's
        partition labels on a partitioned GPU, so an SPX node's series keep their names);
        built once, as every reading of every poll uses them."""
        if self.partitioned:
            return make_labels(
                {
                    "gpu": self.index,
                    "uuid": self.uuid,
                    "gpu_partition_id": self.partition_id if self.partition_id is not None else "",
                    "gpu_compute_partition_type": self.compute_partition or "",
                    "gpu_memory_partition_type": self.memory_partition or "",
                }
            )
        return make_labels({"gpu": self.index, "uuid": self.uuid})

    @cached_property
    def _with(self) -> dict[Labels, Labels]:
        return {}

    def labels_with(self, extra: Labels) -> Labels:
        """``labels`` plus ``extra`` (name-sorted pairs), built once per GPU and label set."""
        if not extra:
            return self.labels
        labels = self._with.get(extra)
        if labels is None:
            labels = self._with[extra] = tuple(sorted(self.labels + extra))
        return labels


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """How one GPU's poll went: enumerated or not, finished within its timeout or not."""

    gpu: GpuIdentity
    present: bool
    responsive: bool
    missing_readings: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CollectorResult:
    """Outcome of one collector in one poll, for self-metrics."""

    name: str
    success: bool
    duration_s: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll produced."""

    node: str
    ts: float
    gpus: tuple[GpuStatus, ...]
    readings: tuple[Reading, ...]
    collectors: tuple[CollectorResult, ...] = ()
    duration_s: float = 0.0


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class AlertState(StrEnum):
    """Prometheus' alert states, plus RESOLVED for an alert that fired and stopped."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class AlertKey:
    """One alert per rule and label set."""

    rule: str
    labels: Labels

    def fingerprint(self) -> str:
        """Stable 16-hex-digit id, the same across restarts and hosts."""
        text = self.rule + "\x00" + "\x00".join(f"{k}={v}" for k, v in self.labels)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Alert:
    """The state of one alert after an evaluation."""

    key: AlertKey
    state: AlertState
    severity: Severity
    labels: Labels  # full label set sent to receivers (alertname, severity, node, gpu, rule labels)
    annotations: Labels = ()
    value: float | None = None
    active_at: float | None = None  # when the condition first held in this episode
    fired_at: float | None = None
    resolved_at: float | None = None
    keep_firing_since: float | None = None
    last_eval_at: float | None = None
    remediation_plan: str | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """An alert changed state; the outbox and the remediation policy act on these."""

    alert: Alert
    previous: AlertState
    current: AlertState
    at: float


class HealthState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # warning alerts firing
    UNHEALTHY = "unhealthy"  # critical alerts firing
    UNKNOWN = "unknown"  # no fresh data: never shown as healthy
    OUT_OF_SERVICE = "out_of_service"  # drained, remediating, quarantined or held: never healthy


class ServiceReason(StrEnum):
    """Why a GPU is out of service (``fleetd.rules.health.out_of_service`` derives it)."""

    REMEDIATING = "remediating"  # a real run has it out of rotation or holds its lease
    DRAINED = "drained"  # a person drained it; held until an undrain
    QUARANTINED = "quarantined"  # remediation gave up on it; held until an undrain
    HELD = "held"  # a run ended (cancelled, aborted) with its workers still out


@dataclass(frozen=True, slots=True)
class OutOfService:
    """A GPU taken out of service by remediation: why, by which run, since when."""

    reason: ServiceReason
    run_id: str
    plan: str
    run_state: str
    since: float
    detail: str = ""  # the run's outcome (why it was quarantined, who drained it)

    def describe(self) -> str:
        """``quarantined by run 1f2e… (reset, quarantined)``, for reasons and status lines."""
        return f"{self.reason.value} by run {self.run_id} ({self.plan}, {self.run_state})"


@dataclass(frozen=True, slots=True)
class Health:
    """A verdict and the age of the data behind it.

    ``rules_state`` is what alert state and telemetry alone say when ``state`` is
    ``out_of_service`` (a quarantined GPU may still be unhealthy); otherwise it is ``state``.
    """

    state: HealthState
    data_age_s: float | None
    reasons: tuple[str, ...] = field(default_factory=tuple)
    out_of_service: OutOfService | None = None
    rules_state: HealthState | None = None

    @property
    def judged(self) -> HealthState:
        """The verdict of the rules and telemetry, whatever remediation did."""
        return self.rules_state if self.rules_state is not None else self.state
