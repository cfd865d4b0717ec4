"""The node's status: health, each GPU with its key readings, alerts, remediation, data age.

Readings come from the newest poll, as the collectors reported them: a reading that was
missing in that poll is ``null`` here, never zero. The same document is what the fleet
registry publishes and what ``fleetctl status`` reads, so its fields are the contract of
the fleet view (docs/api/openapi.yaml, ``NodeStatus``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from fleetd.api.alerts import current_alerts, firing
from fleetd.api.services import ApiServices
from fleetd.api.views import (
    Json,
    breaker_view,
    gpu_of,
    health_view,
    held_view,
    pause_view,
    run_view,
    severity_counts,
)
from fleetd.configbase import format_duration
from fleetd.model import GpuStatus, Health, HealthState, Reading, Snapshot, label_value
from fleetd.remedy.journal import PauseState
from fleetd.remedy.machine import Run
from fleetd.remedy.service import HeldGpus, RemediationStatus
from fleetd.rules.health import (
    NodeHealth,
    ServiceMap,
    inherited,
    out_of_service,
    serve,
    with_service,
    worst,
)

UNKNOWN = Health(HealthState.UNKNOWN, None, ("no health verdict yet",))


@dataclass(frozen=True, slots=True)
class KeyReading:
    """One field of a GPU's ``readings``: which metric, which labels, how to combine series."""

    name: str
    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    combine: str = "one"  # one | sum | zeros (how many series read 0)


KEY_READINGS: tuple[KeyReading, ...] = (
    KeyReading("temperature_hotspot_c", "fleetd_gpu_temperature_celsius", (("sensor", "hotspot"),)),
    KeyReading("temperature_hbm_c", "fleetd_gpu_temperature_celsius", (("sensor", "hbm"),)),
    KeyReading(
        "temperature_hotspot_limit_c",
        "fleetd_gpu_temperature_limit_celsius",
        (("sensor", "hotspot"), ("limit", "critical")),
    ),
    KeyReading("power_w", "fleetd_gpu_power_watts"),
    KeyReading("power_cap_w", "fleetd_gpu_power_cap_watts"),
    KeyReading("utilization_gfx", "fleetd_gpu_utilization_ratio", (("engine", "gfx"),)),
    KeyReading("memory_used_bytes", "fleetd_gpu_memory_used_bytes"),
    KeyReading("memory_total_bytes", "fleetd_gpu_memory_total_bytes"),
    KeyReading("ecc_correctable_total", "fleetd_gpu_ecc_errors_total", (("type", "correctable"),)),
    KeyReading(
        "ecc_uncorrectable_total", "fleetd_gpu_ecc_errors_total", (("type", "uncorrectable"),)
    ),
    KeyReading("ecc_deferred_total", "fleetd_gpu_ecc_errors_total", (("type", "deferred"),)),
    KeyReading("retired_pages", "fleetd_gpu_retired_pages", combine="sum"),
    KeyReading("pcie_width", "fleetd_gpu_pcie_link_width_lanes"),
    KeyReading("pcie_max_width", "fleetd_gpu_pcie_link_max_width_lanes"),
    KeyReading("pcie_speed_gts", "fleetd_gpu_pcie_link_speed_gigatransfers_per_second"),
    KeyReading("pcie_max_speed_gts", "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second"),
    KeyReading("xgmi_links_up", "fleetd_gpu_xgmi_links", (("state", "up"),)),
    # the baseline links that read down, as GpuXgmiLinkDown and the live view count them; not
    # fleetd_gpu_xgmi_links{state="down"}, which counts the port to itself (1 when healthy)
    KeyReading("xgmi_links_down", "fleetd_gpu_xgmi_link_up", combine="zeros"),
)

_WANTED = frozenset(k.metric for k in KEY_READINGS) | {"fleetd_gpu_info"}
_NO_READINGS: dict[str, float | None] = {spec.name: None for spec in KEY_READINGS}


@dataclass(slots=True)
class _GpuReadings:
    by_metric: dict[str, list[Reading]] = field(default_factory=dict)


_memo: tuple[Snapshot, dict[int, _GpuReadings], dict[int, dict[str, float | None]]] | None = None


def _indexed(
    snapshot: Snapshot | None,
) -> tuple[dict[int, _GpuReadings], dict[int, dict[str, float | None]]]:
    """Each GPU's ``fleetd_gpu_info`` readings and its ``key_readings``, computed once per
    snapshot: a burst of status requests (every scraper of the fleet at once) between two
    polls shares them. The snapshot is immutable, so the memo is valid as long as it is the
    same object. One pass over the readings with each series' role remembered
    (``tests/api/test_status_readings.py`` holds it to a plain grouping and filtering)."""
    global _memo
    memo = _memo
    if snapshot is None:
        return {}, {}
    if memo is not None and memo[0] is snapshot:
        return memo[1], memo[2]
    readings: dict[int, _GpuReadings] = {}
    values: dict[int, list[list[float | None]]] = {}
    for reading in snapshot.readings:
        metric = reading.metric
        if metric not in _WANTED:
            continue
        gpu, roles = _role(metric, reading.labels)
        if gpu is None:
            continue
        slots = values.get(gpu)
        if slots is None:
            slots = values[gpu] = [[] for _ in KEY_READINGS]
            readings[gpu] = _GpuReadings()
        if metric == "fleetd_gpu_info":
            readings[gpu].by_metric.setdefault(metric, []).append(reading)
        for role in roles:
            slots[role].append(reading.value)
    keys = {
        gpu: {
            spec.name: _combine(spec, found)
            for spec, found in zip(KEY_READINGS, slots, strict=True)
        }
        for gpu, slots in values.items()
    }
    _memo = (snapshot, readings, keys)
    return readings, keys


_ROLE_LIMIT = 100_000  # series remembered; far above any node's count of wanted series
_roles: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int | None, tuple[int, ...]]] = {}


def _role(metric: str, labels: tuple[tuple[str, str], ...]) -> tuple[int | None, tuple[int, ...]]:
    """The GPU a series is of and the key readings it counts in (positions in
    KEY_READINGS); the same series come every poll, so it is worked out once per series."""
    key = (metric, labels)
    found = _roles.get(key)
    if found is None:
        roles = tuple(
            i
            for i, spec in enumerate(KEY_READINGS)
            if spec.metric == metric and all(label_value(labels, k) == v for k, v in spec.labels)
        )
        found = (gpu_of(labels), roles)
        if len(_roles) >= _ROLE_LIMIT:
            _roles.clear()
        _roles[key] = found
    return found


def _combine(spec: KeyReading, values: list[float | None]) -> float | None:
    """One key reading from the values of its series: None when there is none or one is
    missing, else their sum, how many read 0 or the last one, as ``spec`` says."""
    if not values or any(v is None for v in values):
        return None
    if spec.combine == "sum":
        return float(sum(v for v in values if v is not None))
    if spec.combine == "zeros":
        return float(sum(1 for v in values if v == 0))
    return values[-1]


def _identity(status: GpuStatus | None, readings: _GpuReadings | None) -> Json:
    if status is not None:
        gpu = status.gpu
        return {
            "uuid": gpu.uuid,
            "bdf": gpu.bdf,
            "model": gpu.model,
            "product": gpu.product,
            "serial": gpu.serial,
            "hive_id": gpu.hive_id,
            "partition": {
                "id": gpu.partition_id,
                "compute": gpu.compute_partition,
                "memory": gpu.memory_partition,
            }
            if gpu.partitioned
            else None,
        }
    info = (readings.by_metric.get("fleetd_gpu_info") if readings else None) or []
    labels = dict(info[-1].labels) if info else {}
    part = labels.get("gpu_partition_id")
    return {
        "uuid": labels.get("uuid"),
        "bdf": labels.get("bdf"),
        "model": labels.get("model"),
        "product": labels.get("product"),
        "serial": labels.get("serial"),
        "hive_id": labels.get("hive_id"),
        "partition": {
            "id": int(part) if part.isdigit() else None,
            "compute": labels.get("gpu_compute_partition_type") or None,
            "memory": labels.get("gpu_memory_partition_type") or None,
        }
        if part is not None
        else None,
    }


def _physical_index(snapshot: Snapshot | None, health: NodeHealth | None) -> dict[int, int]:
    """Each partition's physical GPU, as the index of its partition 0 (from the poll's
    identities, else from the health verdict); unpartitioned GPUs are their own."""
    out: dict[int, int] = {}
    if health is not None:
        for item in health.gpus:
            if item.physical is not None and item.gpu.isdigit() and item.physical.isdigit():
                out[int(item.gpu)] = int(item.physical)
    if snapshot is not None:
        primaries = {
            (s.gpu.bdf, s.gpu.serial): s.gpu.index
            for s in snapshot.gpus
            if s.gpu.partitioned and s.gpu.primary
        }
        for s in snapshot.gpus:
            primary = primaries.get((s.gpu.physical_bdf, s.gpu.serial))
            if s.gpu.partitioned and primary is not None:
                out[s.gpu.index] = primary
    return out


def physical_entries(gpus: Sequence[Json]) -> list[Json]:
    """The roll-up partition → physical GPU over ``gpu_entries``: each physical GPU (its
    partition 0's identity) with its partitions' indices and the worst of their verdicts."""
    groups: dict[int, list[Json]] = {}
    for entry in gpus:
        groups.setdefault(entry["physical_gpu"], []).append(entry)
    out: list[Json] = []
    for number, (index, members) in enumerate(groups.items()):
        head = next((m for m in members if m["gpu"] == index), members[0])
        part = head.get("partition") or {}
        out.append(
            {
                "gpu": index,
                "physical": number,
                "bdf": head.get("bdf"),
                "serial": head.get("serial"),
                "model": head.get("model"),
                "hive_id": head.get("hive_id"),
                "compute_partition": part.get("compute"),
                "memory_partition": part.get("memory"),
                "partitions": [m["gpu"] for m in members],
                "health": _worst_view(members, head["health"]),
            }
        )
    return out


def _worst_view(members: Sequence[Json], head: Json) -> Json:
    """One health view for several partitions' views: the worst state, each partition's
    problems named, and partition 0's out-of-service (a reset unit is whole physical GPUs)."""
    verdicts: list[Json] = [m["health"] for m in members]
    if len(verdicts) == 1:
        return verdicts[0]
    state = worst(HealthState(v["state"]) for v in verdicts)
    ages = [v["data_age_s"] for v in verdicts]
    return {
        "state": state.value,
        "data_age_s": None if any(a is None for a in ages) else max(ages),
        "reasons": [
            f"gpu {m['gpu']}: {reason}"
            for m in members
            if m["health"]["state"] != HealthState.HEALTHY.value
            for reason in (m["health"]["reasons"] or [m["health"]["state"]])
            if not inherited(reason)  # said once, by partition 0
        ],
        "rules_state": worst(HealthState(v["rules_state"]) for v in verdicts).value,
        "out_of_service": head["out_of_service"],
    }


def runs_by_gpu(
    active: Iterable[Run], held: Iterable[HeldGpus], lookup: Callable[[str], Run | None]
) -> dict[int, Json]:
    """The remediation state each GPU is in: an active run first, else a hold."""
    out: dict[int, Json] = {}
    for hold in held:
        run = lookup(hold.run_id)
        for gpu in hold.gpus:
            out[gpu] = {
                "run_id": hold.run_id,
                "plan": run.plan.value if run is not None else "unknown",
                "state": hold.state,
                "phase": hold.state,
                "dry_run": run.dry_run if run is not None else False,
                "holding": True,
            }
    for run in active:
        for gpu in run.gpu_indices:
            out[gpu] = _run_brief(run)
    return out


def _run_brief(run: Run) -> Json:
    return {
        "run_id": run.run_id,
        "plan": run.plan.value,
        "state": run.state.value,
        "phase": run.state.phase,
        "dry_run": run.dry_run,
        "holding": False,
    }


def gpu_entries(
    services: ApiServices,
    snapshot: Snapshot | None,
    health: NodeHealth | None,
    alerts: Sequence[Json],
    remediation: dict[int, Json],
    now: float,
    service: ServiceMap | None = None,
) -> list[Json]:
    """One entry per known GPU, in index order; a GPU in ``service`` is out of service even
    before its first verdict."""
    statuses = {s.gpu.index: s for s in snapshot.gpus} if snapshot is not None else {}
    readings, keys = _indexed(snapshot)
    physical = _physical_index(snapshot, health)
    out: list[Json] = []
    for index in services.known_gpus(snapshot, health):
        status = statuses.get(index)
        verdict = health.gpu(index) if health is not None else None
        judged = (
            aged(verdict.health, health.at, now, services)
            if verdict is not None and health is not None
            else serve(UNKNOWN, (service or {}).get(str(index)))
        )
        mine = [a for a in alerts if a["gpu"] == index and a["state"] == "firing"]
        out.append(
            {
                "gpu": index,
                **_identity(status, readings.get(index)),
                "physical_gpu": physical.get(index, index),
                "present": status.present if status is not None else None,
                "responsive": status.responsive if status is not None else None,
                "error": status.error if status is not None else None,
                "missing_readings": status.missing_readings if status is not None else None,
                "health": health_view(judged),
                "readings": dict(keys.get(index, _NO_READINGS)),
                "alerts": severity_counts(a["severity"] for a in mine),
                "remediation": remediation.get(index),
            }
        )
    return out


def remediation_summary(services: ApiServices) -> tuple[Json, RemediationStatus | None]:
    """The node's remediation state (and the facade's status it came from)."""
    if services.remedy is None:
        return (
            {
                "available": False,
                "mode": "off",
                "pause": pause_view(PauseState(False)),
                "breaker": {"tripped": False, "reason": None, "tripped_at": None},
                "lease_scope": None,
                "gpus_out_of_service": 0,
                "in_progress": False,
                "active": [],
                "held": [],
            },
            None,
        )
    status = services.remedy.status()
    return (
        {
            "available": True,
            "mode": status.mode,
            "pause": pause_view(status.paused),
            "breaker": breaker_view(status.breaker),
            "lease_scope": status.lease_scope,
            "gpus_out_of_service": status.gpus_out_of_service,
            "in_progress": bool(status.active),
            "active": [run_view(r) for r in status.active],
            "held": [held_view(h) for h in status.held],
        },
        status,
    )


def aged(
    verdict: Health, at: float, now: float, services: ApiServices, *, keep_service: bool = True
) -> Health:
    """A verdict made at ``at``, seen at ``now``: its data is older, and a verdict whose data
    has gone stale since (the poll loop stopped) is unknown, never healthy. A GPU out of
    service stays out (remediation's journal says so, not telemetry), its rules' verdict
    unknown; a node out of service is only so while its GPUs in service are known healthy,
    so it keeps that state when stale only with ``keep_service``."""
    if verdict.data_age_s is None:
        return verdict
    age = verdict.data_age_s + max(0.0, now - at)
    stale_after = services.engine.settings.lookback_s
    if age <= stale_after or verdict.state == HealthState.UNKNOWN:
        return replace(verdict, data_age_s=age)
    why = f"no fresh health verdict for {format_duration(round(age))}"
    if verdict.state == HealthState.OUT_OF_SERVICE and keep_service:
        rules = verdict.rules_state
        return replace(
            verdict,
            data_age_s=age,
            reasons=(*verdict.reasons[:1], why, *verdict.reasons[1:]),
            rules_state=HealthState.UNKNOWN if rules is not None else None,
        )
    return Health(HealthState.UNKNOWN, age, (why, *verdict.reasons))


def live_service(services: ApiServices, status: RemediationStatus | None) -> ServiceMap:
    """The GPUs out of service as remediation says now (the verdict may be a poll older)."""
    if status is None or services.remedy is None:
        return {}
    return out_of_service(status, services.remedy.run)


def node_status(services: ApiServices, now: float) -> Json:
    """The whole status document of this node."""
    snapshot = services.latest_snapshot()
    alerts = current_alerts(services, now)
    remediation, remedy_status = remediation_summary(services)
    service = live_service(services, remedy_status)
    health = services.health()
    if health is not None:
        health = with_service(health, service)
    per_gpu = (
        runs_by_gpu(remedy_status.active, remedy_status.held, services.remedy.run)
        if remedy_status is not None and services.remedy is not None
        else {}
    )
    gpus = gpu_entries(services, snapshot, health, alerts, per_gpu, now, service)
    node_health = (
        aged(health.node, health.at, now, services, keep_service=health.in_service == 0)
        if health is not None
        else UNKNOWN
    )
    hottest = [
        g["readings"]["temperature_hotspot_c"]
        for g in gpus
        if g["readings"]["temperature_hotspot_c"] is not None
    ]
    power = [g["readings"]["power_w"] for g in gpus if g["readings"]["power_w"] is not None]
    statuses = services.engine.rule_statuses()
    reload_status = services.engine.reload_status
    on = firing(alerts)
    return {
        "node": services.node,
        "version": services.version,
        "labels": dict(services.labels),
        "now": now,
        "started_at": services.started_at,
        "health": health_view(node_health),
        "last_poll_at": snapshot.ts if snapshot is not None else None,
        "data_age_s": round(max(0.0, now - snapshot.ts), 3) if snapshot is not None else None,
        "gpus_total": len(gpus),
        "gpus_healthy": sum(1 for g in gpus if g["health"]["state"] == "healthy"),
        "gpus_in_service": sum(1 for g in gpus if g["health"]["out_of_service"] is None),
        "hottest_junction_c": max(hottest) if hottest else None,
        "power_w": round(sum(power), 1) if power else None,
        "alerts": {
            **severity_counts(a["severity"] for a in on),
            "pending": sum(1 for a in alerts if a["state"] == "pending"),
            "firing": [
                {
                    "rule": a["rule"],
                    "severity": a["severity"],
                    "gpu": a["gpu"],
                    "summary": a["annotations"].get("summary"),
                    "silenced": bool(a["silenced_by"]),
                }
                for a in on
            ],
        },
        "remediation": remediation,
        "rules": {
            "loaded": len(statuses),
            "failing": [s.rule for s in statuses if s.health == "err"],
            "last_eval_at": services.engine.last_eval_at,
            "last_reload_ok": reload_status.last_ok,
            "last_reload_problems": list(reload_status.last_problems),
        },
        "gpus": gpus,
        "physical_gpus": physical_entries(gpus),
    }
