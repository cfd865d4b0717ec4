"""Compute (SPX/DPX/QPX/CPX) and memory (NPS1/NPS4) partitions of the simulated GPUs.

One processor handle per XCP partition, the BDF function digit carrying the partition id,
a UUID per partition and board-level calls only on partition 0 — as AMD's partition
documentation and the 7.0.2 library describe (``../shared/reference/hardware-behaviour.md``
§3.3). The layout is one mode per node, as deployments partition every GPU alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetd.sim.hardware import BoardIdentity

PARTITION_COUNTS: dict[str, int] = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
"""Processor handles per physical GPU in each compute mode (MI300X/MI325X/MI350X/MI355X: 8 XCDs)."""

MEMORY_MODES: tuple[str, ...] = ("NPS1", "NPS4")

VALID_MODES: frozenset[tuple[str, str]] = frozenset(
    {(c, "NPS1") for c in PARTITION_COUNTS} | {("QPX", "NPS4"), ("CPX", "NPS4")}
)
"""Valid (compute, memory) combinations: NPS4 needs QPX or CPX."""

BOARD_LEVEL: frozenset[str] = frozenset(
    {
        "amdsmi_get_temp_metric",
        "amdsmi_get_power_info",
        "amdsmi_get_power_cap_info",
        "amdsmi_get_energy_count",
        "amdsmi_get_clock_info",
        "amdsmi_get_pcie_info",
        "amdsmi_get_gpu_pci_replay_counter",
        "amdsmi_get_gpu_metrics_info",
        "amdsmi_get_gpu_metrics_header_info",
        "amdsmi_get_violation_status",
        "amdsmi_get_gpu_total_ecc_count",
        "amdsmi_get_gpu_ecc_count",
        "amdsmi_get_gpu_ecc_status",
        "amdsmi_get_gpu_bad_page_info",
        "amdsmi_get_gpu_memory_reserved_pages",
        "amdsmi_get_gpu_bad_page_threshold",
        "amdsmi_get_gpu_cper_entries",
        "amdsmi_get_gpu_xgmi_link_status",
        "amdsmi_get_link_metrics",
        "amdsmi_gpu_xgmi_error_status",
        "amdsmi_reset_gpu_xgmi_error",
        "amdsmi_get_gpu_fan_speed",
        "amdsmi_get_gpu_fan_rpms",
        "amdsmi_get_gpu_fan_speed_max",
    }
)
"""Calls that read the device's gpu_metrics, hwmon, PCIe or RAS sysfs: those exist only under
partition 0's PCI device (secondaries are ``amdgpu_xcp.N`` platform devices), so the library
answers NOT_SUPPORTED on every other partition."""


def check_modes(compute: str, memory: str) -> None:
    """Raise ValueError naming the valid combinations when (compute, memory) is not one."""
    if compute not in PARTITION_COUNTS:
        raise ValueError(f"unknown compute partition {compute!r}; known: SPX, DPX, QPX, CPX")
    if memory not in MEMORY_MODES:
        raise ValueError(f"unknown memory partition {memory!r}; known: NPS1, NPS4")
    if (compute, memory) not in VALID_MODES:
        raise ValueError(f"{compute}+{memory} is not a valid combination: NPS4 needs QPX or CPX")


@dataclass(frozen=True, slots=True)
class Partition:
    """One logical device (XCP partition) of a physical GPU, as the library names it."""

    gpu: int  # index of the physical GPU
    partition_id: int
    handle: int
    function: int  # BDF function digit = partition id
    uuid: str
    node_id: int  # KFD node
    drm_render: int
    drm_card: int
    hip_id: int


def layout(idents: list[BoardIdentity], compute: str) -> list[Partition]:
    """Every logical device of the node in enumeration order (GPU-major, partition-minor).

    Partition 0 keeps the physical GPU's handle, BDF and UUID, so an SPX node is unchanged;
    the others get handles 0x10 apart (the GPUs' handles are 0x2B0 apart), the function digit
    of their partition id, their own UUID and KFD/DRM numbers after the primaries'."""
    count = PARTITION_COUNTS[compute]
    gpus = len(idents)
    out: list[Partition] = []
    for ident in idents:
        for p in range(count):
            extra = gpus + ident.index * (count - 1) + (p - 1)  # secondaries numbered after
            out.append(
                Partition(
                    gpu=ident.index,
                    partition_id=p,
                    handle=ident.handle + 0x10 * p,
                    function=p,
                    uuid=ident.uuid
                    if p == 0
                    else f"{ident.uuid[:-1]}{int(ident.uuid[-1], 16) ^ p:x}",
                    node_id=ident.node_id if p == 0 else 2 + extra,
                    drm_render=ident.drm_render if p == 0 else 128 + extra,
                    drm_card=ident.drm_card if p == 0 else 1 + extra,
                    hip_id=ident.hip_id if p == 0 else extra,
                )
            )
    return out


__all__ = [
    "BOARD_LEVEL",
    "MEMORY_MODES",
    "PARTITION_COUNTS",
    "VALID_MODES",
    "Partition",
    "check_modes",
    "layout",
]
