"""The fault catalogue: every fault the simulator can inject, with typed, strict parameters.

The same parameter models validate faults injected from Python (``SimNode.inject``) and from
scenario YAML, so a typo is an error in both places. A fault is either *transient* (a hive
reset clears it) or *persistent* (it comes back after every reset); each kind has a default.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator

from fleetd.configbase import StrictModel
from fleetd.sim import wrapper as w
from fleetd.sim.records import CALL_RECORDS, leaf_paths

BlockName = Literal["UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "HDP", "XGMI_WAFL"]


class ThermalRunaway(StrictModel):
    """Cooling fails: temperature targets rise by these deltas; throttling follows."""

    delta_c: float = Field(45.0, gt=0, le=150)
    hbm_delta_c: float = Field(25.0, ge=0, le=150)
    vr_delta_c: float = Field(20.0, ge=0, le=150)


class EccCeStorm(StrictModel):
    """Correctable errors arrive at a steady rate in one block."""

    rate_per_s: float = Field(20.0, gt=0)
    block: BlockName = "UMC"


class EccUncorrectable(StrictModel):
    """Uncorrectable errors appear at once; the faulty page is retired (pending until reset).

    MI300/MI350-class parts run RAS in poison mode: an HBM error is poison the driver
    contains, and its CPER record is *non-fatal uncorrected* (AFID 22, HBM on-die ECC, which
    AMD's classes recover by a GPU reset). ``fatal`` models the other path, a fatal-error
    interrupt: a *fatal* record (AFID 20 for HBM: replace the OAM). ``afid`` names another
    AFID of AMD's list for the record (a scenario demonstrating one class).
    """

    count: int = Field(1, ge=1)
    block: BlockName = "UMC"
    retire_page: bool = True
    fatal: bool = False
    afid: int | None = Field(None, ge=1, le=34)


class EccDeferred(StrictModel):
    """Deferred (poisoned, not yet consumed) errors appear at once."""

    count: int = Field(3, ge=1)
    block: BlockName = "UMC"


class BadPages(StrictModel):
    """Pages are retired at a rate until ``count`` (default: the GPU's threshold) is reached."""

    rate_per_s: float = Field(0.5, gt=0)
    count: int | None = Field(None, ge=1)
    status: Literal["reserved", "pending", "unreservable"] = "reserved"


class PcieDowngrade(StrictModel):
    """The host link trains down (x16 Gen5 → x8 Gen4 by default)."""

    width: int = Field(8, ge=1, le=16)
    speed_mts: int = Field(16000, ge=2500, le=32000)


class PcieReplayStorm(StrictModel):
    """The host link replays packets; L0→recovery and NAK counters climb with it."""

    rate_per_s: float = Field(500.0, gt=0)


class XgmiLinkDown(StrictModel):
    """One XGMI link (index into this GPU's peer list) goes down, on both ends.

    Both ends count the fault as XGMI_WAFL RAS errors (``wafl_ce`` correctable and
    ``wafl_ue`` uncorrectable), which is how MI300X/MI355X report XGMI faults; the legacy
    xgmi_error status latches too but is unreadable on those parts.
    """

    link: int = Field(0, ge=0, le=6)
    wafl_ce: int = Field(4, ge=0)
    wafl_ue: int = Field(1, ge=0)


class PowerExcursion(StrictModel):
    """The workload asks for more power than the cap: power pins at the cap, PPT throttles.

    ``cap_overshoot`` models firmware that fails to hold the cap (a fraction above it, e.g.
    0.1 lets power reach 110 % of the cap): what GpuPowerAboveCap is there to catch.
    """

    demand_w: float | None = Field(None, gt=0)
    cap_overshoot: float = Field(0.0, ge=0, le=0.5)


class HungCall(StrictModel):
    """One amdsmi function blocks for this GPU until released, cleared, or for real seconds."""

    function: str
    duration_s: float | None = Field(None, gt=0)

    @field_validator("function")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in GPU_FUNCTIONS:
            raise ValueError(f"unknown per-GPU amdsmi function {value!r}")
        return value


class UnsupportedFields(StrictModel):
    """Fields read as the library's 'no value' sentinel; whole calls fail with ``status``.

    ``fields`` are ``<function>.<field path>`` (e.g. ``amdsmi_get_power_info.socket_power``);
    ``calls`` are ``<function>`` or ``<function>:<ENUM MEMBER>`` (e.g.
    ``amdsmi_get_temp_metric:VRAM``). How each surfaces (exception, "N/A", raw 4294967295) is
    then exactly what the real wrapper does with it.
    """

    fields: list[str] = Field(default_factory=list)
    calls: list[str] = Field(default_factory=list)
    status: Literal[
        "NOT_SUPPORTED",
        "NO_PERM",
        "BUSY",
        "IO",
        "FILE_ERROR",
        "UNEXPECTED_DATA",
        "RETRY",
        "TIMEOUT",
        "NO_DATA",
    ] = "NOT_SUPPORTED"
    sentinel: Literal["type_max", "u16_max"] = "type_max"

    @field_validator("fields")
    @classmethod
    def _known_fields(cls, value: list[str]) -> list[str]:
        for item in value:
            func, _, path = item.partition(".")
            kind = CALL_RECORDS.get(func)
            if kind is None:
                raise ValueError(f"{item!r}: no field-carrying amdsmi function {func!r}")
            if leaf_paths(kind).get(path) not in ("u8", "u16", "u32", "u64"):
                raise ValueError(f"{item!r}: {func} has no numeric field {path!r}")
        return value

    @field_validator("calls")
    @classmethod
    def _known_calls(cls, value: list[str]) -> list[str]:
        for item in value:
            func = item.partition(":")[0]
            if func not in GPU_FUNCTIONS:
                raise ValueError(f"{item!r}: unknown per-GPU amdsmi function {func!r}")
        return value

    def status_code(self) -> int:
        code: int = getattr(w, f"AMDSMI_STATUS_{self.status}")
        return code


class GpuOffBus(StrictModel):
    """The GPU falls off the bus: gone from enumeration, its old handle fails."""


class RingTimeout(StrictModel):
    """A job hangs on a ring: amdgpu logs the timeout and, with ``driver_reset``, recovers
    by resetting the GPU itself (the whole hive, killing its processes without a drain)."""

    ring: str = Field("comp_1.0.0", pattern=r"^[\w.]+$")
    process: str = Field("python3", pattern=r"^[\w.:-]+$")
    pid: int = Field(4242, ge=1)
    driver_reset: bool = True


class VmFault(StrictModel):
    """A process touches memory it has not mapped: a GPU page fault (KFD VMFAULT event and
    the driver's fault report); the process is killed, the GPU keeps working."""

    process: str = Field("python3", pattern=r"^[\w.:-]+$")
    pid: int = Field(4242, ge=1)
    address: int = Field(0x7F5279BAB000, ge=0)


class FirmwareFailure(StrictModel):
    """A firmware that no longer loads: every recovery of the GPU fails to bring ``block``
    up again (the driver logs it and "GPU reset(N) failed"; no post-reset event)."""

    block: str = Field("psp", pattern=r"^\w+$")
    firmware: str = Field("amdgpu/psp_13_0_6_ta.bin", pattern=r"^[\w./-]+$")


FAULT_PARAMS: dict[str, type[StrictModel]] = {
    "thermal_runaway": ThermalRunaway,
    "ecc_ce_storm": EccCeStorm,
    "ecc_uncorrectable": EccUncorrectable,
    "ecc_deferred": EccDeferred,
    "bad_pages": BadPages,
    "pcie_downgrade": PcieDowngrade,
    "pcie_replay_storm": PcieReplayStorm,
    "xgmi_link_down": XgmiLinkDown,
    "power_excursion": PowerExcursion,
    "hung_call": HungCall,
    "unsupported_fields": UnsupportedFields,
    "gpu_off_bus": GpuOffBus,
    "ring_timeout": RingTimeout,
    "vm_fault": VmFault,
    "firmware_failure": FirmwareFailure,
}
FAULT_NAMES: tuple[str, ...] = tuple(FAULT_PARAMS)
"""Every fault kind, as used by ``SimNode.inject`` and in scenario files."""

GPU_FUNCTIONS: frozenset[str] = frozenset(
    {
        "amdsmi_get_processor_type",
        "amdsmi_get_gpu_device_bdf",
        "amdsmi_get_gpu_device_uuid",
        "amdsmi_get_gpu_enumeration_info",
        "amdsmi_get_gpu_asic_info",
        "amdsmi_get_gpu_board_info",
        "amdsmi_get_gpu_kfd_info",
        "amdsmi_get_gpu_driver_info",
        "amdsmi_get_gpu_vbios_info",
        "amdsmi_get_fw_info",
        "amdsmi_get_gpu_vram_info",
        "amdsmi_get_temp_metric",
        "amdsmi_get_power_info",
        "amdsmi_get_power_cap_info",
        "amdsmi_get_energy_count",
        "amdsmi_get_gpu_activity",
        "amdsmi_get_gpu_vram_usage",
        "amdsmi_get_gpu_memory_total",
        "amdsmi_get_gpu_memory_usage",
        "amdsmi_get_clock_info",
        "amdsmi_get_gpu_total_ecc_count",
        "amdsmi_get_gpu_ecc_count",
        "amdsmi_get_gpu_ecc_enabled",
        "amdsmi_get_gpu_ecc_status",
        "amdsmi_get_gpu_ras_feature_info",
        "amdsmi_get_gpu_ras_block_features_enabled",
        "amdsmi_get_gpu_bad_page_info",
        "amdsmi_get_gpu_bad_page_threshold",
        "amdsmi_get_gpu_memory_reserved_pages",
        "amdsmi_get_pcie_info",
        "amdsmi_get_gpu_pci_replay_counter",
        "amdsmi_get_xgmi_info",
        "amdsmi_gpu_xgmi_error_status",
        "amdsmi_reset_gpu_xgmi_error",
        "amdsmi_get_gpu_xgmi_link_status",
        "amdsmi_get_link_metrics",
        "amdsmi_topo_get_link_type",
        "amdsmi_topo_get_link_weight",
        "amdsmi_get_minmax_bandwidth_between_processors",
        "amdsmi_get_gpu_metrics_info",
        "amdsmi_get_violation_status",
        "amdsmi_get_gpu_process_list",
        "amdsmi_reset_gpu",
        "amdsmi_init_gpu_event_notification",
        "amdsmi_get_gpu_cper_entries",
        "amdsmi_get_link_topology_nearest",
        "amdsmi_is_P2P_accessible",
        "amdsmi_topo_get_numa_node_number",
        "amdsmi_get_gpu_topo_numa_affinity",
        "amdsmi_get_gpu_compute_partition",
        "amdsmi_get_gpu_memory_partition",
        "amdsmi_get_gpu_metrics_header_info",
    }
)
"""amdsmi functions that act on one GPU handle (what a hang or an unsupported call can hit)."""

DEFAULT_PERSISTENT: dict[str, bool] = {name: name == "firmware_failure" for name in FAULT_PARAMS}


@dataclass(eq=False)
class Fault:
    """One injected fault on one GPU."""

    id: int
    kind: str
    gpu: int
    params: Any
    persistent: bool
    injected_at: float
    release: threading.Event = field(default_factory=threading.Event)
    """Set when a hung call must stop blocking (fault cleared, reset, or released)."""
    progress: float = 0.0
    """Continuous faults' own accumulator (bad pages retired so far, as a float)."""


def parse_params(kind: str, params: dict[str, Any]) -> StrictModel:
    """Validate ``params`` for a fault ``kind`` (pydantic ValidationError on bad input)."""
    try:
        model = FAULT_PARAMS[kind]
    except KeyError:
        raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_NAMES)}") from None
    return model.model_validate(params)
