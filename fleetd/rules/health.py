"""GPU and node health from alert state and data freshness.

Per GPU, in order of precedence:

1. ``unknown``   the GPU's own telemetry (``fleetd_gpu_up``) is stale or absent: no verdict
                 without data, in either direction;
2. ``unhealthy`` a critical alert is firing for it on fresh data;
3. ``unknown``   an alert that was firing for it has lost its data (held, not resolved);
4. ``degraded``  a warning alert is firing for it;
5. ``healthy``   fresh data and nothing firing.

Only rules with ``health: true`` count (the vLLM rules do not: a worker problem is not a GPU
fault, and counting it would make "worker down while its GPU is healthy" chase its own
tail). ``info`` alerts never change health. A node is as bad as its worst GPU (unknown
ranks between unhealthy and degraded) or its own node-level alerts; no GPUs is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleetd.configbase import format_duration
from fleetd.model import AlertState, Health, HealthState, Labels, Sample, SeriesKey, Severity
from fleetd.rules.state import AlertEntry

GPU_UP_METRIC = "fleetd_gpu_up"
HEALTH_METRIC = "fleetd_gpu_health"

_RANK = {
    HealthState.HEALTHY: 0,
    HealthState.DEGRADED: 1,
    HealthState.UNKNOWN: 2,
    HealthState.UNHEALTHY: 3,
}


@dataclass(frozen=True, slots=True)
class GpuHealth:
    gpu: str
    uuid: str | None
    health: Health


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The verdict for the node and each GPU, as of ``at``."""

    node: Health
    gpus: tuple[GpuHealth, ...]
    at: float

    def gpu(self, index: str | int) -> GpuHealth | None:
        for item in self.gpus:
            if item.gpu == str(index):
                return item
        return None


def assess(
    gpu_up: Mapping[SeriesKey, Sample | None],
    alerts: Iterable[AlertEntry],
    now: float,
    *,
    stale_after_s: float,
) -> NodeHealth:
    """Health of every GPU known from ``fleetd_gpu_up`` (newest sample per series, or None)."""
    newest: dict[str, tuple[str | None, float | None]] = {}
    for key, sample in gpu_up.items():
        gpu = key.label("gpu")
        if gpu is None:
            continue
        ts = None if sample is None else sample.ts
        known = newest.get(gpu)
        if known is None or (ts is not None and (known[1] is None or ts > known[1])):
            newest[gpu] = (key.label("uuid"), ts)
    per_gpu: dict[str, list[AlertEntry]] = {}
    node_level: list[AlertEntry] = []
    for entry in alerts:
        if entry.state != AlertState.FIRING or entry.alert.severity == Severity.INFO:
            continue
        gpu = _label(entry.alert.key.labels, "gpu")
        if gpu is None:
            node_level.append(entry)
        else:
            per_gpu.setdefault(gpu, []).append(entry)
    gpus = tuple(
        GpuHealth(gpu, uuid, _gpu_verdict(ts, per_gpu.get(gpu, ()), now, stale_after_s))
        for gpu, (uuid, ts) in sorted(newest.items(), key=lambda item: _index_order(item[0]))
    )
    return NodeHealth(_node_verdict(gpus, node_level, now), gpus, now)


def health_vector(report: NodeHealth | None) -> dict[Labels, float]:
    """``fleetd_gpu_health{gpu,uuid,state}``: 1 for each GPU's current state, 0 for the others."""
    out: dict[Labels, float] = {}
    if report is None:
        return out
    for item in report.gpus:
        for state in HealthState:
            pairs = {"gpu": item.gpu, "state": state.value}
            if item.uuid is not None:
                pairs["uuid"] = item.uuid
            labels = tuple(sorted(pairs.items()))
            out[labels] = 1.0 if item.health.state == state else 0.0
    return out


def _gpu_verdict(
    ts: float | None, firing: Iterable[AlertEntry], now: float, stale_after_s: float
) -> Health:
    age = None if ts is None else max(0.0, now - ts)
    if age is None:
        return Health(HealthState.UNKNOWN, None, ("no telemetry from this GPU",))
    if age > stale_after_s:
        return Health(
            HealthState.UNKNOWN, age, (f"no fresh telemetry for {format_duration(round(age))}",)
        )
    critical, warning, no_data = [], [], []
    for entry in firing:
        name = entry.alert.key.rule
        if entry.no_data_since is not None:
            no_data.append(
                f"{name}: no data for {format_duration(round(now - entry.no_data_since))}"
            )
        elif entry.alert.severity == Severity.CRITICAL:
            critical.append(f"{name} (critical)")
        else:
            warning.append(f"{name} (warning)")
    if critical:
        return Health(HealthState.UNHEALTHY, age, tuple(sorted(critical) + sorted(warning)))
    if no_data:
        return Health(HealthState.UNKNOWN, age, tuple(sorted(no_data) + sorted(warning)))
    if warning:
        return Health(HealthState.DEGRADED, age, tuple(sorted(warning)))
    return Health(HealthState.HEALTHY, age)


def _node_verdict(gpus: tuple[GpuHealth, ...], node_level: list[AlertEntry], now: float) -> Health:
    ages = [g.health.data_age_s for g in gpus]
    age = (
        None if not gpus or any(a is None for a in ages) else max(a for a in ages if a is not None)
    )
    if not gpus:
        return Health(HealthState.UNKNOWN, None, ("no GPUs known",))
    state = max((g.health.state for g in gpus), key=_RANK.__getitem__)
    reasons = [
        f"gpu {g.gpu}: {g.health.state.value}"
        for g in gpus
        if g.health.state != HealthState.HEALTHY
    ]
    for entry in node_level:
        name = entry.alert.key.rule
        if entry.no_data_since is not None:
            own = HealthState.UNKNOWN
            reasons.append(
                f"{name}: no data for {format_duration(round(now - entry.no_data_since))}"
            )
        elif entry.alert.severity == Severity.CRITICAL:
            own = HealthState.UNHEALTHY
            reasons.append(f"{name} (critical)")
        else:
            own = HealthState.DEGRADED
            reasons.append(f"{name} (warning)")
        state = max(state, own, key=_RANK.__getitem__)
    return Health(state, age, tuple(reasons))


def _label(labels: Labels, name: str) -> str | None:
    for key, value in labels:
        if key == name:
            return value
    return None


def _index_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
