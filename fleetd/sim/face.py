"""SimulatedAmdSmi: an object that stands in for the ``amdsmi`` module (7.0.2).

Same function names and parameter names, the same enum classes and exception classes, handles
that are real ``ctypes.c_void_p`` (unhashable, equal only by identity, a fresh object per
enumeration), enum arguments type-checked like the real package (a plain int raises
AmdSmiParameterException), and result dicts with exactly the keys and the "N/A"/raw-sentinel
conventions of the real ``amdsmi_interface`` — which calls convert a UINT max to "N/A", which
leak 4294967295 / 18446744073709551615, bitmasks collapsed to bool, ids as hex strings.

Deliberate deviations (documented, never in result shapes):
- ``amdsmi_get_violation_status`` does not sleep 100 ms; ``per_*`` is 100 while a throttler
  is active and 0 otherwise (the real call derives it from two samples 100 ms apart).
- ``AmdSmiEventReader.read`` never waits for its timeout: with nothing queued it raises the
  NO_DATA AmdSmiLibraryException at once.
Only the GPU calls a health daemon needs are offered (amdsmi.md §1a and §19).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any, TypeVar

from fleetd.sim import enums, wrapper
from fleetd.sim import exceptions as exc
from fleetd.sim import records as r
from fleetd.sim.enums import (
    AmdSmiClkType,
    AmdSmiEvtNotificationType,
    AmdSmiGpuBlock,
    AmdSmiInitFlags,
    AmdSmiMemoryType,
    AmdSmiProcessorType,
    AmdSmiRasErrState,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    AmdSmiXgmiStatus,
    MaxUIntegerTypes,
)
from fleetd.sim.model import SimNode
from fleetd.sim.raw import RawLibrary, SmiStatusError
from fleetd.sim.surface import AmdSmiModuleSurface

T = TypeVar("T")
U8, U16, U32, U64 = (
    MaxUIntegerTypes.UINT8_T,
    MaxUIntegerTypes.UINT16_T,
    MaxUIntegerTypes.UINT32_T,
    MaxUIntegerTypes.UINT64_T,
)
_BDF_LONG = re.compile(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$")
_BDF_SHORT = re.compile(r"^([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$")
_SLOT_TYPES = {0: "PCIE", 1: "OAM", 2: "CEM", 3: "UNKNOWN"}
_CPER_SEVERITIES = {
    wrapper.AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED: "AMDSMI_CPER_SEV_NON_FATAL_UNCORRECTED",
    wrapper.AMDSMI_CPER_SEV_FATAL: "AMDSMI_CPER_SEV_FATAL",
    wrapper.AMDSMI_CPER_SEV_NON_FATAL_CORRECTED: "AMDSMI_CPER_SEV_NON_FATAL_CORRECTED",
    wrapper.AMDSMI_CPER_SEV_NUM: "AMDSMI_CPER_SEV_NUM",
    wrapper.AMDSMI_CPER_SEV_UNUSED: "AMDSMI_CPER_SEV_UNUSED",
}
_LINK_LETTERS = {
    wrapper.AMDSMI_XGMI_LINK_DOWN: "D",
    wrapper.AMDSMI_XGMI_LINK_UP: "U",
    wrapper.AMDSMI_XGMI_LINK_DISABLE: "X",
}


# ---------------------------------------------------------------------------------- conversions
def na(value: Any, limit: int, *, activity: bool = False, as_bool: bool = False) -> Any:
    """The real wrapper's max-uint check: the type max (or >100 for activities) → "N/A".

    Works element-wise on lists; ``as_bool`` collapses a value (a bitmask) to True/False,
    and — as in the real package — a whole list to ``bool(list)``.
    """
    if not isinstance(value, list):
        if value == limit or (activity and value > 100):
            return "N/A"
        return bool(value) if as_bool else value
    out = _na_list(value, int(limit), activity)
    return bool(out) if as_bool else out


def _na_list(values: list[Any], limit: int, activity: bool) -> list[Any]:
    """``na`` of every element. The common shapes (no sentinel, or all sentinels: the empty
    partitions of gpu_metrics) are counted in C instead of compared one by one."""
    empty = values.count(limit)
    if empty == len(values):
        return ["N/A"] * empty
    if empty == 0 and not (activity and max(values) > 100):
        return list(values)
    if activity:
        return ["N/A" if (v == limit or v > 100) else v for v in values]
    return ["N/A" if v == limit else v for v in values]


def pad_hex(value: str, length: int) -> str:
    """``"0x2"`` → ``"0x02"`` for hex text; anything else unchanged."""
    if (
        len(value) > 2
        and length > 1
        and value[:2].lower() == "0x"
        and all(c in "0123456789abcdefABCDEF" for c in value[2:])
    ):
        return "0x" + value[2:].zfill(length)
    return value


def format_bdf(bdf: r.Bdf) -> str:
    return (
        f"{bdf.domain_number:x}".zfill(4)
        + ":"
        + f"{bdf.bus_number:x}".zfill(2)
        + ":"
        + f"{bdf.device_number:x}".zfill(2)
        + "."
        + f"{bdf.function_number:x}"
    )


def _pages(pages: list[r.RetiredPage]) -> list[dict[str, Any]]:
    return [
        {
            "value": i,
            "page_address": p.page_address,
            "page_size": p.page_size,
            "status": p.status,
        }
        for i, p in enumerate(pages)
    ]


def _notify_name(guid: bytes) -> str:
    """The notify GUID's first 8 bytes (little-endian) named by AmdSmiCperNotifyType."""
    value = int.from_bytes(guid[:8], "little")
    known = {m.value: m.name for m in enums.AmdSmiCperNotifyType}
    return known.get(value, "Unknown")


def _signed(data: bytes) -> list[int]:
    """Bytes as ctypes.c_byte values (-128..127), as the real wrapper lists them."""
    return [b - 256 if b > 127 else b for b in data]


def _grid(rows: list[list[int]], limit: int, **kw: bool) -> list[list[Any]]:
    if kw.get("as_bool"):
        return [[na(v, limit, **kw) for v in row] for row in rows]
    top, activity = int(limit), kw.get("activity", False)
    return [_na_list(row, top, activity) for row in rows]


def _compute_process(p: r.ProcessInfo) -> dict[str, int]:
    """One ``amdsmi_process_info_t`` as both compute-process calls return it."""
    return {
        "process_id": p.process_id,
        "vram_usage": p.vram_usage,
        "sdma_usage": p.sdma_usage,
        "cu_occupancy": p.cu_occupancy,
    }


def _xcp(stats: list[r.XcpMetrics], name: str, limit: int, activity: bool = False) -> list[Any]:
    top = int(limit)
    return [_na_list(getattr(x, name), top, activity) for x in stats]


# ---------------------------------------------------------------------------------- event reader
class _EventReaderBase:
    """AmdSmiEventReader behaviour; SimulatedAmdSmi binds a subclass to its library."""

    _lib: RawLibrary

    def __init__(self, processor_handle: Any, event_types: Any) -> None:
        if not isinstance(processor_handle, wrapper.amdsmi_processor_handle):
            raise exc.AmdSmiParameterException(processor_handle, wrapper.amdsmi_processor_handle)
        if not isinstance(event_types, Iterable):
            raise exc.AmdSmiParameterException(event_types, Iterable)
        for event_type in event_types:
            if not isinstance(event_type, AmdSmiEvtNotificationType):
                raise exc.AmdSmiParameterException(event_type, AmdSmiEvtNotificationType)
        self.processor_handle = processor_handle
        mask = 0
        for event_type in event_types:
            if event_type != AmdSmiEvtNotificationType.NONE:
                mask |= 1 << (int(event_type) - 1)
        _invoke(self._lib.amdsmi_init_gpu_event_notification, processor_handle.value)
        _invoke(self._lib.amdsmi_set_gpu_event_notification_mask, processor_handle.value, mask)

    def read(self, timestamp: int, num_elem: int = 10) -> list[dict[str, Any]]:
        timeout = ctypes.c_int(timestamp).value  # same TypeError as the real call for non-ints
        events = _invoke(self._lib.amdsmi_get_gpu_event_notification, timeout, num_elem)
        known = {member.value for member in AmdSmiEvtNotificationType}
        out = []
        for event in events:
            if event.event in known:
                kind = AmdSmiEvtNotificationType(event.event)
                if kind.name != "NONE":
                    out.append(
                        {
                            "processor_handle": wrapper.amdsmi_processor_handle(
                                event.processor_handle
                            ),
                            "event": kind.name,
                            "message": event.message,
                        }
                    )
        return out

    def stop(self) -> None:
        _invoke(self._lib.amdsmi_stop_gpu_event_notification, self.processor_handle.value)

    def __enter__(self) -> _EventReaderBase:
        return self

    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        self.stop()


def _invoke(call: Callable[..., T], *args: Any) -> T:
    """Run a C-level call and raise what the real wrapper raises for its status."""
    try:
        return call(*args)
    except SmiStatusError as err:
        exc.check_status(err.status)
        raise  # pragma: no cover - check_status always raises for a non-zero status


_FW_HEX = frozenset({30, 73, 74, 19, 20, 18})  # PSP_SOSDRV, TA_RAS, TA_XGMI, UVD, VCE, VCN
_FW_DEC = frozenset({77, 79})  # PM (SMC), PLDM_BUNDLE


def fw_version_text(block: int, version: int) -> str:
    """A firmware version as amdsmi 7.0.2's ``amdsmi_get_fw_info`` formats it: dotted hex
    bytes (zero-padded to 8 digits) for the PSP/TA/multimedia blocks, dotted decimal bytes
    for PM and the PLDM bundle, else the integer; upper-cased."""
    if block in _FW_HEX:
        digits = hex(version)[2:].zfill(8)
        text = ".".join(re.findall("..?", digits))
    elif block in _FW_DEC:
        digits = hex(version)[2:].zfill(8)
        text = ".".join(str(int(digits[i : i + 2], 16)).zfill(2) for i in range(0, len(digits), 2))
    else:
        text = str(version)
    return text.upper()


def _handle(value: Any) -> int:
    if not isinstance(value, wrapper.amdsmi_processor_handle):
        raise exc.AmdSmiParameterException(value, wrapper.amdsmi_processor_handle)
    return int(value.value or 0)


def _enum(value: Any, kind: type[IntEnum]) -> int:
    if not isinstance(value, kind):
        raise exc.AmdSmiParameterException(value, kind)
    return int(value)


# ---------------------------------------------------------------------------------- interface
class _Interface:
    """``amdsmi.amdsmi_interface`` of the stand-in: every face function, plus the CPER AFID
    decoder that 7.0.2 offers only here."""

    def __init__(self, face: SimulatedAmdSmi) -> None:
        self._face = face

    def __getattr__(self, name: str) -> Any:
        return getattr(self._face, name)

    def amdsmi_get_afids_from_cper(self, cper_afid_data: Any) -> tuple[list[int], int]:
        """As the real 7.0.2 function: bytes, or a list of {"bytes", "size"} records.

        Like the real one it calls ``bytes()`` on each record's list, so the signed c_byte
        lists ``amdsmi_get_gpu_cper_entries`` returns raise ValueError there (a trap of the
        real package, kept: convert with ``& 0xFF`` first), and a ``size`` smaller than the
        data raises ValueError from ``ctypes.create_string_buffer``.
        """
        if isinstance(cper_afid_data, bytes | bytearray):
            records: Any = [{"bytes": list(cper_afid_data), "size": len(cper_afid_data)}]
        else:
            records = cper_afid_data
        found: list[int] = []
        for record in records:
            if not (isinstance(record, dict) and "bytes" in record and "size" in record):
                raise exc.AmdSmiParameterException(
                    record, "dict with keys 'bytes' and 'size' or bytes/bytearray"
                )
            data = bytes(record["bytes"])
            size = record["size"]
            buf = ctypes.create_string_buffer(data, size)  # the real call's own checks
            raw = bytes(buf.raw[:size])
            try:
                afids = self._face.lib.amdsmi_get_afids_from_cper(raw)
            except SmiStatusError as err:  # this call never maps RETRY/TIMEOUT to subclasses
                raise exc.AmdSmiLibraryException(err.status) from None
            found.extend(afids)
        return found, len(found)


# ---------------------------------------------------------------------------------- the face
class SimulatedAmdSmi(AmdSmiModuleSurface):
    """Stands in for the ``amdsmi`` module, reading a SimNode.

    Pass an instance wherever the real module would go (``AmdSmiBackend(SimulatedAmdSmi(node))``).
    Several faces may share one node (each has its own init count and event registrations).
    """

    __version__ = "7.0.2"

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.lib = RawLibrary(node)
        self.AmdSmiEventReader: type[_EventReaderBase] = type(
            "AmdSmiEventReader", (_EventReaderBase,), {"_lib": self.lib}
        )

    @property
    def amdsmi_interface(self) -> _Interface:
        """``amdsmi.amdsmi_interface.X``: the same functions, plus the few the real package
        keeps only there (``amdsmi_get_afids_from_cper``: not exported at top level in 7.0.2)."""
        return _Interface(self)

    # ------------------------------------------------------------------ lifecycle, discovery
    def amdsmi_init(self, flag: Any = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        _invoke(self.lib.amdsmi_init, _enum(flag, AmdSmiInitFlags))

    def amdsmi_shut_down(self) -> None:
        _invoke(self.lib.amdsmi_shut_down)

    def amdsmi_get_lib_version(self) -> dict[str, Any]:
        major, minor, release, build = _invoke(self.lib.amdsmi_get_lib_version)
        # the real 7.0.2 wrapper decodes ``build.contents``: one char of the build string
        return {"major": major, "minor": minor, "release": release, "build": build[:1]}

    def amdsmi_get_socket_handles(self) -> list[ctypes.c_void_p]:
        return [
            wrapper.amdsmi_socket_handle(h) for h in _invoke(self.lib.amdsmi_get_socket_handles)
        ]

    def amdsmi_get_socket_info(self, socket_handle: Any) -> str:
        if not isinstance(socket_handle, wrapper.amdsmi_socket_handle):
            raise exc.AmdSmiParameterException(socket_handle, wrapper.amdsmi_socket_handle)
        return _invoke(self.lib.amdsmi_get_socket_info, int(socket_handle.value or 0))

    def amdsmi_get_processor_handles(self) -> list[ctypes.c_void_p]:
        devices: list[ctypes.c_void_p] = []
        for socket in self.amdsmi_get_socket_handles():
            found = _invoke(self.lib.amdsmi_get_processor_handles, int(socket.value or 0))
            devices.extend(wrapper.amdsmi_processor_handle(h) for h in found)
        return devices

    def amdsmi_get_processor_handle_from_bdf(self, bdf: Any) -> ctypes.c_void_p:
        parsed = _parse_bdf(bdf)
        if parsed is None:
            raise exc.AmdSmiBdfFormatException(parsed)  # the real package reports None too
        value = _invoke(self.lib.amdsmi_get_processor_handle_from_bdf, *parsed)
        return wrapper.amdsmi_processor_handle(value)

    def amdsmi_get_processor_type(self, processor_handle: Any) -> dict[str, str]:
        value = _invoke(self.lib.amdsmi_get_processor_type, _handle(processor_handle))
        return {"processor_type": AmdSmiProcessorType(value).name}

    # ------------------------------------------------------------------ identity
    def amdsmi_get_gpu_device_bdf(self, processor_handle: Any) -> str:
        return format_bdf(_invoke(self.lib.amdsmi_get_gpu_device_bdf, _handle(processor_handle)))

    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str:
        uuid = _invoke(self.lib.amdsmi_get_gpu_device_uuid, _handle(processor_handle))
        return uuid[: 38 - 1]

    def amdsmi_get_gpu_enumeration_info(self, processor_handle: Any) -> dict[str, Any]:
        e = _invoke(self.lib.amdsmi_get_gpu_enumeration_info, _handle(processor_handle))
        return {
            "drm_render": na(e.drm_render, U32),
            "drm_card": na(e.drm_card, U32),
            "hsa_id": na(e.hsa_id, U32),
            "hip_id": na(e.hip_id, U32),
            "hip_uuid": e.hip_uuid,
        }

    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]:
        a = _invoke(self.lib.amdsmi_get_gpu_asic_info, _handle(processor_handle))
        subsystem_id = na(a.subsystem_id, U32)
        subvendor_id = na(a.subvendor_id, U32)
        if not isinstance(subsystem_id, str):
            subsystem_id = pad_hex(hex(subsystem_id), 4)
        if not isinstance(subvendor_id, str):
            subvendor_id = pad_hex(hex(subvendor_id), 4)
        info: dict[str, Any] = {
            "market_name": pad_hex(a.market_name, 4) or "N/A",
            "vendor_id": hex(a.vendor_id) if a.vendor_id else "N/A",
            "vendor_name": (a.vendor_name or "N/A").replace(",", ""),
            "subvendor_id": subvendor_id,
            "device_id": hex(a.device_id) if a.device_id else "N/A",
            "rev_id": pad_hex(hex(a.rev_id), 2),
            "asic_serial": (f"0x{int(a.asic_serial, 16):016X}" if a.asic_serial else "N/A"),
            "oam_id": na(a.oam_id, U32),
            "num_compute_units": na(a.num_of_compute_units, U32),
            "target_graphics_version": "gfx" + hex(a.target_graphics_version)[2:],
            "subsystem_id": subsystem_id,
        }
        return info

    def amdsmi_get_gpu_board_info(self, processor_handle: Any) -> dict[str, Any]:
        b = _invoke(self.lib.amdsmi_get_gpu_board_info, _handle(processor_handle))
        info = {
            "model_number": pad_hex(b.model_number.strip(), 4),
            "product_serial": b.product_serial.strip(),
            "fru_id": b.fru_id.strip(),
            "product_name": pad_hex(b.product_name.strip(), 4),
            "manufacturer_name": b.manufacturer_name.strip(),
        }
        return {k: (v if v != "" else "N/A") for k, v in info.items()}

    def amdsmi_get_gpu_kfd_info(self, processor_handle: Any) -> dict[str, Any]:
        k = _invoke(self.lib.amdsmi_get_gpu_kfd_info, _handle(processor_handle))
        return {
            "kfd_id": na(k.kfd_id, U64),
            "node_id": na(k.node_id, U32),
            "current_partition_id": na(k.current_partition_id, U32),
        }

    def amdsmi_get_gpu_driver_info(self, processor_handle: Any) -> dict[str, Any]:
        d = _invoke(self.lib.amdsmi_get_gpu_driver_info, _handle(processor_handle))
        info = {
            "driver_name": d.driver_name,
            "driver_version": d.driver_version,
            "driver_date": d.driver_date,
        }
        return {k: (v if v != "" else "N/A") for k, v in info.items()}

    def amdsmi_get_gpu_vbios_info(self, processor_handle: Any) -> dict[str, Any]:
        v = _invoke(self.lib.amdsmi_get_gpu_vbios_info, _handle(processor_handle))
        return {
            "name": v.name,
            "build_date": v.build_date,
            "part_number": v.part_number,
            "version": v.version,
        }

    def amdsmi_get_fw_info(self, processor_handle: Any) -> dict[str, Any]:
        f = _invoke(self.lib.amdsmi_get_fw_info, _handle(processor_handle))
        fw_list = []
        for entry in f.fw_info_list[: f.num_fw_info]:
            name = enums.AmdSmiFwBlock(entry.fw_id)  # ValueError on an unknown id, as real
            fw_list.append({"fw_name": name, "fw_version": fw_version_text(name, entry.fw_version)})
        return {"fw_list": fw_list}

    def amdsmi_get_gpu_vram_info(self, processor_handle: Any) -> dict[str, Any]:
        v = _invoke(self.lib.amdsmi_get_gpu_vram_info, _handle(processor_handle))
        return {
            "vram_type": v.vram_type,
            "vram_vendor": v.vram_vendor,
            "vram_size": v.vram_size,
            "vram_bit_width": na(v.vram_bit_width, U32),
            "vram_max_bandwidth": na(v.vram_max_bandwidth, U64),
        }

    # ------------------------------------------------------------------ temperature, power
    def amdsmi_get_temp_metric(self, processor_handle: Any, sensor_type: Any, metric: Any) -> int:
        handle = _handle(processor_handle)
        sensor = _enum(sensor_type, AmdSmiTemperatureType)
        which = _enum(metric, AmdSmiTemperatureMetric)
        return _invoke(self.lib.amdsmi_get_temp_metric, handle, sensor, which)

    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]:
        p = _invoke(self.lib.amdsmi_get_power_info, _handle(processor_handle))
        info: dict[str, Any] = {
            "socket_power": p.socket_power,
            "current_socket_power": p.current_socket_power,
            "average_socket_power": p.average_socket_power,
            "gfx_voltage": p.gfx_voltage,
            "soc_voltage": p.soc_voltage,
            "mem_voltage": p.mem_voltage,
            "power_limit": p.power_limit,
        }
        return {k: ("N/A" if v == 0xFFFF else v) for k, v in info.items()}

    def amdsmi_get_power_cap_info(self, processor_handle: Any) -> dict[str, Any]:
        c = _invoke(self.lib.amdsmi_get_power_cap_info, _handle(processor_handle), 0)
        return {
            "power_cap": c.power_cap,
            "default_power_cap": c.default_power_cap,
            "dpm_cap": c.dpm_cap,
            "min_power_cap": c.min_power_cap,
            "max_power_cap": c.max_power_cap,
        }

    def amdsmi_get_energy_count(self, processor_handle: Any) -> dict[str, Any]:
        e = _invoke(self.lib.amdsmi_get_energy_count, _handle(processor_handle))
        return {
            "energy_accumulator": e.energy_accumulator,
            "counter_resolution": ctypes.c_float(e.counter_resolution).value,
            "timestamp": e.timestamp,
        }

    # ------------------------------------------------------------------ activity, memory, clocks
    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]:
        a = _invoke(self.lib.amdsmi_get_gpu_activity, _handle(processor_handle))
        info: dict[str, Any] = {
            "gfx_activity": a.gfx_activity,
            "umc_activity": a.umc_activity,
            "mm_activity": a.mm_activity,
        }
        return {k: ("N/A" if v == 0xFFFF else v) for k, v in info.items()}

    def amdsmi_get_gpu_vram_usage(self, processor_handle: Any) -> dict[str, Any]:
        v = _invoke(self.lib.amdsmi_get_gpu_vram_usage, _handle(processor_handle))
        return {"vram_total": v.vram_total, "vram_used": v.vram_used}

    def amdsmi_get_gpu_memory_total(self, processor_handle: Any, mem_type: Any) -> int:
        handle = _handle(processor_handle)
        kind = _enum(mem_type, AmdSmiMemoryType)
        return _invoke(self.lib.amdsmi_get_gpu_memory_total, handle, kind)

    def amdsmi_get_gpu_memory_usage(self, processor_handle: Any, mem_type: Any) -> int:
        handle = _handle(processor_handle)
        kind = _enum(mem_type, AmdSmiMemoryType)
        return _invoke(self.lib.amdsmi_get_gpu_memory_usage, handle, kind)

    def amdsmi_get_clock_info(self, processor_handle: Any, clock_type: Any) -> dict[str, Any]:
        handle = _handle(processor_handle)
        clk = _enum(clock_type, AmdSmiClkType)
        c = _invoke(self.lib.amdsmi_get_clock_info, handle, clk)
        return {
            "clk": na(c.clk, U32),
            "min_clk": na(c.min_clk, U32),
            "max_clk": na(c.max_clk, U32),
            "clk_locked": na(c.clk_locked, U8, as_bool=True),
            "clk_deep_sleep": na(c.clk_deep_sleep, U8),
        }

    # ------------------------------------------------------------------ ECC / RAS
    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: Any) -> dict[str, Any]:
        e = _invoke(self.lib.amdsmi_get_gpu_total_ecc_count, _handle(processor_handle))
        return {
            "correctable_count": e.correctable_count,
            "uncorrectable_count": e.uncorrectable_count,
            "deferred_count": e.deferred_count,
        }

    def amdsmi_get_gpu_ecc_count(self, processor_handle: Any, block: Any) -> dict[str, Any]:
        handle = _handle(processor_handle)
        which = _enum(block, AmdSmiGpuBlock)
        e = _invoke(self.lib.amdsmi_get_gpu_ecc_count, handle, which)
        return {
            "correctable_count": e.correctable_count,
            "uncorrectable_count": e.uncorrectable_count,
            "deferred_count": e.deferred_count,
        }

    def amdsmi_get_gpu_ecc_enabled(self, processor_handle: Any) -> int:
        return _invoke(self.lib.amdsmi_get_gpu_ecc_enabled, _handle(processor_handle))

    def amdsmi_get_gpu_ecc_status(
        self, processor_handle: Any, block: Any
    ) -> enums.AmdSmiRasErrState:
        handle = _handle(processor_handle)
        which = _enum(block, AmdSmiGpuBlock)
        return AmdSmiRasErrState(_invoke(self.lib.amdsmi_get_gpu_ecc_status, handle, which))

    def amdsmi_get_gpu_ras_feature_info(self, processor_handle: Any) -> dict[str, Any]:
        f = _invoke(self.lib.amdsmi_get_gpu_ras_feature_info, _handle(processor_handle))
        flags = f.ecc_correction_schema_flag
        return {
            "eeprom_version": hex(f.ras_eeprom_version),
            "parity_schema": bool(flags & 1),
            "single_bit_schema": bool(flags & 2),
            "double_bit_schema": bool(flags & 4),
            "poison_schema": bool(flags & 8),
        }

    def amdsmi_get_gpu_ras_block_features_enabled(
        self, processor_handle: Any
    ) -> list[dict[str, Any]]:
        handle = _handle(processor_handle)
        states = []
        for block in AmdSmiGpuBlock:
            if block.name in ("RESERVED", "INVALID"):
                continue
            state = _invoke(self.lib.amdsmi_get_gpu_ras_block_features_enabled, handle, block.value)
            states.append({"block": block.name, "status": AmdSmiRasErrState(state).name})
        return states

    def amdsmi_get_gpu_bad_page_info(self, processor_handle: Any) -> list[dict[str, Any]]:
        return _pages(_invoke(self.lib.amdsmi_get_gpu_bad_page_info, _handle(processor_handle)))

    def amdsmi_get_gpu_bad_page_threshold(self, processor_handle: Any) -> int:
        return _invoke(self.lib.amdsmi_get_gpu_bad_page_threshold, _handle(processor_handle))

    def amdsmi_get_gpu_memory_reserved_pages(self, processor_handle: Any) -> list[dict[str, Any]]:
        handle = _handle(processor_handle)
        pages = _invoke(self.lib.amdsmi_get_gpu_memory_reserved_pages, handle)
        if pages:
            # amdsmi 7.0.2 sizes its record array with the c_uint32 count itself (not its
            # .value), so as soon as one page is reserved the real call raises this TypeError
            # (found by running the real package over the emulated library, fleetd.sim.libemu)
            raise TypeError("can't multiply sequence by non-int of type 'c_uint'")
        return _pages(pages)

    def amdsmi_get_gpu_cper_entries(
        self,
        processor_handle: Any,
        severity_mask: Any,
        buffer_size: Any = 4 * 1048576,
        cursor: Any = 0,
    ) -> tuple[dict[int, dict[str, Any]], int, list[dict[str, Any]], int]:
        handle = _handle(processor_handle)
        mask = ctypes.c_uint32(severity_mask).value
        try:
            records, next_cursor, status = self.lib.amdsmi_get_gpu_cper_entries(
                handle, mask, int(buffer_size), ctypes.c_uint64(cursor).value
            )
        except SmiStatusError as err:  # this call never maps RETRY/TIMEOUT to subclasses
            raise exc.AmdSmiLibraryException(err.status) from None
        entries: dict[int, dict[str, Any]] = {}
        cper_data: list[dict[str, Any]] = []
        for i, record in enumerate(records):
            h, t = record.header, record.header.timestamp
            cper_data.append(
                {"bytes": _signed(record.data[: h.record_length]), "size": h.record_length}
            )
            year = t.year + 2000 if t.year < 100 else t.year
            severity = _CPER_SEVERITIES.get(h.error_severity, "AMDSMI_CPER_SEV_UNUSED")
            entries[i] = {
                "error_severity": severity.replace("AMDSMI_CPER_SEV_", "").lower(),
                "notify_type": _notify_name(h.notify_type),
                "timestamp": (
                    f"{year:04d}/{t.month:02d}/{t.day:02d} "
                    f"{t.hours:02d}:{t.minutes:02d}:{t.seconds:02d}"
                ),
                "signature": h.signature,
                "revision": h.revision,
                "signature_end": hex(h.signature_end),
                "sec_cnt": h.sec_cnt,
                "record_length": h.record_length,
                "platform_id": h.platform_id,
                "creator_id": h.creator_id,
                "record_id": h.record_id,
                "flags": h.flags,
                "persistence_info": h.persistence_info,
            }
        return entries, next_cursor, cper_data, status

    # ------------------------------------------------------------------ PCIe
    def amdsmi_get_pcie_info(self, processor_handle: Any) -> dict[str, Any]:
        p = _invoke(self.lib.amdsmi_get_pcie_info, _handle(processor_handle))
        s, m = p.pcie_static, p.pcie_metric
        slot = s.slot_type
        return {
            "pcie_static": {
                "max_pcie_width": na(s.max_pcie_width, U16),
                "max_pcie_speed": na(s.max_pcie_speed, U32),
                "pcie_interface_version": na(s.pcie_interface_version, U32),
                "slot_type": _SLOT_TYPES.get(slot, "Unknown"),
            },
            "pcie_metric": {
                "pcie_width": na(m.pcie_width, U16),
                "pcie_speed": na(m.pcie_speed, U32),
                "pcie_bandwidth": na(m.pcie_bandwidth, U32),
                "pcie_replay_count": na(m.pcie_replay_count, U64),
                "pcie_l0_to_recovery_count": na(m.pcie_l0_to_recovery_count, U64),
                "pcie_replay_roll_over_count": na(m.pcie_replay_roll_over_count, U64),
                "pcie_nak_sent_count": na(m.pcie_nak_sent_count, U64),
                "pcie_nak_received_count": na(m.pcie_nak_received_count, U64),
                "pcie_lc_perf_other_end_recovery_count": na(
                    m.pcie_lc_perf_other_end_recovery_count, U32
                ),
            },
        }

    def amdsmi_get_gpu_pci_replay_counter(self, processor_handle: Any) -> int:
        return _invoke(self.lib.amdsmi_get_gpu_pci_replay_counter, _handle(processor_handle))

    # ------------------------------------------------------------------ XGMI, topology
    def amdsmi_get_xgmi_info(self, processor_handle: Any) -> dict[str, Any]:
        x = _invoke(self.lib.amdsmi_get_xgmi_info, _handle(processor_handle))
        return {
            "xgmi_lanes": x.xgmi_lanes,
            "xgmi_hive_id": x.xgmi_hive_id,
            "xgmi_node_id": x.xgmi_node_id,
            "index": x.index,
        }

    def amdsmi_gpu_xgmi_error_status(self, processor_handle: Any) -> int:
        status = _invoke(self.lib.amdsmi_gpu_xgmi_error_status, _handle(processor_handle))
        return AmdSmiXgmiStatus(status).value

    def amdsmi_reset_gpu_xgmi_error(self, processor_handle: Any) -> None:
        _invoke(self.lib.amdsmi_reset_gpu_xgmi_error, _handle(processor_handle))

    def amdsmi_get_gpu_xgmi_link_status(self, processor_handle: Any) -> dict[str, Any]:
        s = _invoke(self.lib.amdsmi_get_gpu_xgmi_link_status, _handle(processor_handle))
        letters = [_LINK_LETTERS[link] for link in s.status[: s.total_links]]
        return {"status": letters, "total_links": s.total_links}

    def amdsmi_get_link_metrics(self, processor_handle: Any) -> dict[str, Any]:
        m = _invoke(self.lib.amdsmi_get_link_metrics, _handle(processor_handle))
        links = [
            {
                "bdf": format_bdf(link.bdf),
                "bit_rate": link.bit_rate,
                "max_bandwidth": link.max_bandwidth,
                "link_type": link.link_type,
                "read": link.read,
                "write": link.write,
            }
            for link in m.links[:8]
        ]
        return {"num_links": m.num_links, "links": links}

    def amdsmi_get_link_topology_nearest(
        self, processor_handle: Any, link_type: Any
    ) -> dict[str, Any]:
        # like the real call: no type checks; the C layer takes the raw pointer and enum value
        raw = (
            processor_handle.value
            if isinstance(processor_handle, ctypes.c_void_p)
            else processor_handle
        )
        found = _invoke(self.lib.amdsmi_get_link_topology_nearest, int(raw or 0), int(link_type))
        return {"processor_list": list(found)}

    def amdsmi_topo_get_link_type(
        self, processor_handle_src: Any, processor_handle_dst: Any
    ) -> dict[str, int]:
        src, dst = _handle(processor_handle_src), _handle(processor_handle_dst)
        hops, kind = _invoke(self.lib.amdsmi_topo_get_link_type, src, dst)
        return {"hops": hops, "type": kind}

    def amdsmi_topo_get_link_weight(
        self, processor_handle_src: Any, processor_handle_dst: Any
    ) -> int:
        src, dst = _handle(processor_handle_src), _handle(processor_handle_dst)
        return _invoke(self.lib.amdsmi_topo_get_link_weight, src, dst)

    def amdsmi_get_minmax_bandwidth_between_processors(
        self, processor_handle_src: Any, processor_handle_dst: Any
    ) -> dict[str, int]:
        src, dst = _handle(processor_handle_src), _handle(processor_handle_dst)
        low, high = _invoke(self.lib.amdsmi_get_minmax_bandwidth_between_processors, src, dst)
        return {"min_bandwidth": low, "max_bandwidth": high}

    def amdsmi_is_P2P_accessible(
        self, processor_handle_src: Any, processor_handle_dst: Any
    ) -> bool:
        src, dst = _handle(processor_handle_src), _handle(processor_handle_dst)
        return _invoke(self.lib.amdsmi_is_P2P_accessible, src, dst)

    def amdsmi_topo_get_numa_node_number(self, processor_handle: Any) -> int:
        return _invoke(self.lib.amdsmi_topo_get_numa_node_number, _handle(processor_handle))

    def amdsmi_get_gpu_topo_numa_affinity(self, processor_handle: Any) -> int:
        return _invoke(self.lib.amdsmi_get_gpu_topo_numa_affinity, _handle(processor_handle))

    def amdsmi_get_gpu_compute_partition(self, processor_handle: Any) -> str:
        return _invoke(self.lib.amdsmi_get_gpu_compute_partition, _handle(processor_handle))

    def amdsmi_get_gpu_memory_partition(self, processor_handle: Any) -> str:
        return _invoke(self.lib.amdsmi_get_gpu_memory_partition, _handle(processor_handle))

    def amdsmi_set_gpu_compute_partition(
        self, processor_handle: Any, compute_partition: Any
    ) -> None:
        handle = _handle(processor_handle)
        mode = _enum(compute_partition, enums.AmdSmiComputePartitionType)
        _invoke(self.lib.amdsmi_set_gpu_compute_partition, handle, mode)

    def amdsmi_set_gpu_memory_partition(self, processor_handle: Any, memory_partition: Any) -> None:
        handle = _handle(processor_handle)
        mode = _enum(memory_partition, enums.AmdSmiMemoryPartitionType)
        _invoke(self.lib.amdsmi_set_gpu_memory_partition, handle, mode)

    # ------------------------------------------------------------------ gpu_metrics, violations
    def amdsmi_get_gpu_metrics_header_info(self, processor_handle: Any) -> dict[str, int]:
        h = _invoke(self.lib.amdsmi_get_gpu_metrics_header_info, _handle(processor_handle))
        return {
            "structure_size": h.structure_size,
            "format_revision": h.format_revision,
            "content_revision": h.content_revision,
        }

    def amdsmi_get_gpu_metrics_info(self, processor_handle: Any) -> dict[str, Any]:
        g = _invoke(self.lib.amdsmi_get_gpu_metrics_info, _handle(processor_handle))
        h, x = g.common_header, g.xcp_stats
        return {
            "common_header.structure_size": na(h.structure_size, U16),
            "common_header.format_revision": na(h.format_revision, U8),
            "common_header.content_revision": na(h.content_revision, U8),
            "temperature_edge": na(g.temperature_edge, U16),
            "temperature_hotspot": na(g.temperature_hotspot, U16),
            "temperature_mem": na(g.temperature_mem, U16),
            "temperature_vrgfx": na(g.temperature_vrgfx, U16),
            "temperature_vrsoc": na(g.temperature_vrsoc, U16),
            "temperature_vrmem": na(g.temperature_vrmem, U16),
            "average_gfx_activity": na(g.average_gfx_activity, U16, activity=True),
            "average_umc_activity": na(g.average_umc_activity, U16, activity=True),
            "average_mm_activity": na(g.average_mm_activity, U16, activity=True),
            "average_socket_power": na(g.average_socket_power, U16),
            "energy_accumulator": na(g.energy_accumulator, U64),
            "system_clock_counter": na(g.system_clock_counter, U64),
            "average_gfxclk_frequency": na(g.average_gfxclk_frequency, U16),
            "average_socclk_frequency": na(g.average_socclk_frequency, U16),
            "average_uclk_frequency": na(g.average_uclk_frequency, U16),
            "average_vclk0_frequency": na(g.average_vclk0_frequency, U16),
            "average_dclk0_frequency": na(g.average_dclk0_frequency, U16),
            "average_vclk1_frequency": na(g.average_vclk1_frequency, U16),
            "average_dclk1_frequency": na(g.average_dclk1_frequency, U16),
            "current_gfxclk": na(g.current_gfxclk, U16),
            "current_socclk": na(g.current_socclk, U16),
            "current_uclk": na(g.current_uclk, U16),
            "current_vclk0": na(g.current_vclk0, U16),
            "current_dclk0": na(g.current_dclk0, U16),
            "current_vclk1": na(g.current_vclk1, U16),
            "current_dclk1": na(g.current_dclk1, U16),
            "throttle_status": na(g.throttle_status, U32, as_bool=True),
            "current_fan_speed": na(g.current_fan_speed, U16),
            "pcie_link_width": na(g.pcie_link_width, U16),
            "pcie_link_speed": na(g.pcie_link_speed, U16),
            "gfx_activity_acc": na(g.gfx_activity_acc, U32),
            "mem_activity_acc": na(g.mem_activity_acc, U32),
            "temperature_hbm": na(list(g.temperature_hbm), U16),
            "firmware_timestamp": na(g.firmware_timestamp, U64),
            "voltage_soc": na(g.voltage_soc, U16),
            "voltage_gfx": na(g.voltage_gfx, U16),
            "voltage_mem": na(g.voltage_mem, U16),
            "indep_throttle_status": na(g.indep_throttle_status, U64, as_bool=True),
            "current_socket_power": na(g.current_socket_power, U16),
            "vcn_activity": na(list(g.vcn_activity), U16, activity=True),
            "gfxclk_lock_status": na(g.gfxclk_lock_status, U32),
            "xgmi_link_width": na(g.xgmi_link_width, U16),
            "xgmi_link_speed": na(g.xgmi_link_speed, U16),
            "pcie_bandwidth_acc": na(g.pcie_bandwidth_acc, U64),
            "pcie_bandwidth_inst": na(g.pcie_bandwidth_inst, U64),
            "pcie_l0_to_recov_count_acc": na(g.pcie_l0_to_recov_count_acc, U64),
            "pcie_replay_count_acc": na(g.pcie_replay_count_acc, U64),
            "pcie_replay_rover_count_acc": na(g.pcie_replay_rover_count_acc, U64),
            "xgmi_read_data_acc": na(list(g.xgmi_read_data_acc), U64),
            "xgmi_write_data_acc": na(list(g.xgmi_write_data_acc), U64),
            "current_gfxclks": na(list(g.current_gfxclks), U16),
            "current_socclks": na(list(g.current_socclks), U16),
            "current_vclk0s": na(list(g.current_vclk0s), U16),
            "current_dclk0s": na(list(g.current_dclk0s), U16),
            "jpeg_activity": na(list(g.jpeg_activity), U16, activity=True),
            "pcie_nak_sent_count_acc": na(g.pcie_nak_sent_count_acc, U32),
            "pcie_nak_rcvd_count_acc": na(g.pcie_nak_rcvd_count_acc, U32),
            "accumulation_counter": na(g.accumulation_counter, U64),
            "prochot_residency_acc": na(g.prochot_residency_acc, U64),
            "ppt_residency_acc": na(g.ppt_residency_acc, U64),
            "socket_thm_residency_acc": na(g.socket_thm_residency_acc, U64),
            "vr_thm_residency_acc": na(g.vr_thm_residency_acc, U64),
            "hbm_thm_residency_acc": na(g.hbm_thm_residency_acc, U64),
            "num_partition": na(g.num_partition, U16),
            "xcp_stats.gfx_busy_inst": _xcp(x, "gfx_busy_inst", U32, activity=True),
            "xcp_stats.jpeg_busy": _xcp(x, "jpeg_busy", U16, activity=True),
            "xcp_stats.vcn_busy": _xcp(x, "vcn_busy", U16, activity=True),
            "xcp_stats.gfx_busy_acc": _xcp(x, "gfx_busy_acc", U64),
            "xcp_stats.gfx_below_host_limit_acc": _xcp(x, "gfx_below_host_limit_acc", U64),
            "xcp_stats.gfx_below_host_limit_ppt_acc": _xcp(x, "gfx_below_host_limit_ppt_acc", U64),
            "xcp_stats.gfx_below_host_limit_thm_acc": _xcp(x, "gfx_below_host_limit_thm_acc", U64),
            "xcp_stats.gfx_low_utilization_acc": _xcp(x, "gfx_low_utilization_acc", U64),
            "xcp_stats.gfx_below_host_limit_total_acc": _xcp(
                x, "gfx_below_host_limit_total_acc", U64
            ),
            "pcie_lc_perf_other_end_recovery": na(g.pcie_lc_perf_other_end_recovery, U32),
            "vram_max_bandwidth": na(g.vram_max_bandwidth, U64),
            "xgmi_link_status": na(list(g.xgmi_link_status), U16),
        }

    def amdsmi_get_violation_status(self, processor_handle: Any) -> dict[str, Any]:
        v = _invoke(self.lib.amdsmi_get_violation_status, _handle(processor_handle))
        return {
            "reference_timestamp": na(v.reference_timestamp, U64),
            "violation_timestamp": na(v.violation_timestamp, U64),
            "acc_counter": na(v.acc_counter, U64),
            "acc_prochot_thrm": na(v.acc_prochot_thrm, U64),
            "acc_ppt_pwr": na(v.acc_ppt_pwr, U64),
            "acc_socket_thrm": na(v.acc_socket_thrm, U64),
            "acc_vr_thrm": na(v.acc_vr_thrm, U64),
            "acc_hbm_thrm": na(v.acc_hbm_thrm, U64),
            "acc_gfx_clk_below_host_limit": na(v.acc_gfx_clk_below_host_limit, U64),
            "acc_gfx_clk_below_host_limit_pwr": _grid(v.acc_gfx_clk_below_host_limit_pwr, U64),
            "acc_gfx_clk_below_host_limit_thm": _grid(v.acc_gfx_clk_below_host_limit_thm, U64),
            "acc_gfx_clk_below_host_limit_total": _grid(v.acc_gfx_clk_below_host_limit_total, U64),
            "acc_low_utilization": _grid(v.acc_low_utilization, U64),
            "per_prochot_thrm": na(v.per_prochot_thrm, U64, activity=True),
            "per_ppt_pwr": na(v.per_ppt_pwr, U64, activity=True),
            "per_socket_thrm": na(v.per_socket_thrm, U64, activity=True),
            "per_vr_thrm": na(v.per_vr_thrm, U64, activity=True),
            "per_hbm_thrm": na(v.per_hbm_thrm, U64, activity=True),
            "per_gfx_clk_below_host_limit": na(v.per_gfx_clk_below_host_limit, U64, activity=True),
            "per_gfx_clk_below_host_limit_pwr": _grid(
                v.per_gfx_clk_below_host_limit_pwr, U64, activity=True
            ),
            "per_gfx_clk_below_host_limit_thm": _grid(
                v.per_gfx_clk_below_host_limit_thm, U64, activity=True
            ),
            "per_gfx_clk_below_host_limit_total": _grid(
                v.per_gfx_clk_below_host_limit_total, U64, activity=True
            ),
            "per_low_utilization": _grid(v.per_low_utilization, U64, activity=True),
            "active_prochot_thrm": na(v.active_prochot_thrm, U8, as_bool=True),
            "active_ppt_pwr": na(v.active_ppt_pwr, U8, as_bool=True),
            "active_socket_thrm": na(v.active_socket_thrm, U8, as_bool=True),
            "active_vr_thrm": na(v.active_vr_thrm, U8, as_bool=True),
            "active_hbm_thrm": na(v.active_hbm_thrm, U8, as_bool=True),
            "active_gfx_clk_below_host_limit": na(
                v.active_gfx_clk_below_host_limit, U8, as_bool=True
            ),
            "active_gfx_clk_below_host_limit_pwr": _grid(
                v.active_gfx_clk_below_host_limit_pwr, U8, as_bool=True
            ),
            "active_gfx_clk_below_host_limit_thm": _grid(
                v.active_gfx_clk_below_host_limit_thm, U8, as_bool=True
            ),
            "active_gfx_clk_below_host_limit_total": _grid(
                v.active_gfx_clk_below_host_limit_total, U8, as_bool=True
            ),
            "active_low_utilization": _grid(v.active_low_utilization, U8, as_bool=True),
        }

    # ------------------------------------------------------------------ processes, reset
    def amdsmi_get_gpu_process_list(self, processor_handle: Any) -> list[dict[str, Any]]:
        procs = _invoke(self.lib.amdsmi_get_gpu_process_list, _handle(processor_handle))
        return [
            {
                "name": p.name.strip() or "N/A",
                "pid": p.pid,
                "mem": p.mem,
                "engine_usage": {"gfx": p.engine_usage.gfx, "enc": p.engine_usage.enc},
                "memory_usage": {
                    "gtt_mem": p.memory_usage.gtt_mem,
                    "cpu_mem": p.memory_usage.cpu_mem,
                    "vram_mem": p.memory_usage.vram_mem,
                },
                "cu_occupancy": na(p.cu_occupancy, U32),
            }
            for p in procs
        ]

    def amdsmi_get_gpu_compute_process_info(self) -> list[dict[str, int]]:
        return [_compute_process(p) for p in _invoke(self.lib.amdsmi_get_gpu_compute_process_info)]

    def amdsmi_get_gpu_compute_process_info_by_pid(self, pid: Any) -> dict[str, int]:
        if not isinstance(pid, int):
            raise exc.AmdSmiParameterException(pid, int)
        return _compute_process(_invoke(self.lib.amdsmi_get_gpu_compute_process_info_by_pid, pid))

    def amdsmi_reset_gpu(self, processor_handle: Any) -> None:
        _invoke(self.lib.amdsmi_reset_gpu, _handle(processor_handle))


def _parse_bdf(bdf: Any) -> list[int] | None:
    if bdf is None:
        return None
    match = _BDF_LONG.match(bdf)
    if match:
        return [int(x, 16) for x in match.groups()]
    match = _BDF_SHORT.match(bdf)
    if match:
        return [0] + [int(x, 16) for x in match.groups()]
    return None
