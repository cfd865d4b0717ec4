# ruff: noqa: RUF009  (field helpers below return dataclasses.field(...))
"""Raw records: what each C call of libamd_smi fills in, field for field.

Each dataclass mirrors one C structure of amdsmi 7.0.2 (same field names, raw units, C
integer widths in the field metadata). The model produces these; the Python face turns them
into the dicts the real ``amdsmi_interface`` builds, and an emulated C library (issue 9) can
copy them into the real package's ctypes structures. Nothing here knows about Python dicts.

An *unsupported* field holds the sentinel the C library leaves in it (by default the maximum
of its C type); how that surfaces — "N/A", a raw 4294967295, or nothing — is then decided by
the face exactly as the real wrapper decides it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

CTYPE_MAX: dict[str, int] = {
    "u8": 0xFF,
    "u16": 0xFFFF,
    "u32": 0xFFFFFFFF,
    "u64": 0xFFFFFFFFFFFFFFFF,
}
"""Largest value of each unsigned C type: the library's 'no value' sentinel."""


def _num(ctype: str, default: int = 0) -> Any:
    return field(default=default, metadata={"ctype": ctype})


def _arr(ctype: str, length: int) -> Any:
    return field(default_factory=lambda: [0] * length, metadata={"ctype": ctype, "length": length})


def _text(size: int = 256) -> Any:
    return field(default="", metadata={"ctype": "char", "length": size})


def _sub(kind: type) -> Any:
    return field(default_factory=kind, metadata={"ctype": "struct"})


def _subs(kind: type, length: int) -> Any:
    return field(
        default_factory=lambda: [kind() for _ in range(length)],
        metadata={"ctype": "struct", "length": length},
    )


@dataclass(slots=True)
class Bdf:
    domain_number: int = _num("u64")
    bus_number: int = _num("u8")
    device_number: int = _num("u8")
    function_number: int = _num("u8")


@dataclass(slots=True)
class AsicInfo:
    market_name: str = _text()
    vendor_id: int = _num("u32")
    vendor_name: str = _text()
    subvendor_id: int = _num("u32")
    device_id: int = _num("u64")
    rev_id: int = _num("u32")
    asic_serial: str = _text()
    oam_id: int = _num("u32")
    num_of_compute_units: int = _num("u32")
    target_graphics_version: int = _num("u64")
    subsystem_id: int = _num("u32")


@dataclass(slots=True)
class BoardInfo:
    model_number: str = _text()
    product_serial: str = _text()
    fru_id: str = _text()
    product_name: str = _text()
    manufacturer_name: str = _text()


@dataclass(slots=True)
class KfdInfo:
    kfd_id: int = _num("u64")
    node_id: int = _num("u32")
    current_partition_id: int = _num("u32")


@dataclass(slots=True)
class DriverInfo:
    driver_version: str = _text()
    driver_date: str = _text()
    driver_name: str = _text()


@dataclass(slots=True)
class VbiosInfo:
    name: str = _text()
    build_date: str = _text()
    part_number: str = _text()
    version: str = _text()


@dataclass(slots=True)
class FwInfoEntry:
    """One ``fw_info_list`` entry of amdsmi_fw_info_t."""

    fw_id: int = _num("u32")
    fw_version: int = _num("u64")
    reserved: list[int] = _arr("u64", 2)


FW_SLOTS = 80  # AMDSMI_FW_ID__MAX: the C array's length


@dataclass(slots=True)
class FwInfo:
    """amdsmi_fw_info_t: ``num_fw_info`` entries of ``fw_info_list`` are valid."""

    num_fw_info: int = _num("u8")
    fw_info_list: list[FwInfoEntry] = _subs(FwInfoEntry, FW_SLOTS)
    reserved: list[int] = _arr("u32", 7)


@dataclass(slots=True)
class VramInfo:
    vram_type: int = _num("u32")
    vram_vendor: str = _text()
    vram_size: int = _num("u64")
    vram_bit_width: int = _num("u32")
    vram_max_bandwidth: int = _num("u64")


@dataclass(slots=True)
class EnumerationInfo:
    drm_render: int = _num("u32")
    drm_card: int = _num("u32")
    hsa_id: int = _num("u32")
    hip_id: int = _num("u32")
    hip_uuid: str = _text()


@dataclass(slots=True)
class PowerInfo:
    socket_power: int = _num("u64")
    current_socket_power: int = _num("u32")
    average_socket_power: int = _num("u32")
    gfx_voltage: int = _num("u64")
    soc_voltage: int = _num("u64")
    mem_voltage: int = _num("u64")
    power_limit: int = _num("u32")


@dataclass(slots=True)
class PowerCapInfo:
    power_cap: int = _num("u64")
    default_power_cap: int = _num("u64")
    dpm_cap: int = _num("u64")
    min_power_cap: int = _num("u64")
    max_power_cap: int = _num("u64")


@dataclass(slots=True)
class EnergyCount:
    """The three out-parameters of amdsmi_get_energy_count."""

    energy_accumulator: int = _num("u64")
    counter_resolution: float = field(default=0.0, metadata={"ctype": "float"})
    timestamp: int = _num("u64")


@dataclass(slots=True)
class EngineUsage:
    gfx_activity: int = _num("u32")
    umc_activity: int = _num("u32")
    mm_activity: int = _num("u32")


@dataclass(slots=True)
class VramUsage:
    vram_total: int = _num("u32")
    vram_used: int = _num("u32")


@dataclass(slots=True)
class ClkInfo:
    clk: int = _num("u32")
    min_clk: int = _num("u32")
    max_clk: int = _num("u32")
    clk_locked: int = _num("u8")
    clk_deep_sleep: int = _num("u8")


@dataclass(slots=True)
class ErrorCount:
    correctable_count: int = _num("u64")
    uncorrectable_count: int = _num("u64")
    deferred_count: int = _num("u64")


@dataclass(slots=True)
class RasFeature:
    ras_eeprom_version: int = _num("u32")
    ecc_correction_schema_flag: int = _num("u32")


@dataclass(slots=True)
class RetiredPage:
    page_address: int = _num("u64")
    page_size: int = _num("u64")
    status: int = _num("u32")


@dataclass(slots=True)
class PcieStatic:
    max_pcie_width: int = _num("u16")
    max_pcie_speed: int = _num("u32")
    pcie_interface_version: int = _num("u32")
    slot_type: int = _num("u32")
    max_pcie_interface_version: int = _num("u32")


@dataclass(slots=True)
class PcieMetric:
    pcie_width: int = _num("u16")
    pcie_speed: int = _num("u32")
    pcie_bandwidth: int = _num("u32")
    pcie_replay_count: int = _num("u64")
    pcie_l0_to_recovery_count: int = _num("u64")
    pcie_replay_roll_over_count: int = _num("u64")
    pcie_nak_sent_count: int = _num("u64")
    pcie_nak_received_count: int = _num("u64")
    pcie_lc_perf_other_end_recovery_count: int = _num("u32")


@dataclass(slots=True)
class PcieInfo:
    pcie_static: PcieStatic = _sub(PcieStatic)
    pcie_metric: PcieMetric = _sub(PcieMetric)


@dataclass(slots=True)
class XgmiInfo:
    xgmi_lanes: int = _num("u8")
    xgmi_hive_id: int = _num("u64")
    xgmi_node_id: int = _num("u64")
    index: int = _num("u32")


@dataclass(slots=True)
class XgmiLinkStatus:
    total_links: int = _num("u32")
    status: list[int] = _arr("u32", 8)


@dataclass(slots=True)
class Link:
    bdf: Bdf = _sub(Bdf)
    bit_rate: int = _num("u32")
    max_bandwidth: int = _num("u32")
    link_type: int = _num("u32")
    read: int = _num("u64")
    write: int = _num("u64")


LINK_SLOTS = 8
"""Link entries the Python wrapper reads (the C structure holds 64; the rest stay zero)."""


@dataclass(slots=True)
class LinkMetrics:
    num_links: int = _num("u32")
    links: list[Link] = _subs(Link, LINK_SLOTS)


@dataclass(slots=True)
class ProcEngineUsage:
    gfx: int = _num("u64")
    enc: int = _num("u64")


@dataclass(slots=True)
class ProcMemoryUsage:
    gtt_mem: int = _num("u64")
    cpu_mem: int = _num("u64")
    vram_mem: int = _num("u64")


@dataclass(slots=True)
class ProcInfo:
    """One entry of amdsmi_get_gpu_process_list (amdsmi_proc_info_t)."""

    name: str = _text()
    pid: int = _num("u32")
    mem: int = _num("u64")
    engine_usage: ProcEngineUsage = _sub(ProcEngineUsage)
    memory_usage: ProcMemoryUsage = _sub(ProcMemoryUsage)
    container_name: str = _text()
    cu_occupancy: int = _num("u32")


@dataclass(slots=True)
class ProcessInfo:
    """One KFD process (amdsmi_process_info_t)."""

    process_id: int = _num("u32")
    vram_usage: int = _num("u64")
    sdma_usage: int = _num("u64")
    cu_occupancy: int = _num("u32")


def _grid(ctype: str) -> Any:
    return field(
        default_factory=lambda: [[0] * 8 for _ in range(8)],
        metadata={"ctype": ctype, "length": 8, "inner": 8},
    )


@dataclass(slots=True)
class ViolationStatus:
    reference_timestamp: int = _num("u64")
    violation_timestamp: int = _num("u64")
    acc_counter: int = _num("u64")
    acc_prochot_thrm: int = _num("u64")
    acc_ppt_pwr: int = _num("u64")
    acc_socket_thrm: int = _num("u64")
    acc_vr_thrm: int = _num("u64")
    acc_hbm_thrm: int = _num("u64")
    acc_gfx_clk_below_host_limit: int = _num("u64")
    per_prochot_thrm: int = _num("u64")
    per_ppt_pwr: int = _num("u64")
    per_socket_thrm: int = _num("u64")
    per_vr_thrm: int = _num("u64")
    per_hbm_thrm: int = _num("u64")
    per_gfx_clk_below_host_limit: int = _num("u64")
    active_prochot_thrm: int = _num("u8")
    active_ppt_pwr: int = _num("u8")
    active_socket_thrm: int = _num("u8")
    active_vr_thrm: int = _num("u8")
    active_hbm_thrm: int = _num("u8")
    active_gfx_clk_below_host_limit: int = _num("u8")
    acc_gfx_clk_below_host_limit_pwr: list[list[int]] = _grid("u64")
    acc_gfx_clk_below_host_limit_thm: list[list[int]] = _grid("u64")
    acc_low_utilization: list[list[int]] = _grid("u64")
    acc_gfx_clk_below_host_limit_total: list[list[int]] = _grid("u64")
    per_gfx_clk_below_host_limit_pwr: list[list[int]] = _grid("u64")
    per_gfx_clk_below_host_limit_thm: list[list[int]] = _grid("u64")
    per_low_utilization: list[list[int]] = _grid("u64")
    per_gfx_clk_below_host_limit_total: list[list[int]] = _grid("u64")
    active_gfx_clk_below_host_limit_pwr: list[list[int]] = _grid("u8")
    active_gfx_clk_below_host_limit_thm: list[list[int]] = _grid("u8")
    active_low_utilization: list[list[int]] = _grid("u8")
    active_gfx_clk_below_host_limit_total: list[list[int]] = _grid("u8")


@dataclass(slots=True)
class MetricsHeader:
    structure_size: int = _num("u16")
    format_revision: int = _num("u8")
    content_revision: int = _num("u8")


@dataclass(slots=True)
class XcpMetrics:
    gfx_busy_inst: list[int] = _arr("u32", 8)
    jpeg_busy: list[int] = _arr("u16", 40)
    vcn_busy: list[int] = _arr("u16", 4)
    gfx_busy_acc: list[int] = _arr("u64", 8)
    gfx_below_host_limit_acc: list[int] = _arr("u64", 8)
    gfx_below_host_limit_ppt_acc: list[int] = _arr("u64", 8)
    gfx_below_host_limit_thm_acc: list[int] = _arr("u64", 8)
    gfx_low_utilization_acc: list[int] = _arr("u64", 8)
    gfx_below_host_limit_total_acc: list[int] = _arr("u64", 8)


@dataclass(slots=True)
class GpuMetrics:
    """amdsmi_gpu_metrics_t: the driver's gpu_metrics table as the C library hands it over."""

    common_header: MetricsHeader = _sub(MetricsHeader)
    temperature_edge: int = _num("u16")
    temperature_hotspot: int = _num("u16")
    temperature_mem: int = _num("u16")
    temperature_vrgfx: int = _num("u16")
    temperature_vrsoc: int = _num("u16")
    temperature_vrmem: int = _num("u16")
    average_gfx_activity: int = _num("u16")
    average_umc_activity: int = _num("u16")
    average_mm_activity: int = _num("u16")
    average_socket_power: int = _num("u16")
    energy_accumulator: int = _num("u64")
    system_clock_counter: int = _num("u64")
    average_gfxclk_frequency: int = _num("u16")
    average_socclk_frequency: int = _num("u16")
    average_uclk_frequency: int = _num("u16")
    average_vclk0_frequency: int = _num("u16")
    average_dclk0_frequency: int = _num("u16")
    average_vclk1_frequency: int = _num("u16")
    average_dclk1_frequency: int = _num("u16")
    current_gfxclk: int = _num("u16")
    current_socclk: int = _num("u16")
    current_uclk: int = _num("u16")
    current_vclk0: int = _num("u16")
    current_dclk0: int = _num("u16")
    current_vclk1: int = _num("u16")
    current_dclk1: int = _num("u16")
    throttle_status: int = _num("u32")
    current_fan_speed: int = _num("u16")
    pcie_link_width: int = _num("u16")
    pcie_link_speed: int = _num("u16")
    gfx_activity_acc: int = _num("u32")
    mem_activity_acc: int = _num("u32")
    temperature_hbm: list[int] = _arr("u16", 4)
    firmware_timestamp: int = _num("u64")
    voltage_soc: int = _num("u16")
    voltage_gfx: int = _num("u16")
    voltage_mem: int = _num("u16")
    indep_throttle_status: int = _num("u64")
    current_socket_power: int = _num("u16")
    vcn_activity: list[int] = _arr("u16", 4)
    gfxclk_lock_status: int = _num("u32")
    xgmi_link_width: int = _num("u16")
    xgmi_link_speed: int = _num("u16")
    pcie_bandwidth_acc: int = _num("u64")
    pcie_bandwidth_inst: int = _num("u64")
    pcie_l0_to_recov_count_acc: int = _num("u64")
    pcie_replay_count_acc: int = _num("u64")
    pcie_replay_rover_count_acc: int = _num("u64")
    xgmi_read_data_acc: list[int] = _arr("u64", 8)
    xgmi_write_data_acc: list[int] = _arr("u64", 8)
    current_gfxclks: list[int] = _arr("u16", 8)
    current_socclks: list[int] = _arr("u16", 4)
    current_vclk0s: list[int] = _arr("u16", 4)
    current_dclk0s: list[int] = _arr("u16", 4)
    jpeg_activity: list[int] = _arr("u16", 32)
    pcie_nak_sent_count_acc: int = _num("u32")
    pcie_nak_rcvd_count_acc: int = _num("u32")
    accumulation_counter: int = _num("u64")
    prochot_residency_acc: int = _num("u64")
    ppt_residency_acc: int = _num("u64")
    socket_thm_residency_acc: int = _num("u64")
    vr_thm_residency_acc: int = _num("u64")
    hbm_thm_residency_acc: int = _num("u64")
    num_partition: int = _num("u16")
    xcp_stats: list[XcpMetrics] = _subs(XcpMetrics, 8)
    pcie_lc_perf_other_end_recovery: int = _num("u32")
    vram_max_bandwidth: int = _num("u64")
    xgmi_link_status: list[int] = _arr("u16", 8)


@dataclass(slots=True)
class EventNotification:
    """One amdsmi_evt_notification_data_t: message is already the C parser's first token."""

    processor_handle: int = _num("u64")
    event: int = _num("u32")
    message: str = _text(64)


# ---------------------------------------------------------------------------------- sentinels
def leaf_paths(kind: type) -> dict[str, str]:
    """Every settable leaf of a record type: dotted path → C type (``"u16"``, ``"char"``…)."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(kind):
        ctype = f.metadata.get("ctype", "")
        if ctype == "struct":
            sub = _struct_type(kind, f.name)
            for path, leaf in leaf_paths(sub).items():
                out[f"{f.name}.{path}"] = leaf
        else:
            out[f.name] = ctype
    return out


def _struct_type(kind: type, name: str) -> type:
    probe = kind()
    value = getattr(probe, name)
    if isinstance(value, list):
        return type(value[0])
    return type(value)


def mask(record: Any, path: str, sentinel: int | None = None) -> None:
    """Put the 'no value' sentinel into ``path`` (every element if it is an array).

    ``sentinel`` defaults to the maximum of the field's C type. A path through an array of
    structures (``xcp_stats.gfx_busy_inst``) masks that field in every element.
    """
    kind: type = type(record)
    head, rest, ctype = _mask_plan(kind, path)
    value = getattr(record, head)
    if rest:
        targets = value if isinstance(value, list) else [value]
        for target in targets:
            mask(target, rest, sentinel)
        return
    if ctype not in CTYPE_MAX:
        raise ValueError(f"{type(record).__name__}.{head} is not a numeric field")
    fill = CTYPE_MAX[ctype] if sentinel is None else sentinel
    if isinstance(value, list):
        if value and isinstance(value[0], list):
            setattr(record, head, [[fill] * len(row) for row in value])
        else:
            setattr(record, head, [fill] * len(value))
    else:
        setattr(record, head, fill)


@functools.cache
def _mask_plan(kind: type, path: str) -> tuple[str, str, str]:
    """(field, rest of the path, C type of the field) of ``kind.path``, resolved once."""
    head, _, rest = path.partition(".")
    return head, rest, _field(kind, head).metadata.get("ctype", "")


@functools.cache
def _field(kind: type, name: str) -> dataclasses.Field[Any]:
    for f in dataclasses.fields(kind):
        if f.name == name:
            return f
    raise KeyError(f"{kind.__name__} has no field {name!r}")


CALL_RECORDS: dict[str, type] = {
    "amdsmi_get_gpu_asic_info": AsicInfo,
    "amdsmi_get_gpu_board_info": BoardInfo,
    "amdsmi_get_gpu_kfd_info": KfdInfo,
    "amdsmi_get_gpu_driver_info": DriverInfo,
    "amdsmi_get_gpu_vbios_info": VbiosInfo,
    "amdsmi_get_fw_info": FwInfo,
    "amdsmi_get_gpu_vram_info": VramInfo,
    "amdsmi_get_gpu_enumeration_info": EnumerationInfo,
    "amdsmi_get_power_info": PowerInfo,
    "amdsmi_get_power_cap_info": PowerCapInfo,
    "amdsmi_get_energy_count": EnergyCount,
    "amdsmi_get_gpu_activity": EngineUsage,
    "amdsmi_get_gpu_vram_usage": VramUsage,
    "amdsmi_get_clock_info": ClkInfo,
    "amdsmi_get_gpu_total_ecc_count": ErrorCount,
    "amdsmi_get_gpu_ecc_count": ErrorCount,
    "amdsmi_get_gpu_ras_feature_info": RasFeature,
    "amdsmi_get_pcie_info": PcieInfo,
    "amdsmi_get_xgmi_info": XgmiInfo,
    "amdsmi_get_gpu_xgmi_link_status": XgmiLinkStatus,
    "amdsmi_get_link_metrics": LinkMetrics,
    "amdsmi_get_gpu_metrics_info": GpuMetrics,
    "amdsmi_get_violation_status": ViolationStatus,
    "amdsmi_get_gpu_process_list": ProcInfo,
}
"""amdsmi function → the record it fills (keys of 'unsupported field' flags are
``<function>.<field path>`` into these)."""


@dataclass(slots=True)
class CperTimestamp:
    seconds: int = _num("u8")
    minutes: int = _num("u8")
    hours: int = _num("u8")
    flag: int = _num("u8")
    day: int = _num("u8")
    month: int = _num("u8")
    year: int = _num("u8")  # two digits; the wrapper adds 2000 below 100
    century: int = _num("u8")


@dataclass(slots=True)
class CperHeader:
    """amdsmi_cper_hdr_t; byte fields hold what a ``c_char`` array reads back as."""

    signature: bytes = field(default=b"CPER", metadata={"ctype": "char", "length": 4})
    revision: int = _num("u16")
    signature_end: int = _num("u32")
    sec_cnt: int = _num("u16")
    error_severity: int = _num("u32")
    cper_valid_bits: int = _num("u32")
    record_length: int = _num("u32")
    timestamp: CperTimestamp = _sub(CperTimestamp)
    platform_id: bytes = field(default=b"", metadata={"ctype": "char", "length": 16})
    partition_id: bytes = field(default=b"\0" * 16, metadata={"ctype": "u8", "length": 16})
    creator_id: bytes = field(default=b"", metadata={"ctype": "char", "length": 16})
    notify_type: bytes = field(default=b"\0" * 16, metadata={"ctype": "u8", "length": 16})
    record_id: bytes = field(default=b"", metadata={"ctype": "char", "length": 8})
    flags: int = _num("u32")
    persistence_info: int = _num("u64")


@dataclass(slots=True)
class CperRecord:
    """One Common Platform Error Record: its header and its raw bytes (header included)."""

    header: CperHeader = _sub(CperHeader)
    data: bytes = b""
