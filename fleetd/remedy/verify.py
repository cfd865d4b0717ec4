"""Is a reset unit healthy again? A pure reading of one poll's Snapshot.

A GPU passes a poll when it is up, its PCIe link is back at its maximum width and speed,
every XGMI link it reports is up, and none of those readings is missing — a missing reading
is never taken as healthy. The uncorrectable-error counters are returned so the machine can
compare them with the first poll after the reset ("no new uncorrectable errors").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from fleetd.model import Reading, Snapshot, label_value
from fleetd.remedy.machine import HealthResult

UP = "fleetd_gpu_up"
PCIE_WIDTH = "fleetd_gpu_pcie_link_width_lanes"
PCIE_MAX_WIDTH = "fleetd_gpu_pcie_link_max_width_lanes"
PCIE_SPEED = "fleetd_gpu_pcie_link_speed_gigatransfers_per_second"
PCIE_MAX_SPEED = "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second"
XGMI_UP = "fleetd_gpu_xgmi_link_up"
ECC = "fleetd_gpu_ecc_errors_total"

_WANTED = frozenset({UP, PCIE_WIDTH, PCIE_MAX_WIDTH, PCIE_SPEED, PCIE_MAX_SPEED, XGMI_UP, ECC})


def assess(snapshot: Snapshot, gpus: Iterable[int]) -> HealthResult:
    """Problems found on ``gpus`` in ``snapshot`` (empty when all pass) and UE counters."""
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
    for gpu in sorted(wanted):
        found, ue = _assess_gpu(gpu, by_gpu.get(gpu, []))
        problems += found
        if ue is not None:
            ue_counts.append((gpu, ue))
    return HealthResult(problems=tuple(problems), ue_counts=tuple(ue_counts))


def _assess_gpu(gpu: int, readings: list[Reading]) -> tuple[list[str], float | None]:
    values: dict[str, Reading] = {}
    links: list[Reading] = []
    ue: Reading | None = None
    for r in readings:
        if r.metric == XGMI_UP:
            links.append(r)
        elif r.metric == ECC:
            if label_value(r.labels, "type") == "uncorrectable":
                ue = r
        else:
            values[r.metric] = r
    problems: list[str] = []
    up = values.get(UP)
    if up is None or up.value is None:
        return [f"GPU {gpu}: not reported"], None
    if up.value != 1:
        return [f"GPU {gpu}: down"], None
    problems += _at_max(gpu, values, PCIE_WIDTH, PCIE_MAX_WIDTH, "PCIe width", "lanes")
    problems += _at_max(gpu, values, PCIE_SPEED, PCIE_MAX_SPEED, "PCIe speed", "GT/s")
    for link in sorted(links, key=lambda r: label_value(r.labels, "link") or ""):
        name = label_value(link.labels, "link") or "?"
        if link.value is None:
            problems.append(f"GPU {gpu}: XGMI link {name} status missing")
        elif link.value != 1:
            problems.append(f"GPU {gpu}: XGMI link {name} down")
    if ue is not None and ue.value is None:
        problems.append(f"GPU {gpu}: uncorrectable-error count missing")
    return problems, (ue.value if ue is not None else None)


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
