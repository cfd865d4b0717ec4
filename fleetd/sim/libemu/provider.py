"""SimProvider: answers the emulated libamd_smi.so's calls from a simulated node.

Each C call arrives as (symbol, raw uint64 arguments). The arguments are decoded with the
``argtypes`` of the REAL ``amdsmi.amdsmi_wrapper`` (so an out-pointer becomes a typed pointer
to the real package's own ctypes structure), the simulator's C-level layer
(``fleetd.sim.raw.RawLibrary``, the same one behind ``SimulatedAmdSmi``) computes the raw
record or the status code, and the record is copied field by field into that structure.
Unsupported fields therefore carry the same UINT-max sentinels a real library leaves there,
and the real wrapper converts them — or forgets to — exactly as it does on hardware.

A handler exists for every C function the simulator models; any other bound symbol answers
AMDSMI_STATUS_NOT_SUPPORTED. A Python error inside a handler is never allowed to look like
success: it is recorded in ``errors`` and the call returns AMDSMI_STATUS_INTERNAL_EXCEPTION.
"""

from __future__ import annotations

import ctypes
import dataclasses
import struct
import threading
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from operator import setitem
from types import ModuleType
from typing import Any

from fleetd.sim import wrapper as w
from fleetd.sim.raw import RawLibrary, SmiStatusError

Handler = Callable[..., int | None]


def _structure_out(lib: RawLibrary, symbol: str) -> Handler:
    """The layer's record for the leading arguments, copied into the structure the last one
    points at."""

    def handler(*args: Any) -> None:
        *inputs, out = args
        fill(_target(out), getattr(lib, symbol)(*inputs))

    return handler


def _value_out(lib: RawLibrary, symbol: str) -> Handler:
    """The layer's value for the leading arguments, written where the last one points."""

    def handler(*args: Any) -> None:
        *inputs, out = args
        _need(out)[0] = getattr(lib, symbol)(*inputs)

    return handler


def _no_out(lib: RawLibrary, symbol: str) -> Handler:
    """A call that changes the node and answers only its status."""

    def handler(*args: Any) -> None:
        getattr(lib, symbol)(*args)

    return handler


ONE_LINE_HANDLERS: dict[str, Callable[[RawLibrary, str], Handler]] = {
    "amdsmi_init": _no_out,
    "amdsmi_shut_down": _no_out,
    "amdsmi_get_processor_type": _value_out,
    "amdsmi_get_gpu_device_bdf": _structure_out,
    "amdsmi_get_gpu_enumeration_info": _structure_out,
    "amdsmi_get_gpu_asic_info": _structure_out,
    "amdsmi_get_gpu_board_info": _structure_out,
    "amdsmi_get_gpu_kfd_info": _structure_out,
    "amdsmi_get_gpu_driver_info": _structure_out,
    "amdsmi_get_gpu_vbios_info": _structure_out,
    "amdsmi_get_fw_info": _structure_out,
    "amdsmi_get_gpu_vram_info": _structure_out,
    "amdsmi_get_temp_metric": _value_out,
    "amdsmi_get_power_info": _structure_out,
    "amdsmi_get_power_cap_info": _structure_out,
    "amdsmi_get_gpu_activity": _structure_out,
    "amdsmi_get_gpu_vram_usage": _structure_out,
    "amdsmi_get_gpu_memory_total": _value_out,
    "amdsmi_get_gpu_memory_usage": _value_out,
    "amdsmi_get_clock_info": _structure_out,
    "amdsmi_get_gpu_total_ecc_count": _structure_out,
    "amdsmi_get_gpu_ecc_count": _structure_out,
    "amdsmi_get_gpu_ecc_enabled": _value_out,
    "amdsmi_get_gpu_ecc_status": _value_out,
    "amdsmi_get_gpu_ras_feature_info": _structure_out,
    "amdsmi_get_gpu_ras_block_features_enabled": _value_out,
    "amdsmi_get_gpu_bad_page_threshold": _value_out,
    "amdsmi_get_pcie_info": _structure_out,
    "amdsmi_get_gpu_pci_replay_counter": _value_out,
    "amdsmi_get_xgmi_info": _structure_out,
    "amdsmi_gpu_xgmi_error_status": _value_out,
    "amdsmi_reset_gpu_xgmi_error": _no_out,
    "amdsmi_get_gpu_xgmi_link_status": _structure_out,
    "amdsmi_get_link_metrics": _structure_out,
    "amdsmi_topo_get_link_weight": _value_out,
    "amdsmi_is_P2P_accessible": _value_out,
    "amdsmi_topo_get_numa_node_number": _value_out,
    "amdsmi_get_gpu_topo_numa_affinity": _value_out,
    "amdsmi_set_gpu_compute_partition": _no_out,
    "amdsmi_set_gpu_memory_partition": _no_out,
    "amdsmi_get_gpu_metrics_header_info": _structure_out,
    "amdsmi_get_gpu_metrics_info": _structure_out,
    "amdsmi_get_violation_status": _structure_out,
    "amdsmi_get_gpu_compute_process_info_by_pid": _structure_out,
    "amdsmi_reset_gpu": _no_out,
    "amdsmi_init_gpu_event_notification": _no_out,
    "amdsmi_set_gpu_event_notification_mask": _no_out,
    "amdsmi_stop_gpu_event_notification": _no_out,
}
"""The C calls whose whole handler is one line, and how their answer comes back (the
layer's method is looked up at each call, as a handler written out would)."""


class SimProvider:
    """The C library's behaviour over one ``RawLibrary`` (and so over one SimNode).

    ``wrapper`` is the real ``amdsmi.amdsmi_wrapper`` module: its ``argtypes`` decode the
    arguments and its structure classes are what gets filled.
    """

    def __init__(self, wrapper: ModuleType, lib: RawLibrary) -> None:
        self.wrapper = wrapper
        self.lib = lib
        self.errors: list[str] = []
        """Tracebacks of handler failures (each returned INTERNAL_EXCEPTION to the caller)."""
        self.unhandled: Counter[str] = Counter()
        """Calls to symbols the simulator does not model (answered NOT_SUPPORTED)."""
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._handlers: dict[str, Handler] = {
            name: getattr(self, name) for name in dir(type(self)) if name.startswith("amdsmi_")
        }
        self._handlers.update({name: make(lib, name) for name, make in ONE_LINE_HANDLERS.items()})
        self._argtypes: dict[str, Sequence[Any]] = {}
        self._build = ctypes.create_string_buffer(b"")  # the build string a version points at

    @property
    def provided(self) -> frozenset[str]:
        """The C symbols this provider answers."""
        return frozenset(self._handlers)

    # ------------------------------------------------------------------ dispatch
    def call(self, symbol: str, raw: Sequence[int]) -> int:
        """Run one C call; returns its amdsmi_status_t."""
        handler = self._handlers.get(symbol)
        with self._lock:
            self.calls[symbol] += 1
            if handler is None:
                self.unhandled[symbol] += 1
        if handler is None:
            return int(w.AMDSMI_STATUS_NOT_SUPPORTED)
        try:
            status = handler(*self._decode(symbol, raw))
        except SmiStatusError as err:
            return int(err.status)
        except Exception:
            with self._lock:
                self.errors.append(f"{symbol}: {traceback.format_exc()}")
            return int(w.AMDSMI_STATUS_INTERNAL_EXCEPTION)
        return int(w.AMDSMI_STATUS_SUCCESS if status is None else status)

    def _decode(self, symbol: str, raw: Sequence[int]) -> list[Any]:
        argtypes = self._argtypes.get(symbol)
        if argtypes is None:
            argtypes = tuple(getattr(self.wrapper, symbol).argtypes)
            self._argtypes[symbol] = argtypes
        if len(argtypes) != len(raw):  # the library was built from another wrapper
            raise ValueError(f"{len(raw)} arguments, the wrapper declares {len(argtypes)}")
        return [decode_argument(kind, value) for kind, value in zip(argtypes, raw, strict=True)]

    # ------------------------------------------------------------------ discovery, identity
    def amdsmi_get_lib_version(self, out: Any) -> None:
        major, minor, release, build = self.lib.amdsmi_get_lib_version()
        version = _target(out)
        version.major, version.minor, version.release = major, minor, release
        self._build = ctypes.create_string_buffer(build.encode())  # lives as long as we do
        version.build = ctypes.cast(self._build, type(version.build))

    def amdsmi_get_socket_handles(self, count: Any, handles: Any) -> None:
        _array_out(self.lib.amdsmi_get_socket_handles(), count, handles, setitem)

    def amdsmi_get_socket_info(self, socket: int, size: int, name: Any) -> None:
        _text_out(name, size, self.lib.amdsmi_get_socket_info(socket))

    def amdsmi_get_processor_handles(self, socket: int, count: Any, handles: Any) -> None:
        _array_out(self.lib.amdsmi_get_processor_handles(socket), count, handles, setitem)

    def amdsmi_get_processor_handle_from_bdf(self, bdf: Any, out: Any) -> None:
        b = bdf.struct_amdsmi_bdf_t
        found = self.lib.amdsmi_get_processor_handle_from_bdf(
            b.domain_number, b.bus_number, b.device_number, b.function_number
        )
        _need(out)[0] = found

    def amdsmi_get_gpu_device_uuid(self, handle: int, length: Any, out: Any) -> None:
        size = _need(length)[0]
        _text_out(out, size, self.lib.amdsmi_get_gpu_device_uuid(handle))

    # ------------------------------------------------------------------ power, ECC / RAS
    def amdsmi_get_energy_count(
        self, handle: int, accumulator: Any, resolution: Any, timestamp: Any
    ) -> None:
        for pointer in (accumulator, resolution, timestamp):
            _need(pointer)
        energy = self.lib.amdsmi_get_energy_count(handle)
        accumulator[0] = energy.energy_accumulator
        resolution[0] = energy.counter_resolution
        timestamp[0] = energy.timestamp

    def amdsmi_get_gpu_bad_page_info(self, handle: int, count: Any, out: Any) -> None:
        _array_out(self.lib.amdsmi_get_gpu_bad_page_info(handle), count, out, _fill_at)

    def amdsmi_get_gpu_memory_reserved_pages(self, handle: int, count: Any, out: Any) -> None:
        _array_out(self.lib.amdsmi_get_gpu_memory_reserved_pages(handle), count, out, _fill_at)

    def amdsmi_get_gpu_cper_entries(
        self,
        handle: int,
        severity_mask: int,
        buffer: Any,
        buffer_size: Any,
        headers: Any,
        entry_count: Any,
        cursor: Any,
    ) -> int:
        for pointer in (buffer, buffer_size, headers, entry_count, cursor):
            _need(pointer)
        records, next_cursor, status = self.lib.amdsmi_get_gpu_cper_entries(
            handle, severity_mask, buffer_size[0], cursor[0], max_entries=entry_count[0]
        )
        base = _address(buffer)
        header_type = type(headers)._type_  # POINTER(amdsmi_cper_hdr_t)
        offset = 0
        for i, record in enumerate(records):
            ctypes.memmove(base + offset, record.data, len(record.data))
            headers[i] = ctypes.cast(ctypes.c_void_p(base + offset), header_type)
            offset += len(record.data)
        entry_count[0] = len(records)
        buffer_size[0] = offset
        cursor[0] = next_cursor
        return status

    def amdsmi_get_afids_from_cper(
        self, buffer: Any, buf_size: int, afids: Any, num_afids: Any
    ) -> None:
        for pointer in (buffer, afids, num_afids):
            _need(pointer)
        data = ctypes.string_at(_address(buffer), buf_size)
        found = self.lib.amdsmi_get_afids_from_cper(data, capacity=num_afids[0])
        for i, afid in enumerate(found):
            afids[i] = afid
        num_afids[0] = len(found)

    # ------------------------------------------------------------------ XGMI, topology
    def amdsmi_get_link_topology_nearest(self, handle: int, link_type: int, out: Any) -> None:
        target = _target(out)
        found = self.lib.amdsmi_get_link_topology_nearest(handle, link_type)
        slots = len(target.processor_list)
        target.count = min(len(found), slots)
        for i, peer in enumerate(found[:slots]):
            target.processor_list[i] = peer

    def amdsmi_topo_get_link_type(self, src: int, dst: int, hops: Any, kind: Any) -> None:
        _need(hops)
        _need(kind)
        hops[0], kind[0] = self.lib.amdsmi_topo_get_link_type(src, dst)

    def amdsmi_get_minmax_bandwidth_between_processors(
        self, src: int, dst: int, low: Any, high: Any
    ) -> None:
        _need(low)
        _need(high)
        low[0], high[0] = self.lib.amdsmi_get_minmax_bandwidth_between_processors(src, dst)

    def amdsmi_get_gpu_compute_partition(self, handle: int, out: Any, length: int) -> None:
        _text_out(out, length, self.lib.amdsmi_get_gpu_compute_partition(handle))

    def amdsmi_get_gpu_memory_partition(self, handle: int, out: Any, length: int) -> None:
        _text_out(out, length, self.lib.amdsmi_get_gpu_memory_partition(handle))

    # ------------------------------------------------------------------ processes
    def amdsmi_get_gpu_process_list(self, handle: int, count: Any, out: Any) -> int | None:
        room = _need(count)[0]
        procs = self.lib.amdsmi_get_gpu_process_list(handle)
        if not out:
            count[0] = len(procs)
            return None
        for i, proc in enumerate(procs[:room]):
            fill(out[i], proc)
        count[0] = min(room, len(procs))
        return int(w.AMDSMI_STATUS_OUT_OF_RESOURCES) if len(procs) > room else None

    def amdsmi_get_gpu_compute_process_info(self, out: Any, count: Any) -> None:
        _array_out(self.lib.amdsmi_get_gpu_compute_process_info(), count, out, _fill_at)

    # ------------------------------------------------------------------ KFD events
    def amdsmi_get_gpu_event_notification(self, timeout_ms: int, count: Any, out: Any) -> None:
        room = _need(count)[0]
        _need(out)
        events = self.lib.amdsmi_get_gpu_event_notification(timeout_ms, room)
        for i, event in enumerate(events[:room]):
            fill(out[i], event)
        count[0] = min(room, len(events))


# ---------------------------------------------------------------------------------- decoding
def decode_argument(kind: Any, raw: int) -> Any:
    """One raw uint64 argument as the C function received it, typed by its ctypes argtype."""
    if kind in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p):
        return raw  # an address: never dereferenced here
    if isinstance(kind, type) and issubclass(kind, ctypes._Pointer):
        return ctypes.cast(ctypes.c_void_p(raw), kind) if raw else kind()
    if isinstance(kind, type) and issubclass(kind, ctypes.Structure | ctypes.Union):
        if not raw:
            raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
        return kind.from_buffer_copy((ctypes.c_char * ctypes.sizeof(kind)).from_address(raw))
    if kind is ctypes.c_float:
        return struct.unpack("<f", struct.pack("<I", raw & 0xFFFFFFFF))[0]
    if kind is ctypes.c_double:
        return struct.unpack("<d", struct.pack("<Q", raw))[0]
    if kind is ctypes.c_bool:
        return bool(raw & 0xFF)
    return kind(raw).value  # integers: truncated and sign-extended to the C type


def _need(pointer: Any) -> Any:
    """A non-null out-pointer (the C library answers INVAL for a null one)."""
    if not pointer:
        raise SmiStatusError(w.AMDSMI_STATUS_INVAL)
    return pointer


def _target(pointer: Any) -> Any:
    return _need(pointer).contents


def _address(pointer: Any) -> int:
    value = ctypes.cast(pointer, ctypes.c_void_p).value
    return int(value or 0)


def _text_out(pointer: Any, size: int, text: str) -> None:
    """Copy ``text`` into a char buffer of ``size`` bytes, NUL-terminated (strncpy-like)."""
    _need(pointer)
    if size <= 0:
        raise SmiStatusError(w.AMDSMI_STATUS_INSUFFICIENT_SIZE)
    data = text.encode()[: size - 1] + b"\0"
    ctypes.memmove(_address(pointer), data, len(data))


def _array_out(
    items: Sequence[Any], count: Any, array: Any, put: Callable[[Any, int, Any], None]
) -> None:
    """The C pattern: a NULL array asks for the count; otherwise fill at most ``*count``
    (``put(array, i, item)`` writes one: a handle as it is, a record field by field)."""
    _need(count)
    if not array:
        count[0] = len(items)
        return
    written = min(count[0], len(items))
    for i in range(written):
        put(array, i, items[i])
    count[0] = written


def _fill_at(array: Any, i: int, record: Any) -> None:
    fill(array[i], record)


# ---------------------------------------------------------------------------------- filling
def fill(target: Any, record: Any) -> None:
    """Copy a raw record (fleetd.sim.records) into a real ctypes structure, field by field.

    Field names must match exactly (a mismatch raises: the simulator and the real layout
    disagree). A record copied into a union goes into the union member that has all of the
    record's fields (e.g. a Bdf into ``amdsmi_bdf_t.struct_amdsmi_bdf_t``).
    """
    names = [f.name for f in dataclasses.fields(record)]
    if isinstance(target, ctypes.Union):
        target = _union_member(target, names, type(record).__name__)
    declared = _field_types(type(target))
    for name in names:
        if name not in declared:
            raise AttributeError(
                f"{type(target).__name__} has no field {name!r} (from {type(record).__name__})"
            )
        _assign(target, name, declared[name], getattr(record, name))


def _union_member(union: Any, names: list[str], record_name: str) -> Any:
    for member, kind in _field_types(type(union)).items():
        if (
            isinstance(kind, type)
            and issubclass(kind, ctypes.Structure | ctypes.Union)
            and set(names) <= set(_field_types(kind))
        ):
            return getattr(union, member)
    raise AttributeError(f"no member of {type(union).__name__} fits a {record_name}")


def _field_types(kind: type) -> dict[str, Any]:
    return {field[0]: field[1] for field in getattr(kind, "_fields_", ())}


def _assign(target: Any, name: str, kind: Any, value: Any) -> None:
    if dataclasses.is_dataclass(value):
        fill(getattr(target, name), value)
    elif isinstance(value, str | bytes):
        data = value.encode() if isinstance(value, str) else value
        size = ctypes.sizeof(kind)
        offset = getattr(type(target), name).offset
        blob = data[: size - 1] + b"\0" if isinstance(value, str) else data[:size]
        ctypes.memmove(ctypes.addressof(target) + offset, blob, len(blob))
    elif isinstance(value, list):
        _assign_array(getattr(target, name), value)
    else:
        setattr(target, name, value)


def _assign_array(array: Any, values: list[Any]) -> None:
    if len(values) > len(array):
        raise ValueError(f"{len(values)} values for an array of {len(array)}")
    for i, value in enumerate(values):
        if dataclasses.is_dataclass(value):
            fill(array[i], value)
        elif isinstance(value, list):
            _assign_array(array[i], value)
        else:
            array[i] = value
