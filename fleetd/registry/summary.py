"""One node's row in the fleet view, from its status document.

``fleetctl status`` builds these rows from each agent's ``/api/v1/status``; agents publish
the same rows to the fleet registry. One function makes both, so a fleet read from the
registry and one read by fan-out look the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

HEALTH_STATES = ("healthy", "degraded", "unhealthy", "unknown", "out_of_service")


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What the fleet table shows for one node."""

    node: str
    health: str
    gpus_total: int
    gpus_healthy: int
    hottest_junction_c: float | None
    power_w: float | None
    alerts_critical: int
    alerts_warning: int
    alerts_info: int
    remediation: str  # "-", "reset draining", "held gpu 3", "paused", ...
    remediation_active: bool
    data_age_s: float | None
    reasons: tuple[str, ...] = ()
    version: str = ""
    gpus_in_service: int | None = None  # None: an agent from before out_of_service
    labels: tuple[tuple[str, str], ...] = ()  # node.labels: cluster, rack, …

    @property
    def serving(self) -> int:
        """GPUs in service (all of them, for an agent that does not say)."""
        return self.gpus_total if self.gpus_in_service is None else self.gpus_in_service

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        out["labels"] = dict(self.labels)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeSummary:
        return cls(
            node=str(data["node"]),
            health=str(data["health"]),
            gpus_total=int(data["gpus_total"]),
            gpus_healthy=int(data["gpus_healthy"]),
            hottest_junction_c=_float(data.get("hottest_junction_c")),
            power_w=_float(data.get("power_w")),
            alerts_critical=int(data.get("alerts_critical", 0)),
            alerts_warning=int(data.get("alerts_warning", 0)),
            alerts_info=int(data.get("alerts_info", 0)),
            remediation=str(data.get("remediation", "-")),
            remediation_active=bool(data.get("remediation_active", False)),
            data_age_s=_float(data.get("data_age_s")),
            reasons=tuple(str(r) for r in data.get("reasons") or ()),
            version=str(data.get("version", "")),
            gpus_in_service=_int(data.get("gpus_in_service")),
            labels=_labels(data.get("labels")),
        )


def _labels(value: object) -> tuple[tuple[str, str], ...]:
    """Label pairs, sorted, from a mapping (a status document, a row's JSON) or nothing."""
    if not isinstance(value, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def remediation_text(remediation: Mapping[str, Any]) -> str:
    """A few words on what remediation is doing on the node."""
    if not remediation.get("available", False):
        return "-"
    parts: list[str] = []
    for run in remediation.get("active") or ():
        gpus = _gpu_list(run.get("gpus") or ())
        dry = " (dry-run)" if run.get("dry_run") else ""
        parts.append(f"{run.get('plan')} {run.get('phase')} gpu {gpus}{dry}")
    for held in remediation.get("held") or ():
        parts.append(f"{held.get('state')} gpu {_gpu_list(held.get('gpus') or ())}")
    if (remediation.get("pause") or {}).get("paused"):
        parts.append("paused")
    if (remediation.get("breaker") or {}).get("tripped"):
        parts.append("breaker open")
    return "; ".join(parts) if parts else "-"


def _gpu_list(gpus: Any) -> str:
    values = sorted(int(g) for g in gpus)
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ",".join(str(g) for g in values)


def summarize(status: Mapping[str, Any]) -> NodeSummary:
    """The fleet row of one node from its ``/api/v1/status`` document."""
    alerts = status.get("alerts") or {}
    health = status.get("health") or {}
    remediation = status.get("remediation") or {}
    state = str(health.get("state", "unknown"))
    return NodeSummary(
        node=str(status["node"]),
        health=state if state in HEALTH_STATES else "unknown",
        gpus_total=int(status.get("gpus_total", 0)),
        gpus_healthy=int(status.get("gpus_healthy", 0)),
        hottest_junction_c=_float(status.get("hottest_junction_c")),
        power_w=_float(status.get("power_w")),
        alerts_critical=int(alerts.get("critical", 0)),
        alerts_warning=int(alerts.get("warning", 0)),
        alerts_info=int(alerts.get("info", 0)),
        remediation=remediation_text(remediation),
        remediation_active=bool(remediation.get("in_progress", False)),
        data_age_s=_float(status.get("data_age_s")),
        reasons=tuple(str(r) for r in (health.get("reasons") or ())[:5]),
        version=str(status.get("version", "")),
        gpus_in_service=_int(status.get("gpus_in_service")),
        labels=_labels(status.get("labels")),
    )
