"""Is a reset unit healthy again? Pure readings of one poll's Snapshot and of the alerts.

A GPU passes a poll when it is up, its PCIe link is back at its maximum width and speed,
every XGMI link it reports is up, and none of those readings is missing — a missing reading
is never taken as healthy. The uncorrectable-error counters (uncorrectable + deferred) are
returned so the machine can compare them with the baseline read just before the reset.

A reset that leaves the fault in place must not pass because the counters look quiet, so
the rules have a say too (``alert_problems``): after the reset, the alert that started the
run and every critical health alert of the unit's GPUs must have been seen with their
condition clear — except an alert on the uncorrectable counts of a GPU whose counts the poll
read: the machine judges those against the pre-reset baseline (``steps.counters``), knowing
whether the reset zeroed or kept them, while the rule's ``increase(…[10m])`` still sees the
pre-reset fault for ten minutes when the driver keeps its counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from fleetd.model import Alert, AlertState, Reading, Severity, Snapshot, label_value
from fleetd.remedy.messages import HealthResult

UP = "fleetd_gpu_up"
PCIE_WIDTH = "fleetd_gpu_pcie_link_width_lanes"
PCIE_MAX_WIDTH = "fleetd_gpu_pcie_link_max_width_lanes"
PCIE_SPEED = "fleetd_gpu_pcie_link_speed_gigatransfers_per_second"
PCIE_MAX_SPEED = "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second"
XGMI_UP = "fleetd_gpu_xgmi_link_up"
ECC = "fleetd_gpu_ecc_errors_total"

_WANTED = frozenset({UP, PCIE_WIDTH, PCIE_MAX_WIDTH, PCIE_SPEED, PCIE_MAX_SPEED, XGMI_UP, ECC})
_UE_TYPES = frozenset({"uncorrectable", "deferred"})


def assess(snapshot: Snapshot, gpus: Iterable[int]) -> HealthResult:
    """Problems found on ``gpus`` in ``snapshot`` (empty when all pass) and RAS counters."""
    wanted = set(gpus)
    by_gpu: dict[int, list[Reading]] = defaultdict(list)
    for reading in snapshot.readings:
        if reading.metric not in _WANTED:
            continue
        label = label_value(reading.labels, "gpu")
        if label is None or not label.isdigit() or int(label) not in wanted:
            continue
        by_gpu[int(label)].append(reading)
    problems: list[str] = []
    ue_counts: list[tuple[int, float]] = []
    ce_counts: list[tuple[int, float]] = []
    for gpu in sorted(wanted):
        found, ue, ce = _assess_gpu(gpu, by_gpu.get(gpu, []))
        problems += found
        if ue is not None:
            ue_counts.append((gpu, ue))
        if ce is not None:
            ce_counts.append((gpu, ce))
    return HealthResult(
        problems=tuple(problems), ue_counts=tuple(ue_counts), ce_counts=tuple(ce_counts)
    )


def _assess_gpu(gpu: int, readings: list[Reading]) -> tuple[list[str], float | None, float | None]:
    values: dict[str, Reading] = {}
    links: list[Reading] = []
    ue: list[Reading] = []
    ce: list[Reading] = []
    for r in readings:
        if r.metric == XGMI_UP:
            links.append(r)
        elif r.metric == ECC:
            kind = label_value(r.labels, "type")
            if kind in _UE_TYPES:
                ue.append(r)
            elif kind == "correctable":
                ce.append(r)
        else:
            values[r.metric] = r
    problems: list[str] = []
    up = values.get(UP)
    if up is None or up.value is None:
        return [f"GPU {gpu}: not reported"], None, None
    if up.value != 1:
        return [f"GPU {gpu}: down"], None, None
    problems += _at_max(gpu, values, PCIE_WIDTH, PCIE_MAX_WIDTH, "PCIe width", "lanes")
    problems += _at_max(gpu, values, PCIE_SPEED, PCIE_MAX_SPEED, "PCIe speed", "GT/s")
    for link in sorted(links, key=lambda r: label_value(r.labels, "link") or ""):
        name = label_value(link.labels, "link") or "?"
        if link.value is None:
            problems.append(f"GPU {gpu}: XGMI link {name} status missing")
        elif link.value != 1:
            problems.append(f"GPU {gpu}: XGMI link {name} down")
    if any(r.value is None for r in ue):
        problems.append(f"GPU {gpu}: uncorrectable-error count missing")
        return problems, None, _total(ce)
    return problems, _total(ue), _total(ce)


def _total(readings: list[Reading]) -> float | None:
    """The sum of a GPU's counters of one kind; None when none (or any) was read."""
    if not readings or any(r.value is None for r in readings):
        return None
    return sum(r.value for r in readings if r.value is not None)


def _at_max(
    gpu: int, values: dict[str, Reading], cur: str, top: str, what: str, unit: str
) -> list[str]:
    current = values.get(cur)
    maximum = values.get(top)
    if current is None and maximum is None:
        return []  # the backend does not report this link: nothing to compare
    if current is None or current.value is None or maximum is None or maximum.value is None:
        return [f"GPU {gpu}: {what} missing"]
    if current.value < maximum.value:
        return [f"GPU {gpu}: {what} {current.value:g} {unit}, below max {maximum.value:g}"]
    return []


def judged_by_counts(
    ue_counts: Iterable[tuple[int, float]], ue_baseline: Iterable[tuple[int, float]]
) -> set[int]:
    """The GPUs whose uncorrectable counts decide (``alert_problems``' ``counted``): read by
    this poll *and* before the reset. Without a pre-reset count a new error after the reset
    cannot be told from the old one (the GPU whose count could not be read is often the sick
    one), so the rules' alert keeps its say there."""
    return {gpu for gpu, _ in ue_counts} & {gpu for gpu, _ in ue_baseline}


def alert_problems(
    alerts: Iterable[Alert],
    gpus: Iterable[int],
    *,
    trigger_fingerprint: str | None,
    since: float,
    evaluated_at: float | None,
    counted: Iterable[int] = (),
) -> list[str]:
    """Faults the rules still see on ``gpus`` after the reset at ``since``.

    ``alerts`` are the health-counting alerts of the rules engine, as of its evaluation at
    ``evaluated_at``. A firing alert whose condition holds (``keep_firing_since`` unset: not
    cleared, not merely kept open by the run) blocks re-admission when it is the run's
    trigger or a critical alert on one of the unit's GPUs. Until the rules have evaluated
    data from after the reset, nothing is proven.

    ``counted``: the GPUs whose uncorrectable + deferred counts this poll read and the run
    read before the reset (``judged_by_counts``). An alert on
    those counts (``type`` uncorrectable or deferred) of such a GPU is not the rules' to
    judge: its window reaches back before the reset, and the counts compared with the
    pre-reset baseline say exactly whether an error is new (``steps.counters.new_errors``).
    """
    if evaluated_at is None or evaluated_at <= since:
        return ["waiting for the health rules to evaluate a poll taken after the reset"]
    unit = {str(g) for g in gpus}
    judged_by_counts = {str(g) for g in counted}
    problems: list[str] = []
    for alert in alerts:
        if alert.state is not AlertState.FIRING or alert.keep_firing_since is not None:
            continue
        gpu = label_value(alert.labels, "gpu")
        if gpu in judged_by_counts and label_value(alert.labels, "type") in _UE_TYPES:
            continue
        if alert.key.fingerprint() == trigger_fingerprint:
            where = f"GPU {gpu}: " if gpu else ""
            problems.append(f"{where}{alert.key.rule} (the alert that started this run) holds")
        elif gpu in unit and alert.severity is Severity.CRITICAL:
            problems.append(f"GPU {gpu}: {alert.key.rule} (critical) holds")
    return problems
