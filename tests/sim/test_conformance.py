"""The simulator against the real amdsmi 7.0.2 source (read with ast, never imported).

Every function the face offers exists in the real package with the same parameters; every
enum, exception and status constant matches; and each simulated result has exactly the keys
the real function builds. A self-check proves the checks can fail.
"""

from __future__ import annotations

import ctypes
import types
from enum import IntEnum
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.exceptions import ERROR_TEXT

from .amdsmi_ast import (
    RealApi,
    expected_shape,
    find_package_dir,
    load_real_api,
    name_shape,
    offered_functions,
    real_params,
    shape_problems,
    sim_params,
    surface_problems,
)

PACKAGE = find_package_dir()
pytestmark = pytest.mark.skipif(
    PACKAGE is None,
    reason="amdsmi 7.0.2 is not installed (pip install amdsmi==7.0.2; CI installs it)",
)


@pytest.fixture(scope="module")
def api() -> RealApi:
    assert PACKAGE is not None
    version = (PACKAGE / "_version.py").read_text(encoding="utf-8")
    real = load_real_api(PACKAGE)
    assert real.functions and real.enums and real.constants, f"nothing parsed in {PACKAGE}"
    assert "7.0.2" in version or "amdsmi-7.0.2" in str(PACKAGE.parent) or _dist_version() == "7.0.2"
    return real


def _dist_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("amdsmi")
    except PackageNotFoundError:
        return None


@pytest.fixture(scope="module")
def face() -> SimulatedAmdSmi:
    clock = FakeClock()
    node = build_node("MI355X", seed=7, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    node.set_load(None, 0.6)
    clock.advance(120)
    node.add_process(2, 4242, "python3", 100 << 30)
    node.inject(2, "ecc_uncorrectable")
    clock.advance(5)
    return amdsmi


def test_surface_matches_the_real_package(face: SimulatedAmdSmi, api: RealApi) -> None:
    assert surface_problems(face, api) == []


def test_the_face_covers_the_calls_a_health_daemon_needs(face: SimulatedAmdSmi) -> None:
    needed = {
        "amdsmi_init", "amdsmi_shut_down", "amdsmi_get_processor_handles",
        "amdsmi_get_socket_handles", "amdsmi_get_processor_handle_from_bdf",
        "amdsmi_get_processor_type", "amdsmi_get_gpu_device_bdf", "amdsmi_get_gpu_device_uuid",
        "amdsmi_get_gpu_enumeration_info", "amdsmi_get_gpu_asic_info",
        "amdsmi_get_gpu_board_info", "amdsmi_get_gpu_kfd_info", "amdsmi_get_gpu_driver_info",
        "amdsmi_get_gpu_vbios_info", "amdsmi_get_gpu_vram_info", "amdsmi_get_temp_metric",
        "amdsmi_get_power_info", "amdsmi_get_power_cap_info", "amdsmi_get_energy_count",
        "amdsmi_get_gpu_activity", "amdsmi_get_gpu_vram_usage", "amdsmi_get_clock_info",
        "amdsmi_get_gpu_memory_total", "amdsmi_get_gpu_memory_usage",
        "amdsmi_get_gpu_total_ecc_count", "amdsmi_get_gpu_ecc_count",
        "amdsmi_get_gpu_ecc_enabled", "amdsmi_get_gpu_ecc_status",
        "amdsmi_get_gpu_ras_feature_info", "amdsmi_get_gpu_ras_block_features_enabled",
        "amdsmi_get_gpu_bad_page_info", "amdsmi_get_gpu_bad_page_threshold",
        "amdsmi_get_gpu_memory_reserved_pages", "amdsmi_get_pcie_info",
        "amdsmi_get_gpu_pci_replay_counter", "amdsmi_get_xgmi_info",
        "amdsmi_gpu_xgmi_error_status", "amdsmi_reset_gpu_xgmi_error",
        "amdsmi_get_gpu_xgmi_link_status", "amdsmi_get_link_metrics",
        "amdsmi_topo_get_link_type", "amdsmi_topo_get_link_weight",
        "amdsmi_get_gpu_metrics_info", "amdsmi_get_violation_status",
        "amdsmi_get_gpu_process_list", "amdsmi_get_gpu_compute_process_info",
        "amdsmi_get_gpu_compute_process_info_by_pid", "amdsmi_reset_gpu",
        "amdsmi_get_gpu_cper_entries", "amdsmi_get_link_topology_nearest",
        "amdsmi_get_lib_version",
    }  # fmt: skip
    assert needed <= set(offered_functions(face))


def test_event_reader_signatures_match(face: SimulatedAmdSmi, api: RealApi) -> None:
    real = api.classes["AmdSmiEventReader"]
    methods = {f.name: f for f in real.body if hasattr(f, "args")}
    reader = face.AmdSmiEventReader
    for name in ("__init__", "read", "stop", "__enter__", "__exit__"):
        want = real_params(methods[name], api)  # type: ignore[arg-type]
        got = sim_params(getattr(reader, name))[1:]
        assert got == want, name


def test_error_texts_match_the_real_table(api: RealApi) -> None:
    assert api.error_text == ERROR_TEXT


# ---------------------------------------------------------------------------------- result keys
def _calls(a: SimulatedAmdSmi, h: Any, peer: Any) -> dict[str, Any]:
    """Every face function that returns data, called with valid arguments."""
    return {
        "amdsmi_get_processor_type": lambda: a.amdsmi_get_processor_type(h),
        "amdsmi_get_gpu_enumeration_info": lambda: a.amdsmi_get_gpu_enumeration_info(h),
        "amdsmi_get_gpu_asic_info": lambda: a.amdsmi_get_gpu_asic_info(h),
        "amdsmi_get_gpu_board_info": lambda: a.amdsmi_get_gpu_board_info(h),
        "amdsmi_get_gpu_kfd_info": lambda: a.amdsmi_get_gpu_kfd_info(h),
        "amdsmi_get_gpu_driver_info": lambda: a.amdsmi_get_gpu_driver_info(h),
        "amdsmi_get_gpu_vbios_info": lambda: a.amdsmi_get_gpu_vbios_info(h),
        "amdsmi_get_fw_info": lambda: a.amdsmi_get_fw_info(h),
        "amdsmi_get_gpu_vram_info": lambda: a.amdsmi_get_gpu_vram_info(h),
        "amdsmi_get_power_info": lambda: a.amdsmi_get_power_info(h),
        "amdsmi_get_power_cap_info": lambda: a.amdsmi_get_power_cap_info(h),
        "amdsmi_get_energy_count": lambda: a.amdsmi_get_energy_count(h),
        "amdsmi_get_gpu_activity": lambda: a.amdsmi_get_gpu_activity(h),
        "amdsmi_get_gpu_vram_usage": lambda: a.amdsmi_get_gpu_vram_usage(h),
        "amdsmi_get_clock_info": lambda: a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX),
        "amdsmi_get_gpu_total_ecc_count": lambda: a.amdsmi_get_gpu_total_ecc_count(h),
        "amdsmi_get_gpu_ecc_count": lambda: a.amdsmi_get_gpu_ecc_count(h, a.AmdSmiGpuBlock.UMC),
        "amdsmi_get_gpu_ras_feature_info": lambda: a.amdsmi_get_gpu_ras_feature_info(h),
        "amdsmi_get_gpu_ras_block_features_enabled": (
            lambda: a.amdsmi_get_gpu_ras_block_features_enabled(h)
        ),
        "amdsmi_get_gpu_bad_page_info": lambda: a.amdsmi_get_gpu_bad_page_info(h),
        "amdsmi_get_pcie_info": lambda: a.amdsmi_get_pcie_info(h),
        "amdsmi_get_xgmi_info": lambda: a.amdsmi_get_xgmi_info(h),
        "amdsmi_get_gpu_xgmi_link_status": lambda: a.amdsmi_get_gpu_xgmi_link_status(h),
        "amdsmi_get_link_metrics": lambda: a.amdsmi_get_link_metrics(h),
        "amdsmi_topo_get_link_type": lambda: a.amdsmi_topo_get_link_type(h, peer),
        "amdsmi_get_link_topology_nearest": (
            lambda: a.amdsmi_get_link_topology_nearest(h, a.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI)
        ),
        "amdsmi_get_minmax_bandwidth_between_processors": (
            lambda: a.amdsmi_get_minmax_bandwidth_between_processors(h, peer)
        ),
        "amdsmi_get_gpu_metrics_info": lambda: a.amdsmi_get_gpu_metrics_info(h),
        "amdsmi_get_gpu_metrics_header_info": lambda: a.amdsmi_get_gpu_metrics_header_info(h),
        "amdsmi_get_violation_status": lambda: a.amdsmi_get_violation_status(h),
        "amdsmi_get_gpu_process_list": lambda: a.amdsmi_get_gpu_process_list(h),
        "amdsmi_get_gpu_compute_process_info": lambda: a.amdsmi_get_gpu_compute_process_info(),
        "amdsmi_get_gpu_compute_process_info_by_pid": (
            lambda: a.amdsmi_get_gpu_compute_process_info_by_pid(4242)
        ),
        "amdsmi_get_lib_version": lambda: a.amdsmi_get_lib_version(),
    }


def test_every_dict_returning_function_is_key_checked(face: SimulatedAmdSmi, api: RealApi) -> None:
    handles = face.amdsmi_get_processor_handles()
    covered = set(_calls(face, handles[2], handles[3]))
    builds_dicts = {
        name
        for name in offered_functions(face)
        if name in api.functions and expected_shape(api.functions[name], api) is not None
    }
    # amdsmi 7.0.2 never returns a non-empty reserved-page list (its TypeError bug): nothing
    # to key-check; test_reserved_pages_raise_like_the_real_package covers it
    assert builds_dicts - covered == {"amdsmi_get_gpu_memory_reserved_pages"}


def test_reserved_pages_raise_like_the_real_package(face: SimulatedAmdSmi) -> None:
    handles = face.amdsmi_get_processor_handles()
    assert face.amdsmi_get_gpu_memory_reserved_pages(handles[0]) == []
    with pytest.raises(TypeError, match="non-int of type 'c_uint'"):
        face.amdsmi_get_gpu_memory_reserved_pages(handles[2])  # has a retired page


def test_results_have_exactly_the_real_keys(face: SimulatedAmdSmi, api: RealApi) -> None:
    handles = face.amdsmi_get_processor_handles()
    problems = []
    for name, call in _calls(face, handles[2], handles[3]).items():
        expected = expected_shape(api.functions[name], api)
        assert expected is not None, f"no dict shape found in the real {name}"
        problems += shape_problems(name, call(), expected)
    assert problems == []


def test_gpu_metrics_has_all_79_keys(face: SimulatedAmdSmi, api: RealApi) -> None:
    expected = expected_shape(api.functions["amdsmi_get_gpu_metrics_info"], api)
    handle = face.amdsmi_get_processor_handles()[0]
    assert len(expected) == 79
    assert list(face.amdsmi_get_gpu_metrics_info(handle)) == list(expected)


def test_event_reader_items_have_the_real_keys(face: SimulatedAmdSmi, api: RealApi) -> None:
    real_read = next(
        f for f in api.classes["AmdSmiEventReader"].body if getattr(f, "name", "") == "read"
    )
    expected = expected_shape(real_read, api)  # type: ignore[arg-type]
    handles = face.amdsmi_get_processor_handles()
    kinds = [face.AmdSmiEvtNotificationType.GPU_PRE_RESET]
    reader = face.AmdSmiEventReader(handles[0], kinds)
    face.amdsmi_reset_gpu(handles[5])
    assert shape_problems("read", reader.read(1000), expected) == []
    reader.stop()


def test_cper_entries_have_the_real_shape(face: SimulatedAmdSmi, api: RealApi) -> None:
    real = api.functions["amdsmi_get_gpu_cper_entries"]
    entry_shape = name_shape("cper_entry", real, api)
    data_shape = name_shape("cper_data", real, api)
    assert entry_shape and data_shape
    handle = face.amdsmi_get_processor_handles()[2]
    entries, cursor, data, status = face.amdsmi_get_gpu_cper_entries(handle, 0b111)
    assert status == 0 and cursor == 1 and list(entries) == [0]
    assert shape_problems("cper entry", entries[0], entry_shape) == []
    assert shape_problems("cper data", data, data_shape) == []


# ---------------------------------------------------------------------------------- self-check
class _WrongEnum(IntEnum):
    HOTSPOT = 1
    EDGE = 9  # wrong value
    BOGUS = 3  # not a real member


class _FakeSurface:
    """A deliberately wrong amdsmi surface: every check must catch something here."""

    amdsmi_wrapper = types.ModuleType("fake_wrapper")
    AmdSmiTemperatureType = _WrongEnum

    class AmdSmiLibraryException(Exception):  # wrong base, wrong __init__
        def __init__(self, code: int) -> None:
            super().__init__(code)

    class AmdSmiMadeUpException(Exception):
        pass

    def amdsmi_get_temp_metric(self, handle: Any, sensor_type: Any, metric: Any) -> int:
        return 0

    def amdsmi_init(self, flags: Any = None) -> None:
        return None

    def amdsmi_get_gpu_frobnication(self, processor_handle: Any) -> None:
        return None


_FakeSurface.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED = 3  # type: ignore[attr-defined]
_FakeSurface.amdsmi_wrapper.AMDSMI_STATUS_MADE_UP = 77  # type: ignore[attr-defined]


def test_self_check_catches_a_wrong_surface(api: RealApi) -> None:
    text = "\n".join(surface_problems(_FakeSurface(), api))
    for expected in (
        "function amdsmi_get_temp_metric: parameters",  # handle vs processor_handle
        "function amdsmi_init: parameters",  # flags vs flag, wrong default
        "function amdsmi_get_gpu_frobnication: not in amdsmi_interface",
        "enum AmdSmiTemperatureType.EDGE: value 9 != real 0",
        "enum AmdSmiTemperatureType.BOGUS: no such member",
        "enum AmdSmiTemperatureType.VRAM: missing from the simulator",
        "exception AmdSmiLibraryException: bases",
        "exception AmdSmiLibraryException: __init__",
        "exception AmdSmiMadeUpException: not in amdsmi_exception",
        "exception AmdSmiRetryException: missing from the simulator",
        "constant AMDSMI_STATUS_NOT_SUPPORTED: 3 != real 2",
        "constant AMDSMI_STATUS_MADE_UP: not in amdsmi_wrapper",
    ):
        assert expected in text, expected


def test_self_check_catches_wrong_result_keys(api: RealApi) -> None:
    pcie = expected_shape(api.functions["amdsmi_get_pcie_info"], api)
    wrong = {
        "pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000, "slot_type": "OAM"},
        "pcie_metric": {"pcie_width": 16, "pcie_speed": 32000, "pcie_link_speed": 32},
    }
    text = "\n".join(shape_problems("amdsmi_get_pcie_info", wrong, pcie))
    assert "['pcie_static']: missing keys ['pcie_interface_version']" in text
    assert "['pcie_metric']: keys the real function never builds ['pcie_link_speed']" in text
    procs = expected_shape(api.functions["amdsmi_get_gpu_process_list"], api)
    bad_proc = [{"name": "x", "pid": 1, "mem": 0, "engine_usage": {"gfx": 0}}]
    text = "\n".join(shape_problems("amdsmi_get_gpu_process_list", bad_proc, procs))
    assert "missing keys ['cu_occupancy', 'memory_usage']" in text
    assert "['engine_usage']: missing keys ['enc']" in text


def test_handles_are_real_unhashable_c_void_p(face: SimulatedAmdSmi) -> None:
    first = face.amdsmi_get_processor_handles()
    again = face.amdsmi_get_processor_handles()
    assert all(type(h) is ctypes.c_void_p for h in first)
    assert first[0] != again[0] and first[0].value == again[0].value
    with pytest.raises(TypeError):
        hash(first[0])
