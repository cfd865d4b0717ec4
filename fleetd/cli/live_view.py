"""The compact live view `fleetd demo` prints: one row per GPU, faults highlighted.

Pure rendering: it takes a Snapshot (and what the daemon knows about alerts and remediation)
and returns a rich renderable, so it is testable without a terminal.

XGMI "down" is judged as ``GpuXgmiLinkDown`` judges it: the links of the GPU's learned
baseline (``fleetd_gpu_xgmi_link_up``) that now read 0. ``fleetd_gpu_xgmi_links{state="down"}``
counts every port read "D", the port to itself included, so a healthy GPU reads 1 there
(``fleetd/collect/collectors/xgmi.py``). "Up" is ``fleetd_gpu_xgmi_links{state="up"}``, the
XGMI column of ``fleetctl status``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fleetd.collect.collectors.xgmi import LINK_UP as XGMI_LINK_UP
from fleetd.model import Alert, AlertState, Reading, Snapshot


@dataclass(frozen=True, slots=True)
class GpuRow:
    """The handful of readings the live view shows for one GPU (None = missing)."""

    index: int
    up: bool
    hotspot: float | None = None
    hotspot_crit: float | None = None
    hbm: float | None = None
    power: float | None = None
    power_cap: float | None = None
    ecc_ce: float | None = None
    ecc_ue: float | None = None
    ecc_deferred: float | None = None
    pcie_width: float | None = None
    pcie_max_width: float | None = None
    pcie_speed: float | None = None
    pcie_max_speed: float | None = None
    xgmi_up: float | None = None
    xgmi_down: float | None = None  # baseline links now down (GpuXgmiLinkDown's), not ports
    xgmi_error: float | None = None
    util: float | None = None


def rows_from(snapshot: Snapshot) -> list[GpuRow]:
    """Pick the live view's readings out of a snapshot, per GPU."""
    by_gpu: dict[int, dict[tuple[str, str], float | None]] = defaultdict(dict)
    links_up: dict[int, list[float | None]] = defaultdict(list)
    for reading in snapshot.readings:
        gpu = _gpu_of(reading)
        if gpu is None:
            continue
        if reading.metric == XGMI_LINK_UP:
            links_up[gpu].append(reading.value)
        else:
            by_gpu[gpu][_slot(reading)] = reading.value
    rows = []
    for status in snapshot.gpus:
        values = by_gpu.get(status.gpu.index, {})

        def get(
            metric: str, qualifier: str = "", _values: dict[tuple[str, str], float | None] = values
        ) -> float | None:
            return _values.get((metric, qualifier))

        rows.append(
            GpuRow(
                index=status.gpu.index,
                up=status.present and status.responsive,
                hotspot=get("fleetd_gpu_temperature_celsius", "hotspot"),
                hotspot_crit=get("fleetd_gpu_temperature_limit_celsius", "hotspot/critical"),
                hbm=get("fleetd_gpu_temperature_celsius", "hbm"),
                power=get("fleetd_gpu_power_watts"),
                power_cap=get("fleetd_gpu_power_cap_watts"),
                ecc_ce=get("fleetd_gpu_ecc_errors_total", "correctable"),
                ecc_ue=get("fleetd_gpu_ecc_errors_total", "uncorrectable"),
                ecc_deferred=get("fleetd_gpu_ecc_errors_total", "deferred"),
                pcie_width=get("fleetd_gpu_pcie_link_width_lanes"),
                pcie_max_width=get("fleetd_gpu_pcie_link_max_width_lanes"),
                pcie_speed=get("fleetd_gpu_pcie_link_speed_gigatransfers_per_second"),
                pcie_max_speed=get("fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second"),
                xgmi_up=get("fleetd_gpu_xgmi_links", "up"),
                xgmi_down=_links_down(links_up.get(status.gpu.index, [])),
                xgmi_error=get("fleetd_gpu_xgmi_error_status"),
                util=get("fleetd_gpu_utilization_ratio", "gfx"),
            )
        )
    return rows


def _links_down(values: Sequence[float | None]) -> float | None:
    """How many of the GPU's baseline links read down (0), as ``GpuXgmiLinkDown`` counts
    them; None when none of them was read (the status call failed, or not XGMI-capable)."""
    read = [value for value in values if value is not None]
    if not read:
        return None
    return float(sum(1 for value in read if value == 0))


def _gpu_of(reading: Reading) -> int | None:
    for key, value in reading.labels:
        if key == "gpu":
            return int(value) if value.isdigit() else None
    return None


def _slot(reading: Reading) -> tuple[str, str]:
    labels = dict(reading.labels)
    if reading.metric == "fleetd_gpu_temperature_limit_celsius":
        return reading.metric, f"{labels.get('sensor', '')}/{labels.get('limit', '')}"
    for qualifier in ("sensor", "type", "state", "engine"):
        if qualifier in labels and "block" not in labels:
            return reading.metric, labels[qualifier]
    return reading.metric, ""


def _fmt(value: float | None, unit: str = "", digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}{unit}"


def _cell(text: str, bad: bool, warn: bool = False) -> Text:
    style = "bold red" if bad else ("yellow" if warn else "")
    return Text(text, style=style)


def gpu_table(rows: Sequence[GpuRow], alerts: Sequence[Alert] = ()) -> Table:
    """One row per GPU; missing readings show as —, faults in red, warnings in yellow."""
    firing: dict[str, list[str]] = defaultdict(list)
    for alert in alerts:
        if alert.state == AlertState.FIRING:
            gpu = dict(alert.labels).get("gpu", "node")
            firing[gpu].append(alert.key.rule)
    table = Table(title=None, expand=False, pad_edge=False)
    for header in (
        "GPU",
        "util",
        "hotspot °C",
        "HBM °C",
        "power W",
        "ECC ue/ce/def",
        "PCIe",
        "XGMI up/down",
        "alerts",
    ):
        table.add_column(header, justify="right" if header not in ("GPU", "alerts") else "left")
    for row in rows:
        if not row.up:
            table.add_row(
                _cell(f"{row.index}", True),
                *[_cell("—", False)] * 7,
                _cell("GPU MISSING / NOT RESPONDING", True),
            )
            continue
        hot_warn = (
            row.hotspot is not None
            and row.hotspot_crit is not None
            and row.hotspot >= row.hotspot_crit - 10
        )
        hot_bad = (
            row.hotspot is not None
            and row.hotspot_crit is not None
            and row.hotspot >= row.hotspot_crit - 5
        )
        pcie_bad = (
            row.pcie_width is not None
            and row.pcie_max_width is not None
            and row.pcie_width < row.pcie_max_width
        ) or (
            row.pcie_speed is not None
            and row.pcie_max_speed is not None
            and row.pcie_speed < row.pcie_max_speed
        )
        ecc_bad = bool(row.ecc_ue) or bool(row.ecc_deferred)
        xgmi_bad = bool(row.xgmi_down) or bool(row.xgmi_error)
        power_bad = (
            row.power is not None and row.power_cap is not None and row.power > row.power_cap
        )
        pcie = f"x{_fmt(row.pcie_width)}/Gen{_gen(row.pcie_speed)}"
        names = firing.get(str(row.index), [])
        table.add_row(
            str(row.index),
            _fmt(None if row.util is None else row.util * 100, "%"),
            _cell(_fmt(row.hotspot), hot_bad, hot_warn),
            _fmt(row.hbm),
            _cell(f"{_fmt(row.power)}/{_fmt(row.power_cap)}", power_bad),
            _cell(f"{_fmt(row.ecc_ue)}/{_fmt(row.ecc_ce)}/{_fmt(row.ecc_deferred)}", ecc_bad),
            _cell(pcie, pcie_bad),
            _cell(f"{_fmt(row.xgmi_up)}/{_fmt(row.xgmi_down)}", xgmi_bad),
            _cell(", ".join(names) or "", bool(names)),
        )
    return table


def _gen(speed_gts: float | None) -> str:
    gens = {2.5: "1", 5.0: "2", 8.0: "3", 16.0: "4", 32.0: "5", 64.0: "6"}
    return "?" if speed_gts is None else gens.get(speed_gts, f"{speed_gts:g}GT")


def live_view(
    snapshot: Snapshot,
    alerts: Sequence[Alert] = (),
    log_lines: Sequence[str] = (),
    header: str = "",
) -> Group:
    """The whole screen: a header, the GPU table, and the latest alert/remediation lines."""
    parts: list[Text | Table] = []
    if header:
        parts.append(Text(header, style="bold"))
    parts.append(gpu_table(rows_from(snapshot), alerts))
    parts.extend(Text(line) for line in log_lines)
    return Group(*parts)
