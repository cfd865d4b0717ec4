"""RawLibrary: libamd_smi's C-level behaviour over a SimNode — status codes and raw records.

Each method is named after the C function it stands for and takes C-level arguments
(handles as pointer integers, enums as plain ints). It returns the raw record(s) the C
function would fill, or raises ``SmiStatusError(status)`` with the status it would return.
Everything both faces need lives here: initialisation, handle validity (a GPU that left the
bus answers what real amdsmi does, ``off_bus_status``), hangs, BUSY after a reset,
unsupported calls and fields, permissions, and the KFD event queue. The Python face
(face.py) adds only what the real Python wrapper adds: type checks, exceptions and dict
shapes. An emulated C library can call the same
methods and copy the records into the real ctypes structures.
"""

from __future__ import annotations

import functools
import math
import os
import struct
import time
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from fleetd.sim import records as r
from fleetd.sim import wrapper as w
from fleetd.sim.enums import (
    AmdSmiClkType,
    AmdSmiGpuBlock,
    AmdSmiMemoryType,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
)
from fleetd.sim.model import (
    ENABLED_BLOCKS,
    ENERGY_RESOLUTION_UJ,
    FW_TICKS_PER_S,
    CperEntry,
    SimGpu,
    SimNode,
)
from fleetd.sim.partitions import BOARD_LEVEL, PARTITION_COUNTS, Partition
from fleetd.sim.physics import noise

MIB = 1024 * 1024
GTT_TOTAL = 1024 * 1024 * MIB
GTT_USED = 24 * MIB
XGMI_WEIGHT = 15
XGMI_MIN_BW, XGMI_MAX_BW = 50000, 64000
RAS_EEPROM_VERSION = 0x30000
RAS_SCHEMA = 0b1110  # single-bit, double-bit, poison
DEEP_SLEEP_MHZ = 140
CALLER_NAME = "fleetd"  # the KFD client the VRAM fallback makes of the caller
_R = TypeVar("_R")

_COMPUTE_NAMES = {
    w.AMDSMI_COMPUTE_PARTITION_SPX: "SPX",
    w.AMDSMI_COMPUTE_PARTITION_DPX: "DPX",
    w.AMDSMI_COMPUTE_PARTITION_QPX: "QPX",
    w.AMDSMI_COMPUTE_PARTITION_CPX: "CPX",
}
_MEMORY_NAMES = {w.AMDSMI_MEMORY_PARTITION_NPS1: "NPS1", w.AMDSMI_MEMORY_PARTITION_NPS4: "NPS4"}

_CH_HOT, _CH_HBM, _CH_VR, _CH_EDGE, _CH_POWER, _CH_GFX, _CH_UMC = range(1, 8)
CPER_HEADER = struct.Struct("<4sHIHIII8B16s16s16s16s8sIQ12s")  # 128 bytes, packed
CPER_SECTION_BYTES = 72 + 96  # one section descriptor and its body
CPER_MAX_ENTRIES = 20  # headers the Python wrapper asks for per call
CPER_DESCRIPTOR = struct.Struct("<IIBBBBI16s16sI20s")  # UEFI section descriptor, 72 bytes
CPER_SIM_BODY = struct.Struct("<8s16sIQ")  # the simulator's section body (see _cper_record)
CPER_SIM_MAGIC = b"FLEETSIM"
CPER_CRASHDUMP_GUID = bytes.fromhex("780cac322326f648b0d07365725fd6ae")  # AMD OOB crashdump
CPER_NONSTANDARD_GUID = bytes.fromhex("780cac322326f64881a2ac691780551d")  # AMD non-standard
CPER_AFIDS: dict[tuple[int, str], int] = {
    # (severity, block) → the AFID of AMD's public AFID event list (ROCm/amdsmi
    # src/aca-decode/error_map.c) a real decoder would give a record of that class
    (w.AMDSMI_CPER_SEV_FATAL, "UMC"): 20,  # HBM on-die ECC, fatal
    (w.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED, "UMC"): 22,  # HBM on-die ECC, non-fatal
    (w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED, "UMC"): 24,  # HBM, corrected
    (w.AMDSMI_CPER_SEV_FATAL, "XGMI_WAFL"): 18,  # XGMI, fatal
    (w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED, "XGMI_WAFL"): 17,  # XGMI, corrected
    (w.AMDSMI_CPER_SEV_FATAL, "PCIE_BIF"): 14,  # PCIe AER, fatal
    (w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED, "PCIE_BIF"): 13,  # PCIe AER, corrected
}
CPER_AFID_BY_SEVERITY = {
    w.AMDSMI_CPER_SEV_FATAL: 30,  # device internal errors, all others, fatal
    w.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED: 28,  # ... uncorrected, non-fatal
    w.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED: 29,  # ... corrected
}
CPER_MAX_AFIDS = 12  # MAX_NUMBER_OF_AFIDS_PER_RECORD in amdsmi 7.0.2


OFF_BUS_CACHED: frozenset[str] = frozenset(
    {"amdsmi_get_gpu_device_bdf", "amdsmi_get_processor_type"}
)
"""Answered from the device list amdsmi built at init: they keep working off the bus."""

OFF_BUS_DRM: frozenset[str] = frozenset(
    {
        "amdsmi_get_gpu_asic_info",
        "amdsmi_get_gpu_vram_info",
        "amdsmi_get_gpu_driver_info",
        "amdsmi_get_gpu_vram_usage",
        "amdsmi_get_gpu_process_list",
    }
)
"""Read through the DRM render node (libdrm ioctls, fdinfo): DRM_ERROR off the bus."""


def off_bus_status(function: str) -> int:
    """What real amdsmi answers on the old handle of a GPU that fell off the bus.

    The library resolves a handle against the device list it built at init and never
    answers NOT_FOUND for it (hardware-behaviour.md §1.3 #2). Calls read the device's sysfs
    files, which left with the PCI device: ``ENOENT``, which rocm_smi's ``ErrnoToRsmiStatus``
    maps to NOT_SUPPORTED (rocm-smi-lib ``rocm_smi_utils.cc``); calls through the DRM
    render node fail DRM_ERROR; the BDF and processor type come from the init-time list.
    """
    if function in OFF_BUS_CACHED:
        return w.AMDSMI_STATUS_SUCCESS
    if function in OFF_BUS_DRM:
        return w.AMDSMI_STATUS_DRM_ERROR
    return w.AMDSMI_STATUS_NOT_SUPPORTED


class SmiStatusError(Exception):
    """A C call returned a non-zero amdsmi_status_t."""

    def __init__(self, status: int) -> None:
        super().__init__(f"{w.STATUS_NAMES.get(status, 'unknown status')} ({status})")
        self.status = status


@dataclass
class _Registration:
    mask: int
    cursor: int


@functools.cache
def _names(enum: type[IntEnum], value: int) -> tuple[str, ...]:
    """Every member name (aliases included) of ``value``: the keys a call flag may use."""
    return tuple(name for name, member in enum.__members__.items() if member.value == value)


class _CallScope:
    """One per-GPU call (``with lib._call(...) as gpu``): a plain class rather than a
    generator context manager, since every simulated call enters one."""

    __slots__ = ("_args", "_function", "_handle", "_lib")

    def __init__(
        self, lib: RawLibrary, handle: int | None, function: str, args: tuple[str, ...]
    ) -> None:
        self._lib = lib
        self._handle = handle
        self._function = function
        self._args = args

    def __enter__(self) -> SimGpu:
        return self._lib._enter(self._handle, self._function, self._args)

    def __exit__(self, *exc: object) -> None:
        self._lib.node.lock.release()


class RawLibrary:
    """The simulated libamd_smi: one per face; the node it reads is shared."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self._init_count = 0
        self._listeners: dict[int, _Registration] = {}
        self._by_handle: dict[int, tuple[SimGpu, Partition]] = {}
        """Processor handle → (GPU, partition): rebuilt at each first init (the C library
        builds its device list then), so a partition-mode change shows after re-init."""
        self._map_partitions()
        self._enumerated: frozenset[int] = frozenset()
        """GPUs on the bus at init: like the C library, the device list is built once per
        initialisation, so a GPU that leaves the bus stays listed until the next init."""

    # ------------------------------------------------------------------ lifecycle, discovery
    def amdsmi_init(self, init_flags: int) -> None:
        with self.node.lock:
            if self._init_count == 0:
                self.node.sync()
                self._map_partitions()
                self._enumerated = frozenset(
                    g.index for g in self.node.gpus if self.node.present(g.index)
                )
            self._init_count += 1

    def amdsmi_get_lib_version(self) -> tuple[int, int, int, str]:
        """(major, minor, release, build) of the library on the node; needs no init."""
        return self.node.library_version

    def amdsmi_shut_down(self) -> None:
        with self.node.lock:
            if self._init_count > 0:
                self._init_count -= 1
            if self._init_count == 0:
                self._listeners.clear()

    def _map_partitions(self) -> None:
        self._by_handle = {p.handle: (self.node.gpus[p.gpu], p) for p in self.node.partitions()}

    def partition_for_handle(self, handle: int) -> Partition:
        """The logical device behind a processor handle (the caller validated it)."""
        return self._by_handle[handle][1]

    def _require_init(self) -> None:
        if self._init_count == 0:
            raise SmiStatusError(w.AMDSMI_STATUS_NOT_INIT)

    def _present(self) -> list[SimGpu]:
        """The GPUs enumerated at init (whether or not they are still on the bus)."""
        return [g for g in self.node.gpus if g.index in self._enumerated]

    def amdsmi_get_socket_handles(self) -> list[int]:
        """One socket per physical GPU (socket handle = GPU handle + 8)."""
        self._require_init()
        with self.node.lock:
            self.node.sync()
            return [g.ident.handle + 8 for g in self._present()]

    def amdsmi_get_socket_info(self, socket_handle: int) -> str:
        gpu = self._socket(socket_handle)
        return f"{gpu.ident.domain:04x}:{gpu.ident.bus:02x}:{gpu.ident.device:02x}"

    def amdsmi_get_processor_handles(self, socket_handle: int) -> list[int]:
        """One handle per XCP partition of the socket's GPU (one in SPX)."""
        gpu = self._socket(socket_handle)
        return [h for h, (g, _p) in self._by_handle.items() if g is gpu]

    def _socket(self, socket_handle: int) -> SimGpu:
        self._require_init()
        if not socket_handle:
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
        with self.node.lock:
            self.node.sync()
            for gpu in self._present():
                if gpu.ident.handle + 8 == socket_handle:
                    return gpu
        raise SmiStatusError(w.AMDSMI_STATUS_INVAL)

    def amdsmi_get_processor_handle_from_bdf(
        self, domain: int, bus: int, device: int, function: int
    ) -> int:
        self._require_init()
        with self.node.lock:
            self.node.sync()
            for handle, (gpu, part) in self._by_handle.items():
                i = gpu.ident
                if gpu.index in self._enumerated and (i.domain, i.bus, i.device, part.function) == (
                    domain,
                    bus,
                    device,
                    function,
                ):
                    return handle
        raise SmiStatusError(w.AMDSMI_STATUS_NOT_FOUND)

    def gpu_for_handle(self, handle: int | None) -> SimGpu:
        """The GPU behind a processor handle (INVAL for null, NOT_FOUND when unknown).

        A GPU that fell off the bus still has a valid handle: its calls fail as real amdsmi's
        do (``off_bus_status``), never NOT_FOUND."""
        self._require_init()
        if not handle:
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
        found = self._by_handle.get(handle)
        if found is None:
            raise SmiStatusError(w.AMDSMI_STATUS_NOT_FOUND)
        return found[0]

    def _call(self, handle: int | None, function: str, args: tuple[str, ...] = ()) -> _CallScope:
        """Enter a per-GPU call: validate, block if hung (no lock held), then hold the lock."""
        return _CallScope(self, handle, function, args)

    def _enter(self, handle: int | None, function: str, args: tuple[str, ...]) -> SimGpu:
        """``_call``'s entry; returns with the node lock held (released by the scope)."""
        gpu = self.gpu_for_handle(handle)
        node = self.node
        hang = node.hang_for(gpu.index, function)
        if hang is not None:
            hang.release.wait(timeout=hang.params.duration_s)
        node.lock.acquire()
        try:
            now = node.sync()
            if not node.present(gpu.index):
                status = off_bus_status(function)
                if status:
                    raise SmiStatusError(status)
            if now < gpu.unavailable_until:
                raise SmiStatusError(w.AMDSMI_STATUS_BUSY)
            if function in BOARD_LEVEL and self._by_handle[handle or 0][1].partition_id:
                raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)  # no such sysfs on an XCP
            status = node.call_status(gpu.index, function, args)
            if status:
                raise SmiStatusError(status)
        except BaseException:
            node.lock.release()
            raise
        return gpu

    def _finish(self, gpu: SimGpu, function: str, record: _R) -> _R:
        """``record`` with the fields the GPU's faults leave unset for ``function`` masked."""
        for field_path, sentinel in self.node.field_masks(gpu.index, function):
            r.mask(record, field_path, sentinel)
        return record

    def amdsmi_get_processor_type(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_get_processor_type"):
            return w.AMDSMI_PROCESSOR_TYPE_AMD_GPU

    # ------------------------------------------------------------------ identity
    def amdsmi_get_gpu_device_bdf(self, processor_handle: int) -> r.Bdf:
        with self._call(processor_handle, "amdsmi_get_gpu_device_bdf") as gpu:
            i = gpu.ident
            return r.Bdf(
                i.domain, i.bus, i.device, self.partition_for_handle(processor_handle).function
            )

    def amdsmi_get_gpu_device_uuid(self, processor_handle: int) -> str:
        with self._call(processor_handle, "amdsmi_get_gpu_device_uuid") as gpu:
            part = self.partition_for_handle(processor_handle)
            if self.node.library_version[:2] >= (26, 4):  # ROCm 7.13: HIP/rocminfo's format
                return (
                    gpu.ident.hip_uuid
                    if not part.partition_id
                    else f"{gpu.ident.hip_uuid}-{part.partition_id}"
                )
            return part.uuid

    def amdsmi_get_gpu_enumeration_info(self, processor_handle: int) -> r.EnumerationInfo:
        func = "amdsmi_get_gpu_enumeration_info"
        with self._call(processor_handle, func) as gpu:
            i = gpu.ident
            p = self.partition_for_handle(processor_handle)
            rec = r.EnumerationInfo(p.drm_render, p.drm_card, p.node_id, p.hip_id, i.hip_uuid)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_asic_info(self, processor_handle: int) -> r.AsicInfo:
        func = "amdsmi_get_gpu_asic_info"
        with self._call(processor_handle, func) as gpu:
            s, i = gpu.spec, gpu.ident
            rec = r.AsicInfo(
                market_name=s.market_name,
                vendor_id=0x1002,
                vendor_name="Advanced Micro Devices Inc. [AMD/ATI]",
                subvendor_id=0x1002,
                device_id=s.device_id,
                rev_id=s.rev_id,
                asic_serial=i.asic_serial,
                oam_id=i.oam_id,
                num_of_compute_units=s.num_cu,
                target_graphics_version=s.gfx_target,
                subsystem_id=s.subsystem_id,
            )
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_board_info(self, processor_handle: int) -> r.BoardInfo:
        with self._call(processor_handle, "amdsmi_get_gpu_board_info") as gpu:
            return r.BoardInfo(
                model_number=gpu.spec.board_model_number,
                product_serial=gpu.ident.product_serial,
                fru_id=gpu.ident.fru_id,
                product_name=gpu.spec.board_product_name,
                manufacturer_name="AMD",
            )

    def amdsmi_get_gpu_kfd_info(self, processor_handle: int) -> r.KfdInfo:
        func = "amdsmi_get_gpu_kfd_info"
        with self._call(processor_handle, func) as gpu:
            p = self.partition_for_handle(processor_handle)
            rec = r.KfdInfo(gpu.ident.kfd_id + p.partition_id, p.node_id, p.partition_id)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_driver_info(self, processor_handle: int) -> r.DriverInfo:
        with self._call(processor_handle, "amdsmi_get_gpu_driver_info") as gpu:
            return r.DriverInfo(gpu.spec.driver_version, "2015/01/01 00:00", "amdgpu")

    def amdsmi_get_gpu_vbios_info(self, processor_handle: int) -> r.VbiosInfo:
        with self._call(processor_handle, "amdsmi_get_gpu_vbios_info") as gpu:
            s = gpu.spec
            return r.VbiosInfo(
                s.vbios_name, s.vbios_build_date, s.vbios_part_number, s.vbios_version
            )

    def amdsmi_get_fw_info(self, processor_handle: int) -> r.FwInfo:
        """The GPU's firmware blocks (raw versions). Answered on every partition: the
        versions are the physical GPU's (inferred; the backend reads partition 0 only)."""
        func = "amdsmi_get_fw_info"
        with self._call(processor_handle, func) as gpu:
            blocks = list(gpu.firmware.items())[: r.FW_SLOTS]
            rec = r.FwInfo(num_fw_info=len(blocks))
            for k, (block, version) in enumerate(blocks):
                rec.fw_info_list[k] = r.FwInfoEntry(fw_id=block, fw_version=version)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_vram_info(self, processor_handle: int) -> r.VramInfo:
        func = "amdsmi_get_gpu_vram_info"
        with self._call(processor_handle, func) as gpu:
            s = gpu.spec
            rec = r.VramInfo(
                s.vram_type, s.vram_vendor, s.vram_mb, s.vram_bit_width, s.vram_max_bandwidth_gbs
            )
            return self._finish(gpu, func, rec)

    # ------------------------------------------------------------------ temperature, power
    def amdsmi_get_temp_metric(self, processor_handle: int, sensor_type: int, metric: int) -> int:
        args = tuple(_names(AmdSmiTemperatureType, sensor_type))
        with self._call(processor_handle, "amdsmi_get_temp_metric", args) as gpu:
            s = gpu.spec
            now = self.node.now
            idx = gpu.index
            seed = self.node.seed
            cur = AmdSmiTemperatureMetric.CURRENT
            table: dict[int, tuple[float, int, tuple[int, int] | None]] = {
                AmdSmiTemperatureType.EDGE: (gpu.t_edge, _CH_EDGE, s.edge_limits_c),
                AmdSmiTemperatureType.HOTSPOT: (gpu.t_hotspot, _CH_HOT, s.hotspot_limits_c),
                AmdSmiTemperatureType.VRAM: (gpu.t_hbm, _CH_HBM, s.hbm_limits_c),
                AmdSmiTemperatureType.PLX: (gpu.t_vr, _CH_VR, None),
            }
            if sensor_type not in table:
                raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)
            base, channel, limits = table[sensor_type]
            if metric == cur:  # the noise of the sensor asked for only
                return round(base + 0.4 * noise(seed, idx, channel, now))
            if limits is not None and metric == AmdSmiTemperatureMetric.CRITICAL:
                return limits[0]
            if limits is not None and metric == AmdSmiTemperatureMetric.EMERGENCY:
                return limits[1]
            raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)

    def _power_now(self, gpu: SimGpu) -> int:
        jitter = 1.0 + 0.01 * noise(self.node.seed, gpu.index, _CH_POWER, self.node.now)
        return min(round(gpu.power_w * jitter), round(self.node.power_limit_w(gpu)))

    def amdsmi_get_power_info(self, processor_handle: int) -> r.PowerInfo:
        func = "amdsmi_get_power_info"
        with self._call(processor_handle, func) as gpu:
            watts = self._power_now(gpu)
            rec = r.PowerInfo(
                socket_power=watts,
                current_socket_power=watts,
                average_socket_power=watts,
                gfx_voltage=0,
                soc_voltage=0,
                mem_voltage=0,
                power_limit=gpu.spec.power_cap_w,
            )
            return self._finish(gpu, func, rec)

    def amdsmi_get_power_cap_info(
        self, processor_handle: int, sensor_ind: int = 0
    ) -> r.PowerCapInfo:
        func = "amdsmi_get_power_cap_info"
        with self._call(processor_handle, func) as gpu:
            s = gpu.spec
            rec = r.PowerCapInfo(
                power_cap=s.power_cap_w * 1_000_000,
                default_power_cap=s.power_cap_w * 1_000_000,
                dpm_cap=s.gfx_clk_mhz[1],
                min_power_cap=s.min_power_cap_w * 1_000_000,
                max_power_cap=s.power_cap_w * 1_000_000,
            )
            return self._finish(gpu, func, rec)

    def _energy_ticks(self, gpu: SimGpu) -> int:
        return int(gpu.energy_j * 1e6 / ENERGY_RESOLUTION_UJ)

    def amdsmi_get_energy_count(self, processor_handle: int) -> r.EnergyCount:
        func = "amdsmi_get_energy_count"
        with self._call(processor_handle, func) as gpu:
            rec = r.EnergyCount(
                energy_accumulator=self._energy_ticks(gpu),
                counter_resolution=ENERGY_RESOLUTION_UJ,
                timestamp=int(gpu.uptime_s * 1e9),
            )
            return self._finish(gpu, func, rec)

    # ------------------------------------------------------------------ activity, memory, clocks
    def _activity(self, gpu: SimGpu) -> tuple[int, int]:
        if gpu.load <= 0.0:
            return 0, 0
        now, seed = self.node.now, self.node.seed
        gfx = gpu.load * 100.0 + 2.0 * noise(seed, gpu.index, _CH_GFX, now)
        umc = gpu.load * 55.0 + 2.0 * noise(seed, gpu.index, _CH_UMC, now)
        return max(0, min(100, round(gfx))), max(0, min(100, round(umc)))

    def amdsmi_get_gpu_activity(self, processor_handle: int) -> r.EngineUsage:
        func = "amdsmi_get_gpu_activity"
        with self._call(processor_handle, func) as gpu:
            gfx, umc = self._activity(gpu)
            rec = r.EngineUsage(gfx, umc, 0)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_vram_usage(self, processor_handle: int) -> r.VramUsage:
        func = "amdsmi_get_gpu_vram_usage"
        with self._call(processor_handle, func) as gpu:
            rec = r.VramUsage(gpu.spec.vram_mb, self.node.vram_used_bytes(gpu) // MIB)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_memory_total(self, processor_handle: int, mem_type: int) -> int:
        args = tuple(_names(AmdSmiMemoryType, mem_type))
        with self._call(processor_handle, "amdsmi_get_gpu_memory_total", args) as gpu:
            if mem_type == AmdSmiMemoryType.GTT:
                return GTT_TOTAL
            if mem_type in (AmdSmiMemoryType.VRAM, AmdSmiMemoryType.VIS_VRAM):
                return gpu.spec.vram_mb * MIB
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)

    def amdsmi_get_gpu_memory_usage(self, processor_handle: int, mem_type: int) -> int:
        args = tuple(_names(AmdSmiMemoryType, mem_type))
        with self._call(processor_handle, "amdsmi_get_gpu_memory_usage", args) as gpu:
            if mem_type == AmdSmiMemoryType.GTT:
                return GTT_USED
            if mem_type in (AmdSmiMemoryType.VRAM, AmdSmiMemoryType.VIS_VRAM):
                self.node.kfd_self_client(os.getpid(), CALLER_NAME)
                return self.node.vram_used_bytes(gpu)
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)

    def _clocks(self, gpu: SimGpu) -> dict[int, tuple[int, int, int]]:
        """Clock domain → (current, min, max) MHz."""
        s = gpu.spec
        busy = gpu.load > 0.02

        def scaled(bounds: tuple[int, int], share: float) -> tuple[int, int, int]:
            lo, hi = bounds
            return (round(lo + (hi - lo) * share) if busy else lo, lo, hi)

        gfx = self.node.gfx_clock_mhz(gpu)
        return {
            AmdSmiClkType.GFX: (gfx, s.gfx_clk_mhz[0], s.gfx_clk_mhz[1]),
            AmdSmiClkType.MEM: (s.mem_clk_mhz, round(s.mem_clk_mhz * 0.69), s.mem_clk_mhz),
            AmdSmiClkType.SOC: scaled(s.soc_clk_mhz, 0.5 + 0.5 * gpu.load),
            AmdSmiClkType.DF: scaled(s.fclk_mhz, 1.0),
            AmdSmiClkType.VCLK0: scaled(s.vclk_mhz, 0.0),
            AmdSmiClkType.DCLK0: scaled(s.dclk_mhz, 0.0),
        }

    def amdsmi_get_clock_info(self, processor_handle: int, clk_type: int) -> r.ClkInfo:
        func = "amdsmi_get_clock_info"
        args = tuple(_names(AmdSmiClkType, clk_type))
        with self._call(processor_handle, func, args) as gpu:
            clocks = self._clocks(gpu)
            if clk_type not in clocks:
                raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)
            cur, lo, hi = clocks[clk_type]
            rec = r.ClkInfo(cur, lo, hi, 0, 1 if cur < DEEP_SLEEP_MHZ else 0)
            return self._finish(gpu, func, rec)

    # ------------------------------------------------------------------ ECC / RAS
    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: int) -> r.ErrorCount:
        func = "amdsmi_get_gpu_total_ecc_count"
        with self._call(processor_handle, func) as gpu:
            counts = gpu.ecc_counts.values()
            rec = r.ErrorCount(
                sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts)
            )
            return self._finish(gpu, func, rec)

    def _block(self, block: int) -> str | None:
        names = [n for n in _names(AmdSmiGpuBlock, block) if n in ENABLED_BLOCKS]
        return names[0] if names else None

    def amdsmi_get_gpu_ecc_count(self, processor_handle: int, block: int) -> r.ErrorCount:
        func = "amdsmi_get_gpu_ecc_count"
        with self._call(processor_handle, func, tuple(_names(AmdSmiGpuBlock, block))) as gpu:
            name = self._block(block)
            if name is None:
                raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)
            ce, ue, de = gpu.ecc[name]
            rec = r.ErrorCount(int(ce), int(ue), int(de))
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_ecc_enabled(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_get_gpu_ecc_enabled"):
            mask = 0
            for name in ENABLED_BLOCKS:
                mask |= int(AmdSmiGpuBlock[name])
            return mask

    def amdsmi_get_gpu_ecc_status(self, processor_handle: int, block: int) -> int:
        func = "amdsmi_get_gpu_ecc_status"
        with self._call(processor_handle, func, tuple(_names(AmdSmiGpuBlock, block))) as gpu:
            name = self._block(block)
            if name is None:
                return w.AMDSMI_RAS_ERR_STATE_DISABLED
            ce, ue, de = gpu.ecc_counts[name]
            if ue:
                return w.AMDSMI_RAS_ERR_STATE_MULT_UC
            if de:
                return w.AMDSMI_RAS_ERR_STATE_POISON
            if ce:
                return w.AMDSMI_RAS_ERR_STATE_SING_C
            return w.AMDSMI_RAS_ERR_STATE_ENABLED

    def amdsmi_get_gpu_ras_feature_info(self, processor_handle: int) -> r.RasFeature:
        func = "amdsmi_get_gpu_ras_feature_info"
        with self._call(processor_handle, func) as gpu:
            rec = r.RasFeature(RAS_EEPROM_VERSION, RAS_SCHEMA)
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_ras_block_features_enabled(self, processor_handle: int, block: int) -> int:
        func = "amdsmi_get_gpu_ras_block_features_enabled"
        with self._call(processor_handle, func, tuple(_names(AmdSmiGpuBlock, block))):
            if self._block(block) is None:
                return w.AMDSMI_RAS_ERR_STATE_DISABLED
            return w.AMDSMI_RAS_ERR_STATE_ENABLED

    def amdsmi_get_gpu_bad_page_info(self, processor_handle: int) -> list[r.RetiredPage]:
        with self._call(processor_handle, "amdsmi_get_gpu_bad_page_info") as gpu:
            return [r.RetiredPage(p.address, p.size, p.status) for p in gpu.bad_pages]

    def amdsmi_get_gpu_memory_reserved_pages(self, processor_handle: int) -> list[r.RetiredPage]:
        with self._call(processor_handle, "amdsmi_get_gpu_memory_reserved_pages") as gpu:
            return [r.RetiredPage(p.address, p.size, p.status) for p in gpu.bad_pages]

    def amdsmi_get_gpu_bad_page_threshold(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_get_gpu_bad_page_threshold") as gpu:
            if not self.node.root:  # the C library reads debugfs
                raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)
            return gpu.spec.bad_page_threshold

    # ------------------------------------------------------------------ PCIe
    def amdsmi_get_pcie_info(self, processor_handle: int) -> r.PcieInfo:
        func = "amdsmi_get_pcie_info"
        with self._call(processor_handle, func) as gpu:
            s = gpu.spec
            width, speed = self.node.pcie_link(gpu.index)
            p = gpu.pcie
            rec = r.PcieInfo(
                r.PcieStatic(
                    s.pcie_max_width,
                    s.pcie_max_speed_mts,
                    s.pcie_gen,
                    w.AMDSMI_CARD_FORM_FACTOR_OAM,
                    s.pcie_gen,
                ),
                r.PcieMetric(
                    pcie_width=width,
                    pcie_speed=speed,
                    pcie_bandwidth=round(self.node.pcie_bandwidth_gbs(gpu, width, speed) * 8000),
                    pcie_replay_count=int(p["replay"]),
                    pcie_l0_to_recovery_count=int(p["l0"]),
                    pcie_replay_roll_over_count=int(p["rollover"]),
                    pcie_nak_sent_count=int(p["nak_sent"]),
                    pcie_nak_received_count=int(p["nak_rcvd"]),
                    pcie_lc_perf_other_end_recovery_count=int(p["other"]),
                ),
            )
            return self._finish(gpu, func, rec)

    def amdsmi_get_gpu_pci_replay_counter(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_get_gpu_pci_replay_counter") as gpu:
            return int(gpu.pcie["replay"])

    def amdsmi_get_gpu_cper_entries(
        self,
        processor_handle: int,
        severity_mask: int,
        buffer_size: int,
        cursor: int,
        max_entries: int = CPER_MAX_ENTRIES,
    ) -> tuple[list[r.CperRecord], int, int]:
        """(records from ``cursor`` matching ``severity_mask``, next cursor, status).

        The status is SUCCESS, or MORE_DATA when matching records were left for the next
        call (the entry limit or ``buffer_size`` was reached). Needs root.
        """
        with self._call(processor_handle, "amdsmi_get_gpu_cper_entries") as gpu:
            if not self.node.root:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_PERM)
            out: list[r.CperRecord] = []
            used = 0
            next_cursor = max(cursor, gpu.cper_total - len(gpu.cper))
            status = w.AMDSMI_STATUS_SUCCESS
            for entry in gpu.cper:
                if entry.seq < next_cursor or not severity_mask & (1 << entry.severity):
                    continue
                record = self._cper_record(gpu, entry)
                if len(out) == max_entries or used + len(record.data) > buffer_size:
                    status = w.AMDSMI_STATUS_MORE_DATA
                    break
                out.append(record)
                used += len(record.data)
                next_cursor = entry.seq + 1
            if status == w.AMDSMI_STATUS_SUCCESS:
                next_cursor = max(next_cursor, gpu.cper_total)
            return out, next_cursor, status

    def _cper_record(self, gpu: SimGpu, entry: CperEntry) -> r.CperRecord:
        stamp = time.gmtime(entry.at)
        when = r.CperTimestamp(
            stamp.tm_sec, stamp.tm_min, stamp.tm_hour, 0, stamp.tm_mday, stamp.tm_mon,
            stamp.tm_year % 100, stamp.tm_year // 100,
        )  # fmt: skip
        header = r.CperHeader(
            signature=b"CPER",
            revision=0x0100,
            signature_end=0xFFFFFFFF,
            sec_cnt=1,
            error_severity=entry.severity,
            cper_valid_bits=0b011,  # platform id and timestamp are valid
            record_length=CPER_HEADER.size + CPER_SECTION_BYTES,
            timestamp=when,
            platform_id=f"{gpu.spec.model}-OAM{gpu.ident.oam_id}".encode(),
            partition_id=b"\0" * 16,
            creator_id=b"amdgpu",
            notify_type=struct.pack("<Q", entry.notify) + b"\0" * 8,
            record_id=f"{entry.seq:08X}".encode(),
            flags=0,
            persistence_info=0,
        )
        head = CPER_HEADER.pack(
            header.signature, header.revision, header.signature_end, header.sec_cnt,
            header.error_severity, header.cper_valid_bits, header.record_length,
            when.seconds, when.minutes, when.hours, when.flag, when.day, when.month,
            when.year, when.century, header.platform_id, header.partition_id,
            header.creator_id, header.notify_type, header.record_id, header.flags,
            header.persistence_info, b"\0" * 12,
        )  # fmt: skip
        # one section: a UEFI descriptor naming AMD's crashdump (fatal) or non-standard
        # section type, then a body of the simulator's own layout. Deliberate deviation: a
        # real body holds ACA registers that AMD's decoder turns into the AFID; the
        # simulator writes the AFID itself (CPER_AFIDS), and its decoder reads it back.
        kind = (
            CPER_CRASHDUMP_GUID
            if entry.severity == w.AMDSMI_CPER_SEV_FATAL
            else CPER_NONSTANDARD_GUID
        )
        offset = CPER_HEADER.size + CPER_DESCRIPTOR.size
        body_size = CPER_SECTION_BYTES - CPER_DESCRIPTOR.size
        descriptor = CPER_DESCRIPTOR.pack(
            offset, body_size, 0, 1, 0, 0, 0, kind, b"\0" * 16, entry.severity,
            f"OAM{gpu.ident.oam_id}".encode(),
        )  # fmt: skip
        afid = entry.afid or CPER_AFIDS.get(
            (entry.severity, entry.block), CPER_AFID_BY_SEVERITY.get(entry.severity, 34)
        )
        body = CPER_SIM_BODY.pack(CPER_SIM_MAGIC, entry.block.encode(), entry.count, afid)
        return r.CperRecord(header, head + descriptor + body.ljust(body_size, b"\0"))

    def amdsmi_get_afids_from_cper(self, data: bytes, capacity: int = CPER_MAX_AFIDS) -> list[int]:
        """The AFIDs of one CPER record (no handle, no init: a pure decode, as in the C
        library). A buffer that is not a CPER record is UNEXPECTED_DATA; sections of other
        types carry no AFID; at most ``capacity`` are returned."""
        if (
            len(data) < CPER_HEADER.size
            or data[:4] != b"CPER"
            or struct.unpack_from("<I", data, 6)[0] != 0xFFFFFFFF
        ):
            raise SmiStatusError(w.AMDSMI_STATUS_UNEXPECTED_DATA)
        count = struct.unpack_from("<H", data, 10)[0]
        afids: list[int] = []
        for i in range(count):
            at = CPER_HEADER.size + CPER_DESCRIPTOR.size * i
            if at + CPER_DESCRIPTOR.size > len(data):
                raise SmiStatusError(w.AMDSMI_STATUS_UNEXPECTED_DATA)
            offset, size, *_rest = CPER_DESCRIPTOR.unpack_from(data, at)
            kind = _rest[5]
            if kind not in (CPER_CRASHDUMP_GUID, CPER_NONSTANDARD_GUID):
                continue
            if offset + CPER_SIM_BODY.size > len(data) or size < CPER_SIM_BODY.size:
                raise SmiStatusError(w.AMDSMI_STATUS_UNEXPECTED_DATA)
            magic, _block, _n, afid = CPER_SIM_BODY.unpack_from(data, offset)
            afids.append(afid if magic == CPER_SIM_MAGIC else 33)  # 33: invalid ACA data
        return afids[:capacity]

    # ------------------------------------------------------------------ XGMI, topology
    def amdsmi_get_xgmi_info(self, processor_handle: int) -> r.XgmiInfo:
        func = "amdsmi_get_xgmi_info"
        with self._call(processor_handle, func) as gpu:
            rec = r.XgmiInfo(gpu.spec.xgmi_lanes, gpu.hive_id, gpu.ident.xgmi_node_id, gpu.index)
            return self._finish(gpu, func, rec)

    def amdsmi_gpu_xgmi_error_status(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_gpu_xgmi_error_status") as gpu:
            if not self.node.xgmi_error_status_readable:
                # sysfs xgmi_error: EINVAL on DF 4.x → RSMI_STATUS_INVALID_ARGS → INVAL
                raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
            return gpu.xgmi_error

    def amdsmi_reset_gpu_xgmi_error(self, processor_handle: int) -> None:
        with self._call(processor_handle, "amdsmi_reset_gpu_xgmi_error") as gpu:
            if not self.node.root:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_PERM)
            if not self.node.xgmi_error_status_readable:
                raise SmiStatusError(w.AMDSMI_STATUS_INVAL)  # it reads xgmi_error to clear it
            gpu.xgmi_error = w.AMDSMI_XGMI_STATUS_NO_ERRORS

    def amdsmi_get_gpu_xgmi_link_status(self, processor_handle: int) -> r.XgmiLinkStatus:
        func = "amdsmi_get_gpu_xgmi_link_status"
        with self._call(processor_handle, func) as gpu:
            # per port, not per peer: total_links is the GPU count (amd_smi.cc@0170385b)
            ports = self.node.xgmi_ports(gpu.index)
            status = [
                w.AMDSMI_XGMI_LINK_DISABLE
                if up is None
                else w.AMDSMI_XGMI_LINK_UP
                if up
                else w.AMDSMI_XGMI_LINK_DOWN
                for up in ports
            ]
            links = len(ports)
            rec = r.XgmiLinkStatus(links, status + [w.AMDSMI_XGMI_LINK_DISABLE] * (8 - links))
            return self._finish(gpu, func, rec)

    def amdsmi_get_link_metrics(self, processor_handle: int) -> r.LinkMetrics:
        func = "amdsmi_get_link_metrics"
        with self._call(processor_handle, func) as gpu:
            rec = r.LinkMetrics(num_links=len(self.node.peers(gpu.index)))
            for k, peer in enumerate(self.node.peers(gpu.index)):
                pi = self.node.gpus[peer].ident
                rec.links[k] = r.Link(
                    bdf=r.Bdf(pi.domain, pi.bus, pi.device, pi.function),
                    bit_rate=gpu.spec.xgmi_bit_rate_gbps,
                    max_bandwidth=gpu.spec.xgmi_max_bandwidth_gbps,
                    link_type=w.AMDSMI_LINK_TYPE_XGMI,
                    read=int(gpu.xgmi_read_kb[k]),
                    write=int(gpu.xgmi_write_kb[k]),
                )
            return self._finish(gpu, func, rec)

    def amdsmi_get_link_topology_nearest(self, processor_handle: int, link_type: int) -> list[int]:
        """Handles (pointer values) of the nearest GPUs over ``link_type``: the hive for XGMI."""
        with self._call(processor_handle, "amdsmi_get_link_topology_nearest") as gpu:
            if link_type == w.AMDSMI_LINK_TYPE_XGMI:
                return [
                    self.node.gpus[p].ident.handle
                    for p in self.node.peers(gpu.index)
                    if self.node.present(p)
                ]
            if link_type == w.AMDSMI_LINK_TYPE_PCIE:
                return []
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)

    def amdsmi_is_P2P_accessible(
        self, processor_handle_src: int, processor_handle_dst: int
    ) -> bool:
        src, dst = self._pair(
            processor_handle_src, processor_handle_dst, "amdsmi_is_P2P_accessible"
        )
        return src.hive_id == dst.hive_id

    def amdsmi_topo_get_numa_node_number(self, processor_handle: int) -> int:
        """Two sockets: GPUs 0-3 hang off NUMA node 0, GPUs 4-7 off node 1."""
        with self._call(processor_handle, "amdsmi_topo_get_numa_node_number") as gpu:
            return gpu.index // 4

    def amdsmi_get_gpu_topo_numa_affinity(self, processor_handle: int) -> int:
        with self._call(processor_handle, "amdsmi_get_gpu_topo_numa_affinity") as gpu:
            return gpu.index // 4

    def amdsmi_get_gpu_compute_partition(self, processor_handle: int) -> str:
        with self._call(processor_handle, "amdsmi_get_gpu_compute_partition"):
            return self.node.compute_partition

    def amdsmi_get_gpu_memory_partition(self, processor_handle: int) -> str:
        with self._call(processor_handle, "amdsmi_get_gpu_memory_partition"):
            return self.node.memory_partition

    def amdsmi_set_gpu_compute_partition(self, processor_handle: int, mode: int) -> None:
        """Switch every GPU's compute partition (root only; INVAL for a mode the node's
        memory mode forbids, e.g. SPX under NPS4). Handles change at the next init."""
        self._set_partition(processor_handle, "amdsmi_set_gpu_compute_partition", mode, None)

    def amdsmi_set_gpu_memory_partition(self, processor_handle: int, mode: int) -> None:
        """Switch the memory partition (root only; the driver reload it needs is implied)."""
        self._set_partition(processor_handle, "amdsmi_set_gpu_memory_partition", None, mode)

    def _set_partition(
        self, handle: int, function: str, compute: int | None, memory: int | None
    ) -> None:
        with self._call(handle, function):
            if not self.node.root:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_PERM)
            if self.node.partition_set_status:
                raise SmiStatusError(self.node.partition_set_status)
            new_compute = self.node.compute_partition
            new_memory = self.node.memory_partition
            if compute is not None:
                new_compute = _COMPUTE_NAMES.get(compute, "")
            if memory is not None:
                new_memory = _MEMORY_NAMES.get(memory, "")
            try:
                self.node.set_partition_modes(new_compute, new_memory)
            except ValueError:
                raise SmiStatusError(w.AMDSMI_STATUS_INVAL) from None

    def amdsmi_get_gpu_metrics_header_info(self, processor_handle: int) -> r.MetricsHeader:
        with self._call(processor_handle, "amdsmi_get_gpu_metrics_header_info") as gpu:
            s = gpu.spec
            return r.MetricsHeader(s.metrics_structure_size, 1, s.metrics_content_revision)

    def _pair(self, src: int, dst: int, function: str) -> tuple[SimGpu, SimGpu]:
        peer = self.gpu_for_handle(dst)
        with self._call(src, function) as gpu:
            return gpu, peer

    def amdsmi_topo_get_link_type(
        self, processor_handle_src: int, processor_handle_dst: int
    ) -> tuple[int, int]:
        """(hops, link type) between two GPUs."""
        src, dst = self._pair(
            processor_handle_src, processor_handle_dst, "amdsmi_topo_get_link_type"
        )
        if src is dst:
            return 0, w.AMDSMI_LINK_TYPE_INTERNAL
        if src.hive_id == dst.hive_id:
            return 1, w.AMDSMI_LINK_TYPE_XGMI
        return 2, w.AMDSMI_LINK_TYPE_PCIE

    def amdsmi_topo_get_link_weight(
        self, processor_handle_src: int, processor_handle_dst: int
    ) -> int:
        func = "amdsmi_topo_get_link_weight"
        src, dst = self._pair(processor_handle_src, processor_handle_dst, func)
        if src is dst:
            return 0
        return XGMI_WEIGHT if src.hive_id == dst.hive_id else 40

    def amdsmi_get_minmax_bandwidth_between_processors(
        self, processor_handle_src: int, processor_handle_dst: int
    ) -> tuple[int, int]:
        func = "amdsmi_get_minmax_bandwidth_between_processors"
        src, dst = self._pair(processor_handle_src, processor_handle_dst, func)
        if src is dst or src.hive_id != dst.hive_id:
            raise SmiStatusError(w.AMDSMI_STATUS_NOT_SUPPORTED)
        return XGMI_MIN_BW, XGMI_MAX_BW

    # ------------------------------------------------------------------ gpu_metrics, violations
    def amdsmi_get_gpu_metrics_info(self, processor_handle: int) -> r.GpuMetrics:
        func = "amdsmi_get_gpu_metrics_info"
        with self._call(processor_handle, func) as gpu:
            rec = self._metrics(gpu)
            return self._finish(gpu, func, rec)

    def _metrics(self, gpu: SimGpu) -> r.GpuMetrics:
        s, node = gpu.spec, self.node
        now, seed, idx = node.now, node.seed, gpu.index
        gfx_act, umc_act = self._activity(gpu)
        clocks = self._clocks(gpu)
        width, speed = node.pcie_link(idx)
        peers = node.peers(idx)
        u16, u32, u64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
        xcc = s.num_xcc
        pad32, pad64 = [u32] * (8 - xcc), [u64] * (8 - xcc)
        ppt, thm = int(gpu.residency["ppt"]), int(gpu.residency["socket"])
        busy = int(gpu.busy_acc)
        first = r.XcpMetrics(
            gfx_busy_inst=[gfx_act] * xcc + pad32,
            jpeg_busy=[0] * 32 + [u16] * 8,
            vcn_busy=[0] * 4,
            gfx_busy_acc=[busy] * xcc + pad64,
            gfx_below_host_limit_acc=[ppt + thm] * xcc + pad64,
            gfx_below_host_limit_ppt_acc=[ppt] * xcc + pad64,
            gfx_below_host_limit_thm_acc=[thm] * xcc + pad64,
            gfx_low_utilization_acc=[max(0, int(gpu.acc_counter * 100) - busy)] * xcc + pad64,
            gfx_below_host_limit_total_acc=[ppt + thm] * xcc + pad64,
        )
        empty = [  # one partition (SPX): the others are empty
            r.XcpMetrics(
                gfx_busy_inst=[u32] * 8,
                jpeg_busy=[u16] * 40,
                vcn_busy=[u16] * 4,
                gfx_busy_acc=[u64] * 8,
                gfx_below_host_limit_acc=[u64] * 8,
                gfx_below_host_limit_ppt_acc=[u64] * 8,
                gfx_below_host_limit_thm_acc=[u64] * 8,
                gfx_low_utilization_acc=[u64] * 8,
                gfx_below_host_limit_total_acc=[u64] * 8,
            )
            for _ in range(7)
        ]
        m = r.GpuMetrics(
            common_header=r.MetricsHeader(s.metrics_structure_size, 1, s.metrics_content_revision),
            xcp_stats=[first, *empty],
        )
        m.temperature_edge = round(gpu.t_edge)
        m.temperature_hotspot = round(gpu.t_hotspot + 0.4 * noise(seed, idx, _CH_HOT, now))
        m.temperature_mem = round(gpu.t_hbm + 0.4 * noise(seed, idx, _CH_HBM, now))
        m.temperature_vrgfx = round(gpu.t_vr)
        m.temperature_vrsoc = round(gpu.t_vr + 0.4 * noise(seed, idx, _CH_VR, now))
        m.temperature_vrmem = round(gpu.t_vr)
        m.average_gfx_activity = gfx_act
        m.average_umc_activity = umc_act
        m.average_mm_activity = 0
        m.average_socket_power = self._power_now(gpu)
        m.energy_accumulator = self._energy_ticks(gpu)
        m.system_clock_counter = int(gpu.uptime_s * 1e9)
        gfx = clocks[AmdSmiClkType.GFX][0]
        soc = clocks[AmdSmiClkType.SOC][0]
        vclk = clocks[AmdSmiClkType.VCLK0][0]
        dclk = clocks[AmdSmiClkType.DCLK0][0]
        m.average_gfxclk_frequency = m.current_gfxclk = gfx
        m.average_socclk_frequency = m.current_socclk = soc
        m.average_uclk_frequency = m.current_uclk = s.mem_clk_mhz
        m.average_vclk0_frequency = m.current_vclk0 = vclk
        m.average_dclk0_frequency = m.current_dclk0 = dclk
        m.average_vclk1_frequency = m.current_vclk1 = vclk
        m.average_dclk1_frequency = m.current_dclk1 = dclk
        m.throttle_status = 0  # the MI3xx driver hard-codes it
        m.current_fan_speed = 0
        m.pcie_link_width = width
        m.pcie_link_speed = speed // 100
        m.gfx_activity_acc = int(gpu.activity_acc["gfx"]) & u32
        m.mem_activity_acc = int(gpu.activity_acc["mem"]) & u32
        m.temperature_hbm = [round(gpu.t_hbm)] * 4
        m.firmware_timestamp = int(gpu.uptime_s * FW_TICKS_PER_S)
        m.voltage_soc = m.voltage_gfx = m.voltage_mem = 0
        m.indep_throttle_status = 0
        m.current_socket_power = self._power_now(gpu)
        m.vcn_activity = [0, 0, 0, 0]
        m.gfxclk_lock_status = 0
        m.xgmi_link_width = s.xgmi_lanes
        m.xgmi_link_speed = s.xgmi_bit_rate_gbps
        m.pcie_bandwidth_acc = int(gpu.pcie_bw_acc)
        m.pcie_bandwidth_inst = round(node.pcie_bandwidth_gbs(gpu, width, speed))
        m.pcie_l0_to_recov_count_acc = int(gpu.pcie["l0"])
        m.pcie_replay_count_acc = int(gpu.pcie["replay"])
        m.pcie_replay_rover_count_acc = int(gpu.pcie["rollover"])
        m.xgmi_read_data_acc = [int(v) for v in gpu.xgmi_read_kb[: len(peers)]] + [0] * (
            8 - len(peers)
        )
        m.xgmi_write_data_acc = [int(v) for v in gpu.xgmi_write_kb[: len(peers)]] + [0] * (
            8 - len(peers)
        )
        m.current_gfxclks = [gfx] * s.num_xcc + [u16] * (8 - s.num_xcc)
        m.current_socclks = [soc] * 4
        m.current_vclk0s = [vclk] * 4
        m.current_dclk0s = [dclk] * 4
        m.jpeg_activity = [0] * 32
        m.pcie_nak_sent_count_acc = int(gpu.pcie["nak_sent"]) & u32
        m.pcie_nak_rcvd_count_acc = int(gpu.pcie["nak_rcvd"]) & u32
        m.accumulation_counter = int(gpu.acc_counter)
        m.prochot_residency_acc = int(gpu.residency["prochot"])
        m.ppt_residency_acc = int(gpu.residency["ppt"])
        m.socket_thm_residency_acc = int(gpu.residency["socket"])
        m.vr_thm_residency_acc = int(gpu.residency["vr"])
        m.hbm_thm_residency_acc = int(gpu.residency["hbm"])
        m.num_partition = PARTITION_COUNTS[self.node.compute_partition]
        m.pcie_lc_perf_other_end_recovery = int(gpu.pcie["other"]) & u32
        m.vram_max_bandwidth = s.vram_max_bandwidth_gbs
        ports = node.xgmi_ports(idx)
        m.xgmi_link_status = [u16 if up is None else int(up) for up in ports] + [u16] * (
            8 - len(ports)
        )
        return m

    def amdsmi_get_violation_status(self, processor_handle: int) -> r.ViolationStatus:
        """Like the C call, minus its 100 ms sleep: ``per_*`` is 100 while a throttler is on."""
        func = "amdsmi_get_violation_status"
        with self._call(processor_handle, func) as gpu:
            t = self.node.throttle_state(gpu)
            res = gpu.residency
            ppt, sock = int(res["ppt"]), int(res["socket"])
            rec = r.ViolationStatus(
                reference_timestamp=int(self.node.now * 1e6),
                violation_timestamp=int(gpu.uptime_s * FW_TICKS_PER_S),
                acc_counter=int(gpu.acc_counter),
                acc_prochot_thrm=int(res["prochot"]),
                acc_ppt_pwr=ppt,
                acc_socket_thrm=sock,
                acc_vr_thrm=int(res["vr"]),
                acc_hbm_thrm=int(res["hbm"]),
                acc_gfx_clk_below_host_limit=ppt + sock,
                per_prochot_thrm=0,
                per_ppt_pwr=100 if t.ppt else 0,
                per_socket_thrm=100 if t.socket_thermal else 0,
                per_vr_thrm=100 if t.vr_thermal else 0,
                per_hbm_thrm=100 if t.hbm_thermal else 0,
                per_gfx_clk_below_host_limit=100 if (t.ppt or t.socket_thermal) else 0,
                active_prochot_thrm=0,
                active_ppt_pwr=int(t.ppt),
                active_socket_thrm=int(t.socket_thermal),
                active_vr_thrm=int(t.vr_thermal),
                active_hbm_thrm=int(t.hbm_thermal),
                active_gfx_clk_below_host_limit=int(t.ppt or t.socket_thermal),
            )
            xcc = gpu.spec.num_xcc
            busy_pct = self._activity(gpu)[0]
            rows = {
                "acc_gfx_clk_below_host_limit_pwr": (ppt, 0xFFFFFFFFFFFFFFFF),
                "acc_gfx_clk_below_host_limit_thm": (sock, 0xFFFFFFFFFFFFFFFF),
                "acc_low_utilization": (
                    max(0, int(gpu.acc_counter) - int(gpu.busy_acc / 100)),
                    0xFFFFFFFFFFFFFFFF,
                ),
                "acc_gfx_clk_below_host_limit_total": (ppt + sock, 0xFFFFFFFFFFFFFFFF),
                "per_gfx_clk_below_host_limit_pwr": (100 if t.ppt else 0, 0xFFFFFFFFFFFFFFFF),
                "per_gfx_clk_below_host_limit_thm": (
                    100 if t.socket_thermal else 0,
                    0xFFFFFFFFFFFFFFFF,
                ),
                "per_low_utilization": (100 - busy_pct, 0xFFFFFFFFFFFFFFFF),
                "per_gfx_clk_below_host_limit_total": (
                    100 if (t.ppt or t.socket_thermal) else 0,
                    0xFFFFFFFFFFFFFFFF,
                ),
                "active_gfx_clk_below_host_limit_pwr": (int(t.ppt), 0xFF),
                "active_gfx_clk_below_host_limit_thm": (int(t.socket_thermal), 0xFF),
                "active_low_utilization": (int(busy_pct < 20), 0xFF),
                "active_gfx_clk_below_host_limit_total": (int(t.ppt or t.socket_thermal), 0xFF),
            }
            for name, (value, empty) in rows.items():
                grid = [[empty] * 8 for _ in range(8)]
                grid[0] = [value] * xcc + [empty] * (8 - xcc)
                setattr(rec, name, grid)
            return self._finish(gpu, func, rec)

    # ------------------------------------------------------------------ processes, reset
    def amdsmi_get_gpu_process_list(self, processor_handle: int) -> list[r.ProcInfo]:
        func = "amdsmi_get_gpu_process_list"
        with self._call(processor_handle, func) as gpu:
            out = []
            for proc in self.node.processes(gpu.index):
                vram = proc.vram[gpu.index]
                rec = r.ProcInfo(
                    name=proc.name,
                    pid=proc.pid,
                    mem=vram,
                    engine_usage=r.ProcEngineUsage(int(proc.gfx_ns.get(gpu.index, 0.0)), 0),
                    memory_usage=r.ProcMemoryUsage(2 * MIB, 12 * MIB, vram),
                    container_name="",
                    cu_occupancy=round(gpu.load * 100),
                )
                out.append(self._finish(gpu, func, rec))
            if len(out) > 1024:
                raise SmiStatusError(w.AMDSMI_STATUS_OUT_OF_RESOURCES)
            return out

    def amdsmi_get_gpu_compute_process_info(self) -> list[r.ProcessInfo]:
        """Every KFD process on the node (no handle: what a hive reset would kill)."""
        self._require_init()
        with self.node.lock:
            self.node.sync()
            return [self._process_info(p.pid) for p in self.node.processes()]

    def amdsmi_get_gpu_compute_process_info_by_pid(self, pid: int) -> r.ProcessInfo:
        self._require_init()
        with self.node.lock:
            self.node.sync()
            return self._process_info(pid)

    def _process_info(self, pid: int) -> r.ProcessInfo:
        for proc in self.node.processes():
            if proc.pid == pid:
                loads = [self.node.gpus[g].load for g in proc.vram]
                return r.ProcessInfo(
                    process_id=pid,
                    vram_usage=sum(proc.vram.values()) // MIB,
                    sdma_usage=0,
                    cu_occupancy=round(100 * sum(loads) / len(loads)) if loads else 0,
                )
        raise SmiStatusError(w.AMDSMI_STATUS_NOT_FOUND)

    def amdsmi_reset_gpu(self, processor_handle: int) -> None:
        """Reset the WHOLE hive of this GPU (root only), as amdgpu does on XGMI platforms."""
        with self._call(processor_handle, "amdsmi_reset_gpu") as gpu:
            if not self.node.root:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_PERM)
            index = gpu.index
        self.node.reset_hive(index)

    # ------------------------------------------------------------------ KFD events
    def amdsmi_init_gpu_event_notification(self, processor_handle: int) -> None:
        with self._call(processor_handle, "amdsmi_init_gpu_event_notification") as gpu:
            if gpu.index not in self._listeners:
                self._listeners[gpu.index] = _Registration(0, self.node.last_event_seq)

    def amdsmi_set_gpu_event_notification_mask(self, processor_handle: int, mask: int) -> None:
        gpu = self.gpu_for_handle(processor_handle)
        with self.node.lock:
            reg = self._listeners.get(gpu.index)
            if reg is None:
                raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
            reg.mask = mask

    def amdsmi_stop_gpu_event_notification(self, processor_handle: int) -> None:
        gpu = self.gpu_for_handle(processor_handle)
        with self.node.lock:
            self._listeners.pop(gpu.index, None)

    def amdsmi_get_gpu_event_notification(
        self, timeout_ms: int, max_events: int
    ) -> list[r.EventNotification]:
        """Events of every GPU with notification on; NO_DATA when none (never waits)."""
        self._require_init()
        with self.node.lock:
            self.node.sync()
            if not self._listeners:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_DATA)
            oldest = min(reg.cursor for reg in self._listeners.values())
            pending = [
                e
                for e in self.node.events_after(oldest)
                if e.gpu in self._listeners and e.seq > self._listeners[e.gpu].cursor
            ]
            pending.sort(key=lambda e: e.seq)
            chosen = []
            cutoff = math.inf
            for event in pending:
                reg = self._listeners[event.gpu]
                if reg.mask & (1 << (event.event - 1)):
                    chosen.append(event)
                    if len(chosen) == max_events:
                        cutoff = event.seq
                        break
            for event in pending:
                if event.seq <= cutoff:
                    reg = self._listeners[event.gpu]
                    reg.cursor = max(reg.cursor, event.seq)
            if not chosen:
                raise SmiStatusError(w.AMDSMI_STATUS_NO_DATA)
            return [
                r.EventNotification(self.node.gpus[e.gpu].ident.handle, e.event, e.message[:63])
                for e in chosen
            ]
