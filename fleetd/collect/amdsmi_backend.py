"""The only module that touches amdsmi: loading it, enumerating GPUs, raw per-GPU calls.

The amdsmi module is a constructor argument, so the same code runs on the real library
(``load_amdsmi()``) and on the simulator (``fleetd.sim``). Processor handles are
``ctypes.c_void_p``: unhashable and not equal by value, so GPUs are keyed by PCI BDF.
Slow calls (amdsmi_get_violation_status sleeps 100 ms, amdsmi_get_gpu_pci_throughput
blocks ~1 s) are deliberately not offered: throttling comes from gpu_metrics residency
counters instead.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from fleetd.collect import parse
from fleetd.collect.abi import AbiCheck, check_pair
from fleetd.collect.callmeter import MeteredAmdSmi
from fleetd.collect.source import (
    REASON_ERROR,
    REASON_GPU_MISSING,
    UNSUPPORTED_ON_SKU,
    GpuProcess,
    ReadError,
)
from fleetd.errors import BackendError
from fleetd.logs import get_logger
from fleetd.model import GpuIdentity
from fleetd.statefile import StateFile

__all__ = [
    "AmdSmiBackend",
    "AmdSmiGpu",
    "GpuProcess",
    "load_amdsmi",
    "rocm_python_dir",
    "status_reason",
]

T = TypeVar("T")


log = get_logger("collect.backend")


FIX_HINT = (
    "install ROCm's amd-smi-lib 7.0.x, set ROCM_PATH to the ROCm directory (e.g. /opt/rocm), "
    "and install the matching Python package with `pip install fleetd[amd]` (amdsmi==7.0.2)"
)

# amdsmi status codes (amdsmi_wrapper.AMDSMI_STATUS_*) → short reasons for missing readings.
_STATUS_REASONS: dict[int, str] = {
    1: "invalid_argument",
    2: "not_supported",
    3: "not_implemented",
    4: "fail_load_module",
    5: "fail_load_symbol",
    6: "drm_error",
    7: "api_failed",
    8: "library_timeout",
    9: "retry",
    10: "no_perm",
    11: "interrupted",
    12: "io_error",
    13: "address_fault",
    14: "file_error",
    15: "out_of_resources",
    16: "internal_exception",
    17: "out_of_bounds",
    18: "init_error",
    19: "refcount_overflow",
    20: "directory_not_found",
    30: "busy",
    31: "not_found",
    32: "not_init",
    33: "no_slot",
    34: "driver_not_loaded",
    40: "no_data",
    41: "insufficient_size",
    42: "unexpected_size",
    43: "unexpected_data",
    52: "file_not_found",
    54: "amdgpu_restart_error",
    55: "setting_unavailable",
    56: "corrupted_eeprom",
}
NOT_SUPPORTED = "not_supported"
DEVICE_NOT_FOUND = "not_found"
SUSPECT_GONE: frozenset[str] = frozenset(
    {"drm_error", "file_error", "io_error", "unexpected_size", "status_4294967295"}
)
"""Answers real amdsmi gives on the old handle of a GPU that fell off the bus (a DRM ioctl on
a removed device, a sysfs read failing EBADF/EIO, rocm_smi's UNKNOWN_ERROR). Its sysfs reads
answer NOT_SUPPORTED (ENOENT), which is no evidence by itself; NOT_FOUND never comes
(hardware-behaviour.md §1.3 #2). One of these makes the backend check the GPU's PCI device
at once and ask for a rediscovery."""
PCI_DEVICES = "sys/bus/pci/devices"


def status_reason(code: object) -> str:
    """A short reason for an amdsmi status code (2 → not_supported, 10 → no_perm, 30 → busy)."""
    if isinstance(code, int) and not isinstance(code, bool):
        return _STATUS_REASONS.get(abs(code), f"status_{abs(code)}")
    return REASON_ERROR


DEFAULT_ROCM_PATH = Path("/opt/rocm")


def rocm_python_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the node's ROCm keeps its own amdsmi Python package (``<rocm>/share/amd_smi``,
    ROCm up to 7.13; 7.14 installs it into the system site-packages instead). ``<rocm>`` is
    found as amdsmi's wrapper finds the library: $ROCM_HOME, else $ROCM_PATH, else /opt/rocm,
    so the package and the library come from the same ROCm."""
    root = environ.get("ROCM_HOME") or environ.get("ROCM_PATH") or str(DEFAULT_ROCM_PATH)
    return Path(root) / "share" / "amd_smi"


def load_amdsmi(module_name: str = "amdsmi") -> ModuleType:
    """Import amdsmi, turning its many failure modes into one clear BackendError line.

    An amdsmi installed in fleetd's environment is used first; without one, the package of
    the node's ROCm (``rocm_python_dir``) is appended to ``sys.path`` (the Debian package
    ships no amdsmi: the Python package must match the node's libamd_smi.so,
    docs/amdsmi-versions.md).

    ``import amdsmi`` prints two lines and raises KeyError when libamd_smi.so is missing,
    AttributeError when the library lacks a 7.0.2 symbol, OSError when the loader fails,
    ImportError when the Python package is absent. The printed lines are captured and the
    loader's own message is folded into the single line we raise.
    """
    rocm_dir = rocm_python_dir()
    if importlib.util.find_spec(module_name) is None and (rocm_dir / module_name).is_dir():
        sys.path.append(str(rocm_dir))
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name not in (None, module_name) and not (exc.name or "").startswith(module_name):
            raise BackendError(
                f"cannot load amdsmi: Python module {exc.name!r} is missing; {FIX_HINT}"
            ) from None
        raise BackendError(
            f"cannot load amdsmi: the Python package is not installed (nor in {rocm_dir}); "
            f"{FIX_HINT}"
        ) from None
    except (KeyError, OSError) as exc:
        loader = _first_line(captured.getvalue()) or str(exc)
        raise BackendError(
            f"cannot load amdsmi: libamd_smi.so was not found ({loader}); {FIX_HINT}"
        ) from None
    except AttributeError as exc:
        raise BackendError(
            f"cannot load amdsmi: the installed libamd_smi.so does not match amdsmi 7.0.2 "
            f"({_first_line(str(exc))}); {FIX_HINT}"
        ) from None
    except ImportError as exc:
        raise BackendError(
            f"cannot load amdsmi: {_first_line(str(exc)) or type(exc).__name__}; {FIX_HINT}"
        ) from None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# _fresh: a remembered ReadError is raised again with its traceback cleared. Raising an
# exception object again appends the new frames to the traceback it carries, so one raised
# every poll kept every poll's frames — and through them each poll's job and readings — alive
# (the daemon's RSS grew ~0.2 MB per tick; docs/performance.md, footprint).


class _NotSupported:
    """A remembered NOT_SUPPORTED answer in the static cache."""

    __slots__ = ("error",)

    def __init__(self, error: ReadError) -> None:
        self.error = error


class AmdSmiGpu:
    """One GPU: its identity, its current handle (None while it is off the bus), raw calls.

    The object lives as long as the backend, keyed by BDF; rediscovery swaps the handle and
    clears the caches, so pollers may keep references across resets.
    """

    def __init__(self, backend: AmdSmiBackend, identity: GpuIdentity, handle: Any) -> None:
        self._backend = backend
        self._amdsmi = backend.amdsmi
        self._identity = identity
        self._handle: Any = handle
        self._static: dict[str, Any] = {}
        self._poll: dict[str, tuple[float, Any, ReadError | None]] = {}
        self._memo: dict[str, Any] = {}
        self._unsupported: dict[str, ReadError] = {}
        self._lock = threading.Lock()
        self.pci_tracked = False
        """Its PCI device was in sysfs at discovery, so its absence there means it left."""
        self.hive_unknown = False
        """amdsmi_get_xgmi_info failed at the last discovery: which hive this GPU is in (and
        so what a reset of it touches) is not known."""

    # --- identity and state -----------------------------------------------------------
    @property
    def identity(self) -> GpuIdentity:
        return self._identity

    @property
    def present(self) -> bool:
        return self._handle is not None

    @property
    def handle(self) -> Any:
        return self._handle

    def _rebind(self, identity: GpuIdentity, handle: Any) -> None:
        with self._lock:
            same_board = (identity.model, identity.serial) == (
                self._identity.model,
                self._identity.serial,
            )
            self._identity = identity
            self._handle = handle
            self._static = {}
            self._poll = {}
            self._memo = {}
            if not same_board:  # unsupported on this SKU stays so across re-enumerations
                self._unsupported = {}

    def _vanish(self) -> None:
        with self._lock:
            self._handle = None
            self._poll = {}

    # --- caches -----------------------------------------------------------------------
    def static(self, key: str, read: Callable[[], T]) -> T:
        if self._handle is None:  # a GPU that is gone reports nothing, not even cached values
            raise ReadError(REASON_GPU_MISSING, self._identity.bdf)
        cached = self._static.get(key, _MISSING)
        if cached is not _MISSING:
            if isinstance(cached, _NotSupported):
                raise cached.error.with_traceback(None)  # see _fresh
            return cached  # type: ignore[no-any-return]
        try:
            value = read()
        except ReadError as exc:
            if exc.reason == NOT_SUPPORTED:
                self._static[key] = _NotSupported(exc)
            raise
        self._static[key] = value
        return value

    def feature(self, key: str, read: Callable[[], T]) -> T:
        known = self._unsupported.get(key)
        if known is not None:  # even while the GPU is gone: it was never a series
            raise known.with_traceback(None)  # see _fresh
        if self._handle is None:
            raise ReadError(REASON_GPU_MISSING, self._identity.bdf)
        try:
            return read()
        except ReadError as exc:
            if exc.reason in UNSUPPORTED_ON_SKU:
                self._unsupported[key] = exc
                log.info(
                    "gpu_call_unsupported",
                    gpu=self._identity.index,
                    bdf=self._identity.bdf,
                    call=key,
                    reason=exc.reason,
                    model=self._identity.model,
                )
            raise

    def unsupported(self) -> dict[str, str]:
        """Calls this GPU's library answered as unsupported on this SKU: key → reason."""
        return {key: exc.reason for key, exc in self._unsupported.items()}

    def per_poll(self, key: str, now: float, read: Callable[[], T]) -> T:
        entry = self._poll.get(key)
        if entry is not None and entry[0] == now:
            if entry[2] is not None:
                raise entry[2].with_traceback(None)  # see _fresh
            return entry[1]  # type: ignore[no-any-return]
        try:
            value = read()
        except ReadError as exc:
            self._poll[key] = (now, None, exc)
            raise
        self._poll[key] = (now, value, None)
        return value

    def memo(self) -> dict[str, Any]:
        return self._memo

    def port_baseline(self, kind: str, seen_up: Iterable[int]) -> frozenset[int]:
        return self._backend._port_baseline(self._identity, kind, seen_up)

    def ras_blocks(self) -> Mapping[str, int]:
        return self._backend.ras_blocks

    # --- raw calls ----------------------------------------------------------------------
    def _call(self, name: str, *args: Any) -> Any:
        handle = self._handle
        if handle is None:
            raise ReadError(REASON_GPU_MISSING, self._identity.bdf)
        try:
            return self._backend.call(name, handle, *args)
        except ReadError as exc:
            if exc.reason == DEVICE_NOT_FOUND:
                # the handle no longer names a device: the GPU fell off the bus
                self._lost(handle, "not_found")
            elif exc.reason in SUSPECT_GONE:
                self._backend._suspect(self, exc.reason)
            raise

    def _lost(self, handle: Any, why: str) -> None:
        with self._lock:
            if self._handle is not handle:
                return
            self._handle = None
            self._poll = {}
        log.warning("gpu_lost", gpu=self._identity.index, bdf=self._identity.bdf, why=why)

    def temp_metric(self, sensor: str, metric: str) -> object:
        return self._call(
            "amdsmi_get_temp_metric",
            self._backend.enum("AmdSmiTemperatureType", sensor),
            self._backend.enum("AmdSmiTemperatureMetric", metric),
        )

    def power_info(self) -> dict[str, object]:
        return _as_dict(self._call("amdsmi_get_power_info"))

    def power_cap_info(self) -> dict[str, object]:
        return _as_dict(self._call("amdsmi_get_power_cap_info"))

    def energy_count(self) -> dict[str, object]:
        return _as_dict(self._call("amdsmi_get_energy_count"))

    def total_ecc_count(self) -> dict[str, object]:
        return _as_dict(self._call("amdsmi_get_gpu_total_ecc_count"))

    def ecc_count(self, block: str) -> dict[str, object]:
        return _as_dict(
            self._call("amdsmi_get_gpu_ecc_count", self._backend.enum("AmdSmiGpuBlock", block))
        )

    def ecc_enabled(self) -> object:
        return self._call("amdsmi_get_gpu_ecc_enabled")

    def bad_page_info(self) -> object:
        return self._call("amdsmi_get_gpu_bad_page_info")

    def bad_page_threshold(self) -> object:
        return self._call("amdsmi_get_gpu_bad_page_threshold")

    def pcie_info(self) -> dict[str, Any]:
        return _as_dict(self._call("amdsmi_get_pcie_info"))

    def xgmi_error_status(self) -> object:
        return self._call("amdsmi_gpu_xgmi_error_status")

    def xgmi_link_status(self) -> dict[str, Any]:
        return _as_dict(self._call("amdsmi_get_gpu_xgmi_link_status"))

    def link_metrics(self) -> dict[str, Any]:
        return _as_dict(self._call("amdsmi_get_link_metrics"))

    def gpu_metrics(self) -> dict[str, Any]:
        return _as_dict(self._call("amdsmi_get_gpu_metrics_info"))

    def activity(self) -> dict[str, object]:
        return _as_dict(self._call("amdsmi_get_gpu_activity"))

    def vram_used_sysfs(self) -> int | None:
        """VRAM in use from amdgpu's ``mem_info_vram_used`` (bytes), or None where it cannot
        be read. The same number amdsmi reports, without amdsmi's fallback that opens
        /dev/kfd in this process and leaves fleetd a KFD client for life on ROCm < 7.12
        (ROCm/ROCm#4411). Only partition 0 of a partitioned GPU is a PCI device with the
        file (the others are ``amdgpu_xcp`` platform devices): they are not looked for."""
        if not self._identity.primary:
            return None
        text = self._backend.device_file(self._identity.bdf, "mem_info_vram_used")
        if text is None or not text.isdigit():
            return None
        value = int(text)
        return value if value > 0 else None  # 0: what makes rocm_smi fall back; say nothing

    def memory_usage(self, mem_type: str) -> object:
        return self._call(
            "amdsmi_get_gpu_memory_usage", self._backend.enum("AmdSmiMemoryType", mem_type)
        )

    def memory_total(self, mem_type: str) -> object:
        return self._call(
            "amdsmi_get_gpu_memory_total", self._backend.enum("AmdSmiMemoryType", mem_type)
        )

    def clock_info(self, clock_type: str) -> dict[str, object]:
        return _as_dict(
            self._call("amdsmi_get_clock_info", self._backend.enum("AmdSmiClkType", clock_type))
        )

    def process_list(self) -> list[dict[str, Any]]:
        result = self._call("amdsmi_get_gpu_process_list")
        if not isinstance(result, list):
            raise ReadError(parse.REASON_WRONG_TYPE, type(result).__name__)
        return result


_MISSING: Any = object()
_UNKNOWN_SERIALS = frozenset({"", "N/A", "0", "0X0", "FFFFFFFFFFFFFFFF", "0XFFFFFFFFFFFFFFFF"})


def _known_serial(identity: GpuIdentity) -> str | None:
    serial = (identity.serial or "").strip()
    return None if serial.upper() in _UNKNOWN_SERIALS else serial


def _pci_device(bdf: str) -> str:
    """``domain:bus:device`` of a BDF (the function digit is a partition's id)."""
    return bdf.rsplit(".", 1)[0]


def _physical_key(identity: GpuIdentity) -> tuple[str, str | None]:
    """Which physical GPU a logical device is part of: partition 0's BDF and the serial."""
    return identity.physical_bdf, identity.serial


def _as_dict(result: object) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise ReadError(parse.REASON_WRONG_TYPE, type(result).__name__)
    return result


class AmdSmiBackend:
    """Initialises amdsmi once, enumerates GPUs by BDF, and serves per-GPU raw calls.

    A GPU that disappears from enumeration is kept (``present`` False) and reported missing,
    never silently dropped; its index is kept for when it comes back.
    """

    def __init__(
        self,
        amdsmi_module: Any,
        *,
        allow_unsafe_library: bool = False,
        pci_root: Path | None = None,
        baseline_path: Path | None = None,
    ) -> None:
        """``amdsmi_module``: the real module (``load_amdsmi()``) or fleetd.sim.SimulatedAmdSmi.

        Raises BackendError when the package and the library it drives are a known-unsafe
        pair (``fleetd.collect.abi``), unless ``allow_unsafe_library``.

        ``pci_root``: the filesystem root whose ``sys/bus/pci/devices/<bdf>`` says whether a
        GPU is still on the PCI bus (``/`` on a node; a fake tree in tests and the
        simulator). Real amdsmi never says NOT_FOUND for a GPU that fell off the bus, so
        this is checked at every poll (``sources``). None: no presence check.

        ``baseline_path``: a JSON file keeping each GPU's learned per-port baselines (XGMI
        ports ever seen up) across restarts; None keeps them in memory only.
        """
        self.meter = MeteredAmdSmi(amdsmi_module)
        """Every amdsmi call made through this backend, counted by function (the cost model)."""
        self.amdsmi: Any = self.meter
        self._pci_root = pci_root
        self._device_dirs: dict[str, str] = {}
        self._baseline_file = (
            None if baseline_path is None else StateFile(baseline_path.parent, baseline_path.name)
        )
        self._baselines: dict[str, dict[str, Any]] = self._load_baselines()
        self._baseline_lock = threading.Lock()
        self.rediscovery_wanted = False
        """Set when a GPU looked gone (left sysfs, or a call failed as on a removed
        device); the daemon then re-enumerates soon; cleared by ``rediscover``."""
        self._exc_base: type[BaseException] = getattr(amdsmi_module, "AmdSmiException", Exception)
        self._enums: dict[tuple[str, str], Any] = {}
        self._lock = threading.RLock()
        self._global = threading.Lock()  # library-wide calls, one at a time (see _global_call)
        self._gpus: list[AmdSmiGpu] = []  # index order; index == position
        self._firmware: dict[str, dict[str, str] | None] = {}  # physical GPU's BDF → blocks
        self._closed = False
        self.ras_blocks: Mapping[str, int] = self._read_ras_blocks()
        self.abi = self._check_abi(allow_unsafe_library)
        self._init()
        self._discover()

    # --- library plumbing ---------------------------------------------------------------
    def enum(self, enum_name: str, member: str) -> Any:
        """The module's enum member by name, looked up once."""
        key = (enum_name, member)
        value = self._enums.get(key)
        if value is None:
            try:
                value = getattr(self.amdsmi, enum_name)[member]
            except (AttributeError, KeyError) as exc:
                raise ReadError(REASON_ERROR, f"{enum_name}.{member} unknown") from exc
            self._enums[key] = value
        return value

    def call(self, name: str, *args: Any) -> Any:
        """Call an amdsmi function; any failure becomes ReadError with a short reason."""
        try:
            fn = getattr(self.amdsmi, name)
        except AttributeError:
            raise ReadError(REASON_ERROR, f"amdsmi has no {name}") from None
        try:
            return fn(*args)
        except ReadError:
            raise
        except Exception as exc:
            raise self._read_error(exc) from exc

    def _read_error(self, exc: BaseException) -> ReadError:
        if isinstance(exc, ReadError):
            return exc
        if isinstance(exc, self._exc_base):
            code = getattr(exc, "err_code", None)
            if code is None:
                return ReadError("bad_parameter", _first_line(str(exc)))
            return ReadError(status_reason(code), _first_line(str(exc)))
        return ReadError(REASON_ERROR, f"{type(exc).__name__}: {_first_line(str(exc))}")

    def _global_call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A library-wide call (init, shut-down, enumeration, the node's KFD process list,
        the library version), never two at once. The poller calls amdsmi from one thread per
        GPU; per-device calls take amdsmi's own per-device mutexes, but these touch the
        library's global state, where amdsmi fixed thread-safety bugs as late as 7.1 and
        7.13 (hardware-behaviour.md §1.3 #8)."""
        with self._global:
            return getattr(self.amdsmi, name)(*args, **kwargs)

    def _check_abi(self, allow_unsafe: bool) -> AbiCheck:
        package = getattr(self.amdsmi, "__version__", None)
        library: tuple[int, int, int] | None = None
        try:
            found = self._global_call("amdsmi_get_lib_version")
            library = (int(found["major"]), int(found["minor"]), int(found["release"]))
        except Exception as exc:
            log.warning("amdsmi_library_version_unreadable", reason=self._read_error(exc).reason)
        result = check_pair(package if isinstance(package, str) else None, library)
        if result.verdict == "unsafe" and not allow_unsafe:
            raise BackendError(
                f"{result.message}. To run anyway (readings may be wrong, memory corrupted), "
                "set backend.allow_unsafe_library: true"
            )
        if result.verdict != "validated":
            log.warning("amdsmi_pair_not_validated", verdict=result.verdict, detail=result.message)
        return result

    def _read_ras_blocks(self) -> Mapping[str, int]:
        block_enum = getattr(self.amdsmi, "AmdSmiGpuBlock", None)
        if block_enum is None:
            return {}
        blocks: dict[str, int] = {}
        for member in block_enum:
            if member.name in ("INVALID", "RESERVED"):
                continue
            blocks[member.name.lower()] = int(member.value)
        return blocks

    def _init(self) -> None:
        try:
            flags = self.amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS
            self._global_call("amdsmi_init", flag=flags)
        except Exception as exc:
            reason = self._read_error(exc)
            raise BackendError(
                f"amdsmi_init failed ({reason}); is the amdgpu driver loaded and may this "
                f"user open /dev/kfd and /dev/dri? (run as root or in the render and video groups)"
            ) from None

    def _enumerate(self) -> list[tuple[str, Any]]:
        """(BDF, handle) of every GPU amdsmi sees now."""
        try:
            handles = self._global_call("amdsmi_get_processor_handles")
        except Exception as exc:
            raise BackendError(f"cannot enumerate GPUs: {self._read_error(exc)}") from None
        found: list[tuple[str, Any]] = []
        for handle in handles:
            try:
                bdf = self.call("amdsmi_get_gpu_device_bdf", handle)
            except ReadError as exc:
                log.warning("gpu_bdf_unreadable", reason=exc.reason, detail=exc.detail)
                continue
            if not isinstance(bdf, str) or not bdf:
                continue
            found.append((bdf.lower(), handle))
        return found

    def _identity(self, index: int, bdf: str, handle: Any) -> tuple[GpuIdentity, bool]:
        """The GPU's identity, and whether its XGMI hive is unknown (the call failed)."""

        def read(name: str, *args: Any) -> Any:
            try:
                return self.call(name, handle, *args)
            except ReadError:
                return None

        try:
            xgmi: Any = self.call("amdsmi_get_xgmi_info", handle)
            hive_unknown = False
        except ReadError as exc:
            xgmi, hive_unknown = None, True
            log.warning("gpu_hive_unknown", gpu=index, bdf=bdf, reason=exc.reason)

        def field(result: Any, key: str) -> Any:
            return result.get(key) if isinstance(result, dict) else None

        uuid = parse.text(read("amdsmi_get_gpu_device_uuid"))
        asic = read("amdsmi_get_gpu_asic_info")
        board = read("amdsmi_get_gpu_board_info")
        enumeration = read("amdsmi_get_gpu_enumeration_info")
        if uuid is None:
            uuid = parse.text(field(enumeration, "hip_uuid")) or f"bdf-{bdf}"
        market = field(asic, "market_name")
        product_name = field(board, "product_name")
        kfd = read("amdsmi_get_gpu_kfd_info")
        identity = GpuIdentity(
            index=index,
            uuid=uuid,
            bdf=bdf,
            serial=parse.text(field(board, "product_serial"))
            or parse.text(field(asic, "asic_serial")),
            product=parse.text(product_name) or parse.text(market),
            model=parse.normalise_model(market, product_name),
            vbios=parse.text(field(read("amdsmi_get_gpu_vbios_info"), "version")),
            driver_version=parse.text(field(read("amdsmi_get_gpu_driver_info"), "driver_version")),
            kfd_id=parse.index_value(field(kfd, "kfd_id")),
            hip_id=parse.index_value(field(enumeration, "hip_id")),
            hive_id=parse.hive_id(field(xgmi, "xgmi_hive_id")),
            partition_id=parse.index_value(field(kfd, "current_partition_id")),
            compute_partition=parse.text(read("amdsmi_get_gpu_compute_partition")),
            memory_partition=parse.text(read("amdsmi_get_gpu_memory_partition")),
        )
        return identity, hive_unknown

    def _discover(self) -> None:
        """Match what amdsmi enumerates now against known GPUs, by BDF."""
        found = self._enumerate()
        with self._lock:
            by_bdf = {gpu.identity.bdf: gpu for gpu in self._gpus}
            seen: set[str] = set()
            for bdf, handle in found:
                if bdf in seen:
                    continue
                seen.add(bdf)
                known = by_bdf.get(bdf)
                index = known.identity.index if known is not None else len(self._gpus)
                identity, hive_unknown = self._identity(index, bdf, handle)
                if identity.primary:  # static: read at discovery, once per physical GPU
                    self._firmware[bdf] = self._read_firmware(index, bdf, handle)
                if known is None:
                    known = AmdSmiGpu(self, identity, handle)
                    self._gpus.append(known)
                    log.info("gpu_found", gpu=index, bdf=bdf, uuid=identity.uuid)
                else:
                    known._rebind(identity, handle)
                known.hive_unknown = hive_unknown
                known.pci_tracked = self._on_pci_bus(bdf) is True
            for gpu in self._gpus:
                if gpu.identity.bdf not in seen and gpu.present:
                    gpu._vanish()
                    log.warning("gpu_missing", gpu=gpu.identity.index, bdf=gpu.identity.bdf)

    def _read_firmware(self, index: int, bdf: str, handle: Any) -> dict[str, str] | None:
        """``amdsmi_get_fw_info``: block name → version; None when the call fails (missing,
        never an empty list)."""
        try:
            result = self.call("amdsmi_get_fw_info", handle)
        except ReadError as exc:
            log.info("gpu_firmware_unreadable", gpu=index, bdf=bdf, reason=exc.reason)
            return None
        return firmware_blocks(result)

    def firmware(self) -> dict[str, dict[str, str] | None]:
        """The firmware blocks of every present physical GPU as read at discovery, keyed by
        its partition-0 BDF (None: the call failed on that GPU)."""
        with self._lock:
            present = {g.identity.bdf for g in self._gpus if g.present and g.identity.primary}
            return {bdf: blocks for bdf, blocks in self._firmware.items() if bdf in present}

    # --- per-port baselines ------------------------------------------------------------------
    def _load_baselines(self) -> dict[str, dict[str, Any]]:
        if self._baseline_file is None:
            return {}
        path = str(self._baseline_file.path)
        data = self._baseline_file.load(
            lambda why: log.warning("port_baseline_unreadable", path=path, error=why)
        )
        return {k: v for k, v in (data or {}).items() if isinstance(v, dict)}

    def _port_baseline(
        self, identity: GpuIdentity, kind: str, seen_up: Iterable[int]
    ) -> frozenset[int]:
        """The ports of ``kind`` GPU ``identity`` has ever had up (learned, persisted)."""
        seen = set(seen_up)
        with self._baseline_lock:
            entry = self._baselines.get(identity.bdf)
            if entry is None or entry.get("serial") != identity.serial:  # new or swapped board
                entry = {"serial": identity.serial}
                self._baselines[identity.bdf] = entry
            known = {int(p) for p in entry.get(kind, ()) if isinstance(p, int)}
            if seen <= known:
                return frozenset(known)
            added = sorted(seen - known)
            known |= seen
            entry[kind] = sorted(known)
            log.info("port_baseline_learned", gpu=identity.index, kind=kind, ports=added)
            self._save_baselines()
            return frozenset(known)

    def _save_baselines(self) -> None:
        if self._baseline_file is None:
            return
        try:
            self._baseline_file.save(self._baselines)
        except OSError as exc:  # kept in memory; learned again after a restart
            path = str(self._baseline_file.path)
            log.warning("port_baseline_unsaved", path=path, error=str(exc))

    # --- presence --------------------------------------------------------------------------
    def device_file(self, bdf: str, name: str) -> str | None:
        """A file of the GPU's PCI device in sysfs, stripped (None: no root, or unreadable)."""
        root = self._pci_root
        if root is None:
            return None
        try:
            with open(os.path.join(self._device_dir(root, bdf), name), encoding="utf-8") as f:
                return f.read().strip()
        except (OSError, UnicodeDecodeError):
            return None

    def _on_pci_bus(self, bdf: str) -> bool | None:
        """Whether ``bdf`` is in sysfs under the PCI root (None: no root to look in)."""
        root = self._pci_root
        if root is None:
            return None
        try:
            os.stat(self._device_dir(root, bdf))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:  # unreadable is not gone
            return None
        return True

    def _device_dir(self, root: Path, bdf: str) -> str:
        """The GPU's PCI device directory in sysfs, joined once: it is looked at every poll."""
        directory = self._device_dirs.get(bdf)
        if directory is None:
            directory = self._device_dirs[bdf] = os.path.join(root, PCI_DEVICES, bdf)
        return directory

    def _left_pci_bus(self, gpu: AmdSmiGpu) -> bool:
        """Mark ``gpu`` gone if its PCI device left sysfs; True if it did."""
        handle = gpu.handle
        if handle is None or not gpu.pci_tracked or self._on_pci_bus(gpu.identity.bdf) is not False:
            return False
        gpu._lost(handle, "left the PCI bus (sysfs)")
        self.rediscovery_wanted = True
        return True

    def _suspect(self, gpu: AmdSmiGpu, reason: str) -> None:
        """A call failed as calls on a removed device do: look at the bus, re-enumerate soon."""
        if not self.rediscovery_wanted:
            log.info("gpu_suspected_gone", gpu=gpu.identity.index, reason=reason)
        self.rediscovery_wanted = True
        self._left_pci_bus(gpu)

    def check_presence(self) -> list[int]:
        """Look for every present GPU's PCI device in sysfs; indices of those that left.

        Only partition 0 of a partitioned GPU is a PCI device (the others are ``amdgpu_xcp``
        platform devices, not looked for): when it leaves, its other partitions go with it."""
        with self._lock:
            gpus = list(self._gpus)
        left = [g for g in gpus if self._left_pci_bus(g)]
        gone = {_physical_key(g.identity) for g in left if g.identity.partitioned}
        for gpu in gpus if gone else ():
            handle = gpu.handle
            if handle is not None and _physical_key(gpu.identity) in gone and gpu not in left:
                gpu._lost(handle, "its physical GPU left the PCI bus (sysfs)")
                left.append(gpu)
        return [g.identity.index for g in left]

    # --- what the poller and remediation call -----------------------------------------------
    def sources(self) -> list[AmdSmiGpu]:
        """Every known GPU (present or vanished), in index order.

        Called at the start of every poll, so a GPU whose PCI device left sysfs is reported
        missing from that poll on (``check_presence``)."""
        self.check_presence()
        with self._lock:
            return list(self._gpus)

    def gpus(self) -> list[GpuIdentity]:
        """Identity of every known GPU, present or vanished, in index order."""
        with self._lock:
            return [gpu.identity for gpu in self._gpus]

    def present(self, index: int) -> bool:
        return self._gpu(index).present

    def _gpu(self, index: int) -> AmdSmiGpu:
        with self._lock:
            if not 0 <= index < len(self._gpus):
                raise BackendError(f"no GPU with index {index} (known: 0..{len(self._gpus) - 1})")
            return self._gpus[index]

    def reset_unit(self, index: int) -> list[int]:
        """Indices of the GPUs a reset of ``index`` touches: its whole XGMI hive.

        amdgpu recovers every device of a hive together, so the unit of a reset is the hive;
        a GPU that is in no hive (hive id 0) is its own unit — with every partition of its
        physical GPU, on a partitioned node. When the topology is unknown (amdsmi_get_xgmi_info
        failed at discovery for any GPU of a multi-GPU node) the unit fails safe to the whole
        node: draining one worker and resetting eight is the outcome to avoid
        (hardware-behaviour.md §1.3 #7). So it does when a device's partition mode could not
        be read and the topology does not prove it a physical GPU of its own (another device
        shares its serial or its PCI bus and device: it may be one of several partitions).
        ``reset_unit_note`` says why.
        """
        gpu = self._gpu(index)
        with self._lock:
            gpus = list(self._gpus)
        unknown = self._unknown_layout(gpus)
        if unknown:
            whole = [g.identity.index for g in gpus]
            log.warning(
                "reset_unit_whole_node",
                gpu=index,
                unknown=[g.identity.index for g in unknown],
                reason=(
                    "XGMI hive unknown (amdsmi_get_xgmi_info failed at discovery)"
                    if self._topology_unknown(gpus)
                    else "partition mode unreadable on a device that may be a partition"
                ),
            )
            return whole
        hive = gpu.identity.hive_id
        if hive is None:
            physical = _physical_key(gpu.identity)
            return sorted(g.identity.index for g in gpus if _physical_key(g.identity) == physical)
        return sorted(g.identity.index for g in gpus if g.identity.hive_id == hive)

    def reset_unit_note(self, index: int) -> str | None:
        """Why the reset unit of ``index`` is not simply its hive, for the plan; None if it is."""
        self._gpu(index)
        with self._lock:
            gpus = list(self._gpus)
        if self._topology_unknown(gpus):
            unknown = ", ".join(str(g.identity.index) for g in gpus if g.hive_unknown)
            return (
                f"XGMI topology unknown (amdsmi_get_xgmi_info failed for GPU {unknown}): "
                f"the reset unit is the whole node, since a hive reset may touch every GPU"
            )
        unread = self._unknown_layout(gpus)
        if not unread:
            return None
        which = ", ".join(str(g.identity.index) for g in unread)
        return (
            f"partition mode unreadable for GPU {which}, which share a serial number or PCI "
            "device with another GPU (they may be partitions of one physical GPU): the reset "
            "unit is the whole node"
        )

    def _unknown_layout(self, gpus: list[AmdSmiGpu]) -> list[AmdSmiGpu]:
        """The devices that make the reset unit unknowable: every GPU when the XGMI topology
        is unknown; else the devices whose partition mode is unreadable and that the
        topology does not prove to be a physical GPU of their own."""
        if self._topology_unknown(gpus):
            return [g for g in gpus if g.hive_unknown]
        unread = [g for g in gpus if g.identity.compute_partition is None]
        if not unread:
            return []
        serials: dict[str, int] = {}
        devices: dict[str, int] = {}
        for g in gpus:
            serial = _known_serial(g.identity)
            if serial is not None:
                serials[serial] = serials.get(serial, 0) + 1
            device = _pci_device(g.identity.bdf)
            devices[device] = devices.get(device, 0) + 1
        return [
            g
            for g in unread
            if devices[_pci_device(g.identity.bdf)] > 1
            or serials.get(_known_serial(g.identity) or "", 0) > 1
        ]

    @staticmethod
    def _topology_unknown(gpus: list[AmdSmiGpu]) -> bool:
        return len(gpus) > 1 and any(g.hive_unknown for g in gpus)

    def primary_of(self, gpu: AmdSmiGpu) -> AmdSmiGpu:
        """Partition 0 of ``gpu``'s physical GPU (``gpu`` itself when unpartitioned or when
        no partition 0 with its serial is known)."""
        ident = gpu.identity
        if ident.primary:
            return gpu
        with self._lock:
            gpus = list(self._gpus)
        for other in gpus:
            o = other.identity
            if o.bdf == ident.physical_bdf and o.primary and o.serial == ident.serial:
                return other
        return gpu

    def partition_modes(self) -> dict[str, tuple[str | None, str | None]]:
        """(compute, memory) partition mode of every present physical GPU, read now from its
        partition 0 (None where the call fails), keyed by that partition's BDF."""
        with self._lock:
            gpus = [g for g in self._gpus if g.present and g.identity.primary]
        modes: dict[str, tuple[str | None, str | None]] = {}
        for gpu in gpus:
            handle = gpu.handle
            modes[gpu.identity.bdf] = (
                self._text_call("amdsmi_get_gpu_compute_partition", handle),
                self._text_call("amdsmi_get_gpu_memory_partition", handle),
            )
        return modes

    def _text_call(self, name: str, handle: Any) -> str | None:
        try:
            return parse.text(self.call(name, handle))
        except ReadError:
            return None

    def set_partition_modes(self, bdf: str, compute: str, memory: str) -> None:
        """amdsmi_set_gpu_memory_partition then _compute_partition on the physical GPU whose
        partition 0 is ``bdf``; raises BackendError naming the call that failed."""
        with self._lock:
            found = [g for g in self._gpus if g.identity.bdf == bdf and g.present]
        if not found or found[0].handle is None:
            raise BackendError(f"cannot set the partition mode of {bdf}: it is missing")
        handle = found[0].handle
        calls = (
            ("amdsmi_set_gpu_memory_partition", "AmdSmiMemoryPartitionType", memory),
            ("amdsmi_set_gpu_compute_partition", "AmdSmiComputePartitionType", compute),
        )
        for name, enum_name, member in calls:
            try:
                self.call(name, handle, self.enum(enum_name, member))
            except ReadError as exc:
                raise BackendError(f"{name}({bdf}, {member}) failed: {exc.reason}") from None
        log.warning("gpu_partition_mode_set", bdf=bdf, compute=compute, memory=memory)

    def reset_gpu(self, index: int) -> None:
        """amdsmi_reset_gpu on one GPU (which resets its whole hive); raises BackendError.

        On a partitioned GPU the call goes through its partition 0, where the device's reset
        lives (a secondary partition is an ``amdgpu_xcp`` platform device)."""
        gpu = self.primary_of(self._gpu(index))
        index = gpu.identity.index
        handle = gpu.handle
        if handle is None:
            raise BackendError(f"cannot reset GPU {index} ({gpu.identity.bdf}): it is missing")
        try:
            self.call("amdsmi_reset_gpu", handle)
        except ReadError as exc:
            hint = " (needs root and debugfs)" if exc.reason == "no_perm" else ""
            raise BackendError(
                f"reset of GPU {index} ({gpu.identity.bdf}) failed: {exc.reason}{hint}"
            ) from None
        log.warning("gpu_reset_issued", gpu=index, bdf=gpu.identity.bdf)

    def processes(self, index: int) -> list[GpuProcess]:
        """Processes holding GPU ``index`` (amdsmi_get_gpu_process_list); raises BackendError."""
        gpu = self._gpu(index)
        try:
            records = gpu.process_list()
        except ReadError as exc:
            raise BackendError(
                f"cannot list processes on GPU {index} ({gpu.identity.bdf}): {exc.reason}"
            ) from None
        result: list[GpuProcess] = []
        for record in records:
            pid = parse.index_value(record.get("pid") if isinstance(record, dict) else None)
            if pid is None:
                continue
            memory = parse.nonneg_bytes(record.get("mem"))
            result.append(
                GpuProcess(
                    pid=pid,
                    name=parse.text(record.get("name")),
                    memory_bytes=int(memory) if memory is not None else None,
                )
            )
        return result

    def compute_processes(self) -> list[int]:
        """PIDs of every KFD (compute) process on the node: all of them die in a hive reset."""
        try:
            records = self._global_call("amdsmi_get_gpu_compute_process_info")
        except Exception as exc:
            raise BackendError(
                f"cannot list KFD processes: {self._read_error(exc).reason}"
            ) from None
        if not isinstance(records, list):
            raise BackendError("cannot list KFD processes: unexpected result")
        pids = {
            pid
            for record in records
            if isinstance(record, dict)
            and (pid := parse.index_value(record.get("process_id"))) is not None
        }
        return sorted(pids)

    def rediscover(self) -> list[GpuIdentity]:
        """shut_down + init + enumerate again (after a reset: handles may be stale).

        GPUs are matched by BDF and keep their index; one that did not come back stays
        known and is reported missing.
        """
        with self._lock:
            self.rediscovery_wanted = False
            try:
                self._global_call("amdsmi_shut_down")
            except Exception as exc:
                log.warning("amdsmi_shut_down_failed", reason=self._read_error(exc).reason)
            try:
                self._init()
            except BackendError:
                for gpu in self._gpus:
                    gpu._vanish()
                raise
            self._discover()
            return self.gpus()

    def close(self) -> None:
        """Shut amdsmi down once; later calls do nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for gpu in self._gpus:
                gpu._vanish()
            try:
                self._global_call("amdsmi_shut_down")
            except Exception as exc:
                log.warning("amdsmi_shut_down_failed", reason=self._read_error(exc).reason)


_FW_PREFIX = "AMDSMI_FW_ID_"


def firmware_blocks(result: object) -> dict[str, str] | None:
    """``{"fw_list": [{"fw_name": AmdSmiFwBlock member, "fw_version": str}]}`` → block name
    (``PSP_SOSDRV``) → version; None when the result has no list. Entries without a usable
    version ("N/A", empty) are left out."""
    if not isinstance(result, dict) or not isinstance(result.get("fw_list"), list):
        return None
    out: dict[str, str] = {}
    for entry in result["fw_list"]:
        if not isinstance(entry, dict):
            continue
        name = entry.get("fw_name")
        label = getattr(name, "name", name)
        version = parse.text(entry.get("fw_version"))
        if isinstance(label, str) and version is not None:
            out[label.removeprefix(_FW_PREFIX)] = version
    return out
