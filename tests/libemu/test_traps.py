"""The traps of amdsmi.md §0, reproduced by the REAL package over the emulated library — and
the stand-in springs each one the same way."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Faces


def both(faces: Faces) -> list[tuple[Any, Any]]:
    """(face, handle of GPU 2) for the stand-in and for the real package."""
    return [(a, a.amdsmi_get_processor_handles()[2]) for a in (faces.sim, faces.real)]


def test_power_info_leaks_unconverted_sentinels(faces: Faces) -> None:
    faces.node.inject(
        2,
        "unsupported_fields",
        fields=[
            "amdsmi_get_power_info.current_socket_power",
            "amdsmi_get_power_info.socket_power",
            "amdsmi_get_gpu_metrics_info.current_socket_power",
        ],
    )
    for a, h in both(faces):
        power = a.amdsmi_get_power_info(h)
        assert power["current_socket_power"] == 4294967295  # only 0xFFFF is converted
        assert power["socket_power"] == 18446744073709551615
        assert power["average_socket_power"] == "N/A"  # a u16 copy: 0xFFFF → "N/A"
        assert a.amdsmi_get_gpu_metrics_info(h)["current_socket_power"] == "N/A"


def test_throttle_status_is_a_bool_and_the_bitmask_is_lost(faces: Faces) -> None:
    for a, h in both(faces):
        metrics = a.amdsmi_get_gpu_metrics_info(h)
        assert metrics["throttle_status"] is False
        assert metrics["indep_throttle_status"] == "N/A"
        clock = a.amdsmi_get_clock_info(h, a.AmdSmiClkType.GFX)
        assert clock["clk_locked"] is False
        assert isinstance(a.amdsmi_get_violation_status(h)["active_ppt_pwr"], bool)


def test_the_event_reader_raises_no_data_when_nothing_happened(faces: Faces) -> None:
    for a, h in both(faces):
        kinds = [a.AmdSmiEvtNotificationType.THERMAL_THROTTLE]
        with a.AmdSmiEventReader(h, kinds) as reader:
            with pytest.raises(a.AmdSmiLibraryException) as info:
                reader.read(1000)
            assert info.value.get_error_code() == 40
            assert info.value.get_error_info(detailed=False) == "AMDSMI_STATUS_NO_DATA"


def test_handles_are_unhashable_and_equal_only_by_identity(faces: Faces) -> None:
    for a, _ in both(faces):
        first = a.amdsmi_get_processor_handles()
        again = a.amdsmi_get_processor_handles()
        assert type(first[0]).__name__ == "c_void_p"
        with pytest.raises(TypeError, match="unhashable"):
            {first[0]: 0}
        assert first[0] != again[0] and first[0].value == again[0].value
        assert len({h.value for h in first}) == 8 and all(h.value for h in first)


def test_plain_ints_for_enums_or_handles_are_rejected(faces: Faces) -> None:
    for a, h in both(faces):
        with pytest.raises(a.AmdSmiParameterException) as info:
            a.amdsmi_get_temp_metric(h, 1, 0)
        assert info.value.err_code is None
        with pytest.raises(a.AmdSmiParameterException):
            a.amdsmi_get_gpu_memory_usage(h, 0)
        with pytest.raises(a.AmdSmiParameterException):
            a.amdsmi_get_power_info(h.value)
        with pytest.raises(a.AmdSmiParameterException):
            a.amdsmi_init(2)
        junction = a.AmdSmiTemperatureType.JUNCTION  # an alias of HOTSPOT
        assert junction.name == "HOTSPOT"
        assert a.amdsmi_get_temp_metric(h, junction, a.AmdSmiTemperatureMetric.CURRENT) > 0


def test_single_hbm_stacks_raise_instead_of_reading_na(faces: Faces) -> None:
    for a, h in both(faces):
        with pytest.raises(a.AmdSmiLibraryException) as info:
            a.amdsmi_get_temp_metric(
                h, a.AmdSmiTemperatureType.HBM_0, a.AmdSmiTemperatureMetric.CURRENT
            )
        assert info.value.get_error_code() == 2
        assert a.amdsmi_get_gpu_metrics_info(h)["temperature_hbm"] == ["N/A"] * 4


def test_reserved_pages_raise_type_error_once_a_page_is_reserved(faces: Faces) -> None:
    faces.node.inject(2, "ecc_uncorrectable")
    for a, h in both(faces):
        assert len(a.amdsmi_get_gpu_bad_page_info(h)) == 1  # this one works
        with pytest.raises(TypeError, match="non-int of type 'c_uint'"):
            a.amdsmi_get_gpu_memory_reserved_pages(h)


def test_retry_and_timeout_have_their_own_exception_classes(faces: Faces) -> None:
    faces.node.inject(2, "unsupported_fields", status="RETRY", calls=["amdsmi_get_power_info"])
    faces.node.inject(2, "unsupported_fields", status="TIMEOUT", calls=["amdsmi_get_pcie_info"])
    for a, h in both(faces):
        with pytest.raises(a.AmdSmiRetryException):
            a.amdsmi_get_power_info(h)
        with pytest.raises(a.AmdSmiTimeoutException):
            a.amdsmi_get_pcie_info(h)
        entries, _cursor, data, status = a.amdsmi_get_gpu_cper_entries(h, 0b111)
        assert (entries, data, status) == ({}, [], 0)


def test_xgmi_error_status_is_inval_on_gfx950_and_the_fault_counts_as_xgmi_wafl(
    faces: Faces,
) -> None:
    faces.node.inject(2, "xgmi_link_down", link=0)
    for a, h in both(faces):
        with pytest.raises(a.AmdSmiLibraryException) as raised:
            a.amdsmi_gpu_xgmi_error_status(h)
        assert raised.value.get_error_code() == 1  # AMDSMI_STATUS_INVAL (sysfs EINVAL)
        wafl = a.amdsmi_get_gpu_ecc_count(h, a.AmdSmiGpuBlock.XGMI_WAFL)
        assert wafl == {"correctable_count": 4, "uncorrectable_count": 1, "deferred_count": 0}


def test_xgmi_error_status_is_a_plain_int(faces: Faces) -> None:
    faces.node.xgmi_error_status_readable = True  # a DF 3.6 part (MI2xx): the legacy path
    faces.node.inject(2, "xgmi_link_down", link=0)
    for a, h in both(faces):
        status = a.amdsmi_gpu_xgmi_error_status(h)
        assert type(status) is int and status == 1
        assert a.amdsmi_get_gpu_xgmi_link_status(h)["status"].count("D") == 2  # + its own port
