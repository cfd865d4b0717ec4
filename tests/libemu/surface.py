"""Read everything a face offers, for every GPU, as an ordered list of typed leaves.

Works on any object with the amdsmi surface: the stand-in ``SimulatedAmdSmi`` and the real
``amdsmi`` module over the emulated library. Values are tagged with their type, so ``True``
and ``1``, ``"N/A"`` and a raw sentinel, or two enum classes with the same value never
compare equal by accident; dict key order is part of the result. Exceptions read as their
class name, error code and text.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from enum import Enum
from typing import Any

Leaf = tuple[str, tuple[Any, ...]]
Calls = dict[str, Callable[[], Any]]

# Functions that change state: exercised by dedicated tests, never by a surface read.
MUTATORS = frozenset(
    {
        "amdsmi_init",
        "amdsmi_shut_down",
        "amdsmi_reset_gpu",
        "amdsmi_reset_gpu_xgmi_error",
        "amdsmi_set_gpu_compute_partition",
        "amdsmi_set_gpu_memory_partition",
    }
)

TEMP_METRICS = ("CURRENT", "MAX", "CRITICAL", "EMERGENCY")
"""Temperature metrics read per sensor (the model has three; MAX shows an unsupported one)."""


def tag(value: Any) -> tuple[Any, ...]:
    """A value with its type, comparable across the two faces."""
    if value is None:
        return ("None",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, Enum):
        return ("enum", type(value).__name__, value.name, value.value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", value)
    if isinstance(value, str | bytes):
        return (type(value).__name__, value)
    if isinstance(value, ctypes.c_void_p):
        return ("handle", type(value).__name__, value.value)
    return (type(value).__name__, repr(value))


def flatten(path: str, value: Any, out: list[Leaf]) -> None:
    if isinstance(value, dict):
        out.append((path, ("dict", len(value))))
        for key, sub in value.items():
            flatten(f"{path}/{key!r}", sub, out)
    elif isinstance(value, list | tuple):
        out.append((path, (type(value).__name__, len(value))))
        for i, sub in enumerate(value):
            flatten(f"{path}/{i}", sub, out)
    else:
        out.append((path, tag(value)))


def outcome(call: Callable[[], Any]) -> Any:
    """The call's result, or its exception as (class name, error code, text).

    Any exception counts, not only AmdSmiException: the real package has bugs that raise
    TypeError or AttributeError, and the stand-in must raise the same.
    """
    try:
        return call()
    except Exception as err:
        return ("EXC", type(err).__name__, getattr(err, "err_code", None), str(err))


def gpu_calls(a: Any, h: Any, peer: Any) -> Calls:
    """Every per-GPU read the face offers, with every interesting argument."""
    calls: Calls = {
        name: (lambda name=name: getattr(a, name)(h))
        for name in (
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
            "amdsmi_get_gpu_metrics_header_info",
            "amdsmi_topo_get_numa_node_number",
            "amdsmi_get_gpu_topo_numa_affinity",
            "amdsmi_get_gpu_compute_partition",
            "amdsmi_get_gpu_memory_partition",
        )
    }
    for sensor in a.AmdSmiTemperatureType:
        if sensor.value > 7 and sensor.name != "GPUBOARD_NODE_RETIMER_X":
            continue  # board/baseboard sensors: one is enough
        for metric in (m for m in a.AmdSmiTemperatureMetric if m.name in TEMP_METRICS):
            calls[f"amdsmi_get_temp_metric:{sensor.name}:{metric.name}"] = (
                lambda s=sensor, m=metric: a.amdsmi_get_temp_metric(h, s, m)
            )
    for clk in a.AmdSmiClkType:
        calls[f"amdsmi_get_clock_info:{clk.name}"] = lambda c=clk: a.amdsmi_get_clock_info(h, c)
    for mem in a.AmdSmiMemoryType:
        calls[f"amdsmi_get_gpu_memory_total:{mem.name}"] = lambda m=mem: (
            a.amdsmi_get_gpu_memory_total(h, m)
        )
        calls[f"amdsmi_get_gpu_memory_usage:{mem.name}"] = lambda m=mem: (
            a.amdsmi_get_gpu_memory_usage(h, m)
        )
    for block in a.AmdSmiGpuBlock:
        calls[f"amdsmi_get_gpu_ecc_count:{block.name}"] = lambda b=block: (
            a.amdsmi_get_gpu_ecc_count(h, b)
        )
        calls[f"amdsmi_get_gpu_ecc_status:{block.name}"] = lambda b=block: (
            a.amdsmi_get_gpu_ecc_status(h, b)
        )
    for link in a.AmdSmiLinkType:
        calls[f"amdsmi_get_link_topology_nearest:{link.name}"] = lambda k=link: (
            a.amdsmi_get_link_topology_nearest(h, k)
        )
    for mask in (0b001, 0b010, 0b100, 0b111):
        calls[f"amdsmi_get_gpu_cper_entries:{mask:03b}"] = lambda m=mask: (
            a.amdsmi_get_gpu_cper_entries(h, m)
        )
    calls["amdsmi_get_gpu_cper_entries:small"] = lambda: a.amdsmi_get_gpu_cper_entries(
        h, 0b111, buffer_size=400, cursor=1
    )
    for other, label in ((h, "self"), (peer, "peer")):
        calls[f"amdsmi_topo_get_link_type:{label}"] = lambda o=other: a.amdsmi_topo_get_link_type(
            h, o
        )
        calls[f"amdsmi_topo_get_link_weight:{label}"] = lambda o=other: (
            a.amdsmi_topo_get_link_weight(h, o)
        )
        calls[f"amdsmi_get_minmax_bandwidth_between_processors:{label}"] = lambda o=other: (
            a.amdsmi_get_minmax_bandwidth_between_processors(h, o)
        )
        calls[f"amdsmi_is_P2P_accessible:{label}"] = lambda o=other: a.amdsmi_is_P2P_accessible(
            h, o
        )
    # the Python-side type checks: plain ints where enums or handles belong
    calls["type_check:temp_metric_int"] = lambda: a.amdsmi_get_temp_metric(h, 1, 0)
    calls["type_check:clock_int"] = lambda: a.amdsmi_get_clock_info(h, 0)
    calls["type_check:ecc_count_int"] = lambda: a.amdsmi_get_gpu_ecc_count(h, 1)
    calls["type_check:memory_total_int"] = lambda: a.amdsmi_get_gpu_memory_total(h, 0)
    calls["type_check:handle_int"] = lambda: a.amdsmi_get_power_info(h.value)
    calls["type_check:nearest_untyped"] = lambda: a.amdsmi_get_link_topology_nearest(h.value, 2)
    calls["type_check:event_reader_int"] = lambda: a.AmdSmiEventReader(h, [2])
    calls["type_check:event_reader_handle_int"] = lambda: a.AmdSmiEventReader(
        h.value, [a.AmdSmiEvtNotificationType.VMFAULT]
    )
    return calls


def node_calls(a: Any, pids: list[int]) -> Calls:
    """Reads that take no GPU handle."""
    calls: Calls = {
        "amdsmi_get_gpu_compute_process_info": a.amdsmi_get_gpu_compute_process_info,
        "amdsmi_get_lib_version": a.amdsmi_get_lib_version,
        "amdsmi_get_socket_handles": lambda: [
            (s.value, a.amdsmi_get_socket_info(s)) for s in a.amdsmi_get_socket_handles()
        ],
        "amdsmi_get_processor_handle_from_bdf:bad": (
            lambda: a.amdsmi_get_processor_handle_from_bdf("not-a-bdf")
        ),
        "amdsmi_get_processor_handle_from_bdf:short": (
            lambda: a.amdsmi_get_processor_handle_from_bdf("05:00.0").value
        ),
        "amdsmi_get_processor_handle_from_bdf:absent": (
            lambda: a.amdsmi_get_processor_handle_from_bdf("0000:ff:1f.7")
        ),
        "amdsmi_get_gpu_compute_process_info_by_pid:absent": (
            lambda: a.amdsmi_get_gpu_compute_process_info_by_pid(999_999)
        ),
        "type_check:pid_str": lambda: a.amdsmi_get_gpu_compute_process_info_by_pid("1"),
        "type_check:bdf_none": lambda: a.amdsmi_get_processor_handle_from_bdf(None),
        "type_check:socket_int": lambda: a.amdsmi_get_socket_info(1),
        "type_check:init_int": lambda: a.amdsmi_init(2),
    }
    for pid in pids:
        calls[f"amdsmi_get_gpu_compute_process_info_by_pid:{pid}"] = lambda p=pid: (
            a.amdsmi_get_gpu_compute_process_info_by_pid(p)
        )
    return calls


def read_surface(a: Any, pids: list[int], stale: dict[str, Any] | None = None) -> list[Leaf]:
    """Everything ``a`` reports, keyed by BDF; ``stale`` adds reads through old handles."""
    out: list[Leaf] = []
    handles = a.amdsmi_get_processor_handles()
    for i, h in enumerate(handles):
        bdf = a.amdsmi_get_gpu_device_bdf(h)
        from_bdf = outcome(lambda b=bdf: a.amdsmi_get_processor_handle_from_bdf(b).value)
        flatten(f"{bdf}/from_bdf", from_bdf, out)
        peer = handles[(i + 1) % len(handles)]
        for name, call in gpu_calls(a, h, peer).items():
            flatten(f"{bdf}/{name}", outcome(call), out)
    for bdf, h in (stale or {}).items():
        flatten(f"stale {bdf}", outcome(lambda h=h: a.amdsmi_get_power_info(h)), out)
    for name, call in node_calls(a, pids).items():
        flatten(f"node/{name}", outcome(call), out)
    return out


def covered_functions(a: Any) -> set[str]:
    """Face functions a surface read calls (names before any ':' qualifier)."""
    h = ctypes.c_void_p(1)
    names = {k.split(":")[0] for k in gpu_calls(a, h, h)} | {
        k.split(":")[0] for k in node_calls(a, [1])
    }
    return names | {
        "amdsmi_get_processor_handles",
        "amdsmi_get_processor_handle_from_bdf",
        "amdsmi_get_socket_info",
    }


def differences(left: list[Leaf], right: list[Leaf], limit: int = 25) -> list[str]:
    """Human-readable differences between two surfaces (empty when identical)."""
    problems: list[str] = []
    lpaths = [p for p, _ in left]
    rpaths = [p for p, _ in right]
    if lpaths != rpaths:
        only_l = [p for p in lpaths if p not in set(rpaths)]
        only_r = [p for p in rpaths if p not in set(lpaths)]
        problems.append(f"paths differ: only stand-in {only_l[:10]}, only real {only_r[:10]}")
        if not only_l and not only_r:
            problems.append("same paths in a different order")
    rmap = dict(right)
    for path, value in left:
        if path in rmap and rmap[path] != value:
            problems.append(f"{path}: stand-in {value!r} != real {rmap[path]!r}")
            if len(problems) >= limit:
                break
    return problems
