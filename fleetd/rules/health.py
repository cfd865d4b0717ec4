"""GPU and node health from alert state, data freshness and remediation.

Per GPU, in order of precedence:

0. ``out_of_service`` remediation has it out (a real run holds its lease or has its workers
                 out of rotation, or a finished run holds it: drained, quarantined, held).
                 Never healthy, whatever the readings say; the rules' own verdict is kept
                 as ``rules_state`` (a quarantined GPU may still be unhealthy);
1. ``unknown``   the GPU's own telemetry (``fleetd_gpu_up``) is stale or absent: no verdict
                 without data, in either direction;
2. ``unhealthy`` a critical alert is firing for it on fresh data;
3. ``unknown``   an alert that was firing for it has lost its data (held, not resolved);
4. ``degraded``  a warning alert is firing for it;
5. ``healthy``   fresh data and nothing firing.

On a partitioned GPU (CPX, DPX, QPX: several logical devices, one per partition) board-level
data — temperatures, power, RAS, PCIe, XGMI, the kernel's and CPER's reports — lives on
partition 0 only, so partition 0's verdict is the physical GPU's: every other partition is at
least as bad (a physical GPU's fault makes all its partitions unhealthy), with a reason naming
partition 0. Health then rolls up partition → physical GPU (``physical_gpus``: the worst of its
partitions) → node (the worst of all).

Only rules with ``health: true`` count (the vLLM rules do not: a worker problem is not a GPU
fault, and counting it would make "worker down while its GPU is healthy" chase its own
tail). ``info`` alerts never change health. A node is as bad as its worst GPU or its own
node-level alerts, ranked healthy < out_of_service < degraded < unknown < unhealthy: a node
whose GPUs in service are all healthy but some are out is ``out_of_service``; a problem on a
GPU still serving outranks capacity someone took out on purpose. No GPUs is unknown.

Which GPUs are out of service comes from ``Remediation.status()`` through the pure
``out_of_service``; ``with_service`` lays it over a verdict, so the rule engine (for
``fleetd_gpu_health``, which ``VllmWorkerDown`` reads: a worker stopped by remediation is not
a worker down on a healthy GPU), the API and the daemon's status line all say the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from fleetd.configbase import format_duration
from fleetd.logs import get_logger
from fleetd.model import (
    AlertState,
    Health,
    HealthState,
    Labels,
    OutOfService,
    Sample,
    SeriesKey,
    ServiceReason,
    Severity,
    Snapshot,
    label_value,
    make_labels,
)
from fleetd.rules.state import AlertEntry

if TYPE_CHECKING:  # remediation's types, read by structure only: no import at run time
    from fleetd.remedy.machine import Run
    from fleetd.remedy.service import RemediationHolds, RemediationStatus

GPU_UP_METRIC = "fleetd_gpu_up"
GPU_INFO_METRIC = "fleetd_gpu_info"
BOARD_REASON = "physical GPU (partition 0, gpu {gpu}): "
"""How a secondary partition's reason that is its physical GPU's (partition 0's) begins."""
HEALTH_METRIC = "fleetd_gpu_health"
IN_SERVICE = "in_service"
SERVICE_STATES = (IN_SERVICE, *(r.value for r in ServiceReason))
"""The ``state`` values of ``fleetd_gpu_service``."""

ServiceMap = Mapping[str, OutOfService]
"""GPU index (as the ``gpu`` label) → why it is out of service; absent: in service."""

_RANK = {
    HealthState.HEALTHY: 0,
    HealthState.OUT_OF_SERVICE: 1,
    HealthState.DEGRADED: 2,
    HealthState.UNKNOWN: 3,
    HealthState.UNHEALTHY: 4,
}
_HOLD_REASONS = {"quarantined": ServiceReason.QUARANTINED, "drained": ServiceReason.DRAINED}
NO_ALERTS = Health(HealthState.HEALTHY, None)

log = get_logger("rules.health")


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """One GPU's verdict; ``rules`` is the verdict before remediation was laid over it;
    ``physical``: on a partitioned GPU, the ``gpu`` index of its physical GPU's partition 0
    (None: unpartitioned, the GPU is its own physical GPU)."""

    gpu: str
    uuid: str | None
    health: Health
    rules: Health | None = None
    physical: str | None = None

    @property
    def physical_gpu(self) -> str:
        """The ``gpu`` index that names this GPU's physical GPU (partition 0's)."""
        return self.physical if self.physical is not None else self.gpu

    @property
    def rules_verdict(self) -> Health:
        return self.rules if self.rules is not None else self.health

    @property
    def in_service(self) -> bool:
        return self.health.out_of_service is None


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The verdict for the node and each GPU, as of ``at``; ``alerts`` is what the node's
    own (GPU-less) alerts say, kept so the roll-up can be made again."""

    node: Health
    gpus: tuple[GpuHealth, ...]
    at: float
    alerts: Health = NO_ALERTS

    def gpu(self, index: str | int) -> GpuHealth | None:
        for item in self.gpus:
            if item.gpu == str(index):
                return item
        return None

    @property
    def in_service(self) -> int:
        return sum(1 for g in self.gpus if g.in_service)

    @property
    def healthy(self) -> int:
        return sum(1 for g in self.gpus if g.health.state == HealthState.HEALTHY)


@dataclass(frozen=True, slots=True)
class PhysicalHealth:
    """A physical GPU and its partitions (one, unpartitioned), with the worst of their
    verdicts."""

    gpu: str  # partition 0's index
    partitions: tuple[str, ...]
    health: Health


def inherited(reason: str) -> bool:
    """Whether ``reason`` is a partition's copy of its physical GPU's (``BOARD_REASON``)."""
    return reason.startswith("physical GPU (partition 0, gpu ")


def worst(states: Iterable[HealthState]) -> HealthState:
    """The worst of ``states`` (healthy < out_of_service < degraded < unknown < unhealthy);
    unknown when there are none."""
    return max(states, key=_RANK.__getitem__, default=HealthState.UNKNOWN)


def physical_gpus(report: NodeHealth) -> list[PhysicalHealth]:
    """The roll-up partition → physical GPU: each physical GPU as bad as its worst partition
    (the reasons of every partition that is not healthy, each named)."""
    groups: dict[str, list[GpuHealth]] = {}
    for item in report.gpus:
        groups.setdefault(item.physical_gpu, []).append(item)
    out: list[PhysicalHealth] = []
    for gpu, members in groups.items():
        worst = max(members, key=lambda m: _RANK[m.health.state])
        if len(members) == 1:
            verdict = worst.health
        else:
            ages = [m.health.data_age_s for m in members]
            age = None if any(a is None for a in ages) else max(a for a in ages if a is not None)
            reasons = tuple(
                f"partition gpu {m.gpu}: {reason}"
                for m in members
                if m.health.state != HealthState.HEALTHY
                for reason in (m.health.reasons or (m.health.state.value,))
                if not inherited(reason)  # said once, by partition 0
            )
            verdict = Health(worst.health.state, age, reasons)
        out.append(PhysicalHealth(gpu, tuple(m.gpu for m in members), verdict))
    return out


def physical_of(info: Iterable[SeriesKey]) -> dict[str, str]:
    """Each partition's physical GPU (its partition 0's ``gpu``), from the ``fleetd_gpu_info``
    series: partitions carry ``gpu_partition_id``, and those of one physical GPU share the
    PCI bus and device of their BDF and the serial number. Unpartitioned GPUs are left out;
    a partition whose partition 0 is not known is left out too (its own physical GPU)."""
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key in info:
        gpu, part, bdf = key.label("gpu"), key.label("gpu_partition_id"), key.label("bdf")
        if gpu is None or part is None or bdf is None:
            continue
        physical = (bdf.rsplit(".", 1)[0], key.label("serial") or "")
        members.setdefault(physical, []).append((gpu, part))
    out: dict[str, str] = {}
    for partitions in members.values():
        primary = next((gpu for gpu, part in partitions if part == "0"), None)
        if primary is None:
            continue
        for gpu, _ in partitions:
            if gpu != primary:
                out[gpu] = primary
    return out


def assess(
    gpu_up: Mapping[SeriesKey, Sample | None],
    alerts: Iterable[AlertEntry],
    now: float,
    *,
    stale_after_s: float,
    service: ServiceMap | None = None,
    last_read: Mapping[str, float] | None = None,
    physical: Mapping[str, str] | None = None,
) -> NodeHealth:
    """Health of every GPU known from ``fleetd_gpu_up`` (newest sample per series, or None),
    with the GPUs in ``service`` out of service.

    ``physical``: each secondary partition's partition 0 (``physical_of``); a partition is at
    least as bad as its partition 0, where the physical GPU's board-level data is.

    ``last_read``: per GPU, when its last successful reading was (``fleetd_gpu_up`` 1). The
    poller writes ``fleetd_gpu_up`` every poll, 0 while the GPU cannot be read, so the newest
    sample says only that the poller is alive; a GPU's data age is the time since
    ``last_read`` when it is given (and growing while readings are missing)."""
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
        gpu = label_value(entry.alert.key.labels, "gpu")
        if gpu is None:
            node_level.append(entry)
        else:
            per_gpu.setdefault(gpu, []).append(entry)
    read = last_read or {}
    own = {
        gpu: _aged(_gpu_verdict(ts, per_gpu.get(gpu, ()), now, stale_after_s), read.get(gpu), now)
        for gpu, (_, ts) in newest.items()
    }
    parents = physical or {}
    gpus = tuple(
        GpuHealth(
            gpu,
            uuid,
            _with_board(own[gpu], parents.get(gpu), own),
            physical=parents.get(gpu),
        )
        for gpu, (uuid, _) in sorted(newest.items(), key=lambda item: _index_order(item[0]))
    )
    placeholder = Health(HealthState.UNKNOWN, None)  # with_service makes the roll-up
    rules_only = NodeHealth(placeholder, gpus, now, _alerts_verdict(node_level, now))
    return with_service(rules_only, service or {})


def with_service(report: NodeHealth, service: ServiceMap) -> NodeHealth:
    """``report`` with the GPUs in ``service`` out of service and the node rolled up again.

    Works from each GPU's rules verdict, so laying a newer ``service`` over a report that
    already had one replaces it (the API does, with remediation's state at request time).
    """
    gpus = tuple(_served(g, service.get(g.gpu)) for g in report.gpus)
    return NodeHealth(_node_verdict(gpus, report.alerts), gpus, report.at, report.alerts)


def out_of_service(
    status: RemediationStatus | RemediationHolds,
    lookup: Callable[[str], Run | None] | None = None,
) -> dict[str, OutOfService]:
    """The GPUs remediation has out of service, from ``Remediation.status()`` or ``holds()``.

    Held GPUs (quarantined, drained, or left out by a cancelled or aborted run) are out until
    an undrain completes; an undrain under way does not put them back early. A run in
    progress takes its unit out once it holds its lease or has a worker out of rotation; a
    run still waiting in ``planned`` has touched nothing. Dry runs touch nothing: never out
    (``lookup``, ``Remediation.run``, tells a dry hold from a real one).
    """
    out: dict[str, OutOfService] = {}
    for hold in status.held:
        run = lookup(hold.run_id) if lookup is not None else None
        if run is not None and run.dry_run:
            continue
        reason = _HOLD_REASONS.get(hold.state, ServiceReason.HELD)
        plan = run.plan.value if run is not None else "unknown"
        for index in hold.gpus:
            out.setdefault(
                str(index),
                OutOfService(reason, hold.run_id, plan, hold.state, hold.since, hold.reason),
            )
    for active in status.active:
        if active.dry_run or active.terminal:
            continue
        if not (active.lease_held or active.out_of_rotation()):
            continue
        for index in active.gpu_indices:
            out.setdefault(
                str(index),
                OutOfService(
                    ServiceReason.REMEDIATING,
                    active.run_id,
                    active.plan.value,
                    active.state.value,
                    active.created_at,
                    active.trigger.describe(),
                ),
            )
    return out


class ServiceWatch:
    """``out_of_service`` as the rule engine reads it each evaluation (``__call__``: the last
    answer). The daemon ``refresh``es it before it evaluates, outside the engine's lock, so
    a slow read of remediation's state (the fleet lease lives in the registry) never holds
    up the API's reads of alerts. A read that fails keeps the last answer: a GPU never
    counts as back in service because its journal could not be read."""

    def __init__(self, read: Callable[[], ServiceMap]) -> None:
        self._read = read
        self._last: dict[str, OutOfService] = {}
        self._failing = False

    def refresh(self) -> ServiceMap:
        try:
            self._last = dict(self._read())
        except Exception as exc:
            if not self._failing:
                log.warning("service_state_unreadable", error=repr(exc))
            self._failing = True
            return self._last
        self._failing = False
        return self._last

    def __call__(self) -> ServiceMap:
        return self._last


def health_vector(report: NodeHealth | None) -> dict[Labels, float]:
    """``fleetd_gpu_health{gpu,uuid,state}``: 1 for each GPU's current state, 0 for the others."""
    out: dict[Labels, float] = {}
    if report is None:
        return out
    for item in report.gpus:
        current = item.health.state
        for state, labels in zip(HEALTH_STATES, health_labels(item.gpu, item.uuid), strict=True):
            out[labels] = 1.0 if current == state else 0.0
    return out


HEALTH_STATES = tuple(HealthState)  # iterating the Enum itself costs ten times more, every tick


@lru_cache(maxsize=1024)
def health_labels(gpu: str, uuid: str | None) -> tuple[Labels, ...]:
    """``fleetd_gpu_health``'s labels for each of ``HEALTH_STATES``, built once a device
    (every evaluation writes them: 320 on a CPX node); no ``uuid`` label when it is None."""
    base = {"gpu": gpu} if uuid is None else {"gpu": gpu, "uuid": uuid}
    return tuple(make_labels({**base, "state": state.value}) for state in HEALTH_STATES)


def service_state(item: GpuHealth) -> str:
    """The GPU's ``fleetd_gpu_service`` state: in_service, or why it is out."""
    hold = item.health.out_of_service
    return IN_SERVICE if hold is None else hold.reason.value


def status_line(report: NodeHealth | None, snapshot: Snapshot, storage_degraded: bool) -> str:
    """systemd's STATUS=: ``summary_parts`` and the storage state, joined."""
    if report is None:
        return f"{len(snapshot.gpus)} GPUs polled; rules not evaluated yet"
    parts = summary_parts(report)
    if storage_degraded:
        parts.append("storage degraded")
    return "; ".join(parts)


def summary_parts(report: NodeHealth) -> list[str]:
    """``6/8 GPUs healthy``, ``6/8 in service``, then what is wrong (GPUs out of service by
    one run together), for systemd's STATUS line."""
    total = len(report.gpus)
    parts = [f"{report.healthy}/{total} GPUs healthy"]
    if report.in_service < total:
        parts.append(f"{report.in_service}/{total} in service")
    for gpus, hold in _out_groups(report.gpus):
        parts.append(f"GPU{_span(gpus)} {hold.reason.value} (run {hold.run_id})")
    for gpu in report.gpus:
        if gpu.in_service and gpu.health.state != HealthState.HEALTHY:
            parts.append(f"GPU{gpu.gpu} {gpu.health.state.value}")
    return parts


def _out_groups(gpus: Iterable[GpuHealth]) -> list[tuple[list[str], OutOfService]]:
    """GPUs out of service, grouped by the run and reason that has them out."""
    groups: dict[tuple[str, ServiceReason], tuple[list[str], OutOfService]] = {}
    for gpu in gpus:
        hold = gpu.health.out_of_service
        if hold is not None:
            groups.setdefault((hold.run_id, hold.reason), ([], hold))[0].append(gpu.gpu)
    return list(groups.values())


def _span(gpus: list[str]) -> str:
    """``3``, ``0-7`` or ``1,4``: GPU indices as people write them."""
    if len(gpus) > 2 and all(g.isdigit() for g in gpus):
        numbers = [int(g) for g in gpus]
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{numbers[0]}-{numbers[-1]}"
    return ",".join(gpus)


def serve(rules: Health, hold: OutOfService | None) -> Health:
    """The verdict of a GPU whose rules verdict is ``rules``, out of service when ``hold``."""
    if hold is None:
        return rules
    what = hold.describe() + (f": {hold.detail}" if hold.detail else "")
    judged = () if rules.state == HealthState.HEALTHY else (f"rules say {rules.state.value}",)
    return Health(
        HealthState.OUT_OF_SERVICE,
        rules.data_age_s,
        (what, *judged, *rules.reasons),
        out_of_service=hold,
        rules_state=rules.state,
    )


def _served(item: GpuHealth, hold: OutOfService | None) -> GpuHealth:
    rules = item.rules_verdict
    if hold is None:
        return GpuHealth(item.gpu, item.uuid, rules, physical=item.physical)
    return GpuHealth(item.gpu, item.uuid, serve(rules, hold), rules, physical=item.physical)


def _with_board(verdict: Health, primary: str | None, own: Mapping[str, Health]) -> Health:
    """A secondary partition's verdict with its physical GPU's (partition 0's) laid over it:
    the worse of the two, the board's reasons named as partition 0's."""
    board = own.get(primary) if primary is not None else None
    if board is None or _RANK[board.state] <= _RANK[verdict.state]:
        return verdict
    reasons = tuple(
        BOARD_REASON.format(gpu=primary) + reason
        for reason in (board.reasons or (board.state.value,))
    )
    return Health(board.state, verdict.data_age_s, (*reasons, *verdict.reasons))


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


def _aged(verdict: Health, last_read: float | None, now: float) -> Health:
    """``verdict`` with its data age counted from the GPU's last successful reading."""
    if last_read is None or verdict.data_age_s is None:
        return verdict
    age = max(verdict.data_age_s, now - last_read)
    return verdict if age == verdict.data_age_s else replace(verdict, data_age_s=age)


def _alerts_verdict(node_level: Iterable[AlertEntry], now: float) -> Health:
    """What the node's own alerts say (healthy when none fires)."""
    state = HealthState.HEALTHY
    reasons: list[str] = []
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
    return Health(state, None, tuple(reasons))


def _node_verdict(gpus: tuple[GpuHealth, ...], alerts: Health) -> Health:
    ages = [g.health.data_age_s for g in gpus]
    age = (
        None if not gpus or any(a is None for a in ages) else max(a for a in ages if a is not None)
    )
    if not gpus:
        return Health(HealthState.UNKNOWN, None, ("no GPUs known",))
    state = max((g.health.state for g in gpus), key=_RANK.__getitem__)
    state = max(state, alerts.state, key=_RANK.__getitem__)
    reasons = [  # problems in service first: they are what needs a person
        f"gpu {g.gpu}: {g.health.state.value}"
        for g in gpus
        if g.in_service and g.health.state != HealthState.HEALTHY
    ]
    reasons += [
        f"gpu{'s' if len(indices) > 1 else ''} {_span(indices)}: "
        f"{hold.reason.value} (run {hold.run_id})"
        for indices, hold in _out_groups(gpus)
    ]
    reasons.extend(alerts.reasons)
    rules = max((g.rules_verdict.state for g in gpus), key=_RANK.__getitem__)
    rules = max(rules, alerts.state, key=_RANK.__getitem__)
    return Health(state, age, tuple(reasons), rules_state=rules if rules != state else None)


def _index_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
