"""Everything fleetd reads of a GPU, raw, for the evidence bundle a reset would destroy.

Every call is the library's own answer, unparsed (enums and bytes as text): the engineer
deciding on an RMA wants what the driver said, not fleetd's reading of it. A call that fails
is kept as its failure (``{"error": reason, "detail": …}``), never as a zero.
"""

from __future__ import annotations

import base64
import enum
import time
from collections.abc import Callable, Iterable
from typing import Any

from fleetd.collect.amdsmi_backend import AmdSmiBackend, AmdSmiGpu
from fleetd.collect.source import ReadError

PER_GPU_CALLS = (
    "amdsmi_get_gpu_asic_info",
    "amdsmi_get_gpu_board_info",
    "amdsmi_get_gpu_vbios_info",
    "amdsmi_get_fw_info",
    "amdsmi_get_gpu_driver_info",
    "amdsmi_get_gpu_device_uuid",
    "amdsmi_get_gpu_kfd_info",
    "amdsmi_get_gpu_compute_partition",
    "amdsmi_get_gpu_memory_partition",
    "amdsmi_get_gpu_vram_info",
    "amdsmi_get_gpu_metrics_info",
    "amdsmi_get_gpu_activity",
    "amdsmi_get_power_info",
    "amdsmi_get_power_cap_info",
    "amdsmi_get_energy_count",
    "amdsmi_get_gpu_total_ecc_count",
    "amdsmi_get_gpu_ecc_enabled",
    "amdsmi_get_gpu_ras_feature_info",
    "amdsmi_get_gpu_bad_page_info",
    "amdsmi_get_gpu_bad_page_threshold",
    "amdsmi_get_gpu_memory_reserved_pages",
    "amdsmi_get_pcie_info",
    "amdsmi_get_gpu_pci_replay_counter",
    "amdsmi_get_xgmi_info",
    "amdsmi_gpu_xgmi_error_status",
    "amdsmi_get_gpu_xgmi_link_status",
    "amdsmi_get_link_metrics",
    "amdsmi_get_violation_status",
    "amdsmi_get_gpu_process_list",
)
"""No-argument reads, in the order they are dumped: identity and versions, metrics, RAS and
bad pages, PCIe and XGMI counters and link states, partition layout, processes."""


def raw(value: Any, depth: int = 0) -> Any:
    """The library's answer as JSON: enums by name, bytes as base64, handles as text."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {str(k): raw(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [raw(v, depth + 1) for v in value]
    return repr(value)


def _read(call: Callable[[], Any]) -> Any:
    try:
        return raw(call())
    except ReadError as exc:
        return {"error": exc.reason, "detail": exc.detail}
    except Exception as exc:  # a dump never fails as a whole because one call did
        return {"error": "error", "detail": f"{type(exc).__name__}: {exc}"}


def dump_gpu(backend: AmdSmiBackend, gpu: AmdSmiGpu) -> dict[str, Any]:
    """One GPU: identity, every no-argument read, ECC per RAS block, and what the backend
    learned (calls unsupported on this SKU)."""
    ident = gpu.identity
    out: dict[str, Any] = {
        "identity": {
            "index": ident.index,
            "bdf": ident.bdf,
            "uuid": ident.uuid,
            "serial": ident.serial,
            "model": ident.model,
        },
        "present": gpu.present,
        "read_at": time.time(),
    }
    handle = gpu.handle
    if handle is None:
        out["error"] = "gpu_missing: off the bus, nothing could be read"
        return out
    calls: dict[str, Any] = {}
    for name in PER_GPU_CALLS:
        calls[name] = _read(lambda name=name: backend.call(name, handle))  # type: ignore[misc]
    out["calls"] = calls
    out["ecc_per_block"] = {
        block: _read(lambda block=block: gpu.ecc_count(block.upper()))  # type: ignore[misc]
        for block in sorted(gpu.ras_blocks())
    }
    out["unsupported_on_sku"] = gpu.unsupported()
    return out


def dump_unit(backend: AmdSmiBackend, indices: Iterable[int]) -> dict[str, Any]:
    """Every GPU of ``indices`` (by index), and the library's own version."""
    wanted = set(indices)
    gpus = {
        str(g.identity.index): dump_gpu(backend, g)
        for g in backend.sources()
        if g.identity.index in wanted
    }
    for index in sorted(wanted - {int(k) for k in gpus}):
        gpus[str(index)] = {"error": "gpu_missing: not enumerated"}
    return {"lib_version": _read(lambda: backend.call("amdsmi_get_lib_version")), "gpus": gpus}
