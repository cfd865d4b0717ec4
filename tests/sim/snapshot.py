"""Flatten everything a face reports about every GPU into {path: value}, for diffing.

Two nodes with the same seed, read at the same fake time, give identical snapshots; a fault
test diffs a faulted node against a clean one and checks exactly which paths changed.
Paths look like ``bdf/function[:arg]/key/subkey`` and an exception reads ``EXC:<code>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetd.sim import SimulatedAmdSmi

Calls = dict[str, Callable[[], Any]]


def per_gpu_calls(a: SimulatedAmdSmi, h: Any) -> Calls:
    """Every per-GPU reading, one zero-argument callable each."""
    calls: Calls = {
        name: (lambda name=name: getattr(a, name)(h))
        for name in (
            "amdsmi_get_processor_type",
            "amdsmi_get_gpu_device_uuid",
            "amdsmi_get_gpu_enumeration_info",
            "amdsmi_get_gpu_asic_info",
            "amdsmi_get_gpu_board_info",
            "amdsmi_get_gpu_kfd_info",
            "amdsmi_get_gpu_driver_info",
            "amdsmi_get_gpu_vbios_info",
            "amdsmi_get_gpu_vram_info",
            "amdsmi_get_power_info",
            "amdsmi_get_power_cap_info",
            "amdsmi_get_energy_count",
            "amdsmi_get_gpu_activity",
            "amdsmi_get_gpu_vram_usage",
            "amdsmi_get_gpu_total_ecc_count",
            "amdsmi_get_gpu_ecc_enabled",
            "amdsmi_get_gpu_ras_feature_info",
            "amdsmi_get_gpu_ras_block_features_enabled",
            "amdsmi_get_gpu_bad_page_info",
            "amdsmi_get_gpu_bad_page_threshold",
            "amdsmi_get_gpu_memory_reserved_pages",
            "amdsmi_get_pcie_info",
            "amdsmi_get_gpu_pci_replay_counter",
            "amdsmi_get_xgmi_info",
            "amdsmi_gpu_xgmi_error_status",
            "amdsmi_get_gpu_xgmi_link_status",
            "amdsmi_get_link_metrics",
            "amdsmi_get_gpu_metrics_info",
            "amdsmi_get_violation_status",
            "amdsmi_get_gpu_process_list",
        )
    }
    temp, metric = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
    for sensor in (temp.EDGE, temp.HOTSPOT, temp.VRAM, temp.HBM_0, temp.PLX):
        for which in (metric.CURRENT, metric.CRITICAL, metric.EMERGENCY):
            key = f"amdsmi_get_temp_metric:{sensor.name}:{which.name}"
            calls[key] = lambda s=sensor, m=which: a.amdsmi_get_temp_metric(h, s, m)
    for clk in (a.AmdSmiClkType.GFX, a.AmdSmiClkType.MEM, a.AmdSmiClkType.SOC):
        calls[f"amdsmi_get_clock_info:{clk.name}"] = lambda c=clk: a.amdsmi_get_clock_info(h, c)
    for mem in (a.AmdSmiMemoryType.VRAM, a.AmdSmiMemoryType.GTT):
        calls[f"amdsmi_get_gpu_memory_total:{mem.name}"] = lambda m=mem: (
            a.amdsmi_get_gpu_memory_total(h, m)
        )
        calls[f"amdsmi_get_gpu_memory_usage:{mem.name}"] = lambda m=mem: (
            a.amdsmi_get_gpu_memory_usage(h, m)
        )
    for block in (a.AmdSmiGpuBlock.UMC, a.AmdSmiGpuBlock.GFX, a.AmdSmiGpuBlock.XGMI_WAFL):
        calls[f"amdsmi_get_gpu_ecc_count:{block.name}"] = lambda b=block: (
            a.amdsmi_get_gpu_ecc_count(h, b)
        )
        calls[f"amdsmi_get_gpu_ecc_status:{block.name}"] = lambda b=block: (
            a.amdsmi_get_gpu_ecc_status(h, b)
        )
    return calls


def flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            flatten(f"{prefix}/{key}", sub, out)
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            flatten(f"{prefix}/{i}", sub, out)
    else:
        out[prefix] = value


def read(call: Callable[[], Any], exc_base: type[Exception]) -> Any:
    try:
        return call()
    except exc_base as err:
        return f"EXC:{getattr(err, 'err_code', None)}"
    except TypeError as err:  # amdsmi 7.0.2's own bugs (e.g. reserved pages) raise these
        return f"EXC:TypeError:{err}"


def snapshot(a: SimulatedAmdSmi) -> dict[str, Any]:
    """Every reading of every enumerated GPU, keyed by BDF."""
    out: dict[str, Any] = {}
    for h in a.amdsmi_get_processor_handles():
        bdf = a.amdsmi_get_gpu_device_bdf(h)
        for name, call in per_gpu_calls(a, h).items():
            flatten(f"{bdf}/{name}", read(call, a.AmdSmiException), out)
    flatten("node/compute_processes", a.amdsmi_get_gpu_compute_process_info(), out)
    return out


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Paths whose value differs, appeared or disappeared."""
    keys = set(before) | set(after)
    return {k for k in keys if before.get(k, "<absent>") != after.get(k, "<absent>")}
