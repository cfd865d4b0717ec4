"""The face behaves like the real package where a backend can tell: errors, types, traps."""

from __future__ import annotations

from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node


def make(model: str = "MI355X", **kw: Any) -> tuple[FakeClock, SimNode, SimulatedAmdSmi]:
    clock = FakeClock()
    node = build_node(model, seed=4, clock=clock, **kw)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    return clock, node, amdsmi


def test_calls_before_init_fail_not_init_with_the_real_text() -> None:
    node = build_node(seed=0, clock=FakeClock())
    a = SimulatedAmdSmi(node)
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_processor_handles()
    assert err.value.get_error_code() == 32
    assert str(err.value) == "Error code:\n\t32 | AMDSMI_STATUS_NOT_INIT - Device not initialized"
    a.amdsmi_init()
    handles = a.amdsmi_get_processor_handles()
    a.amdsmi_shut_down()
    with pytest.raises(a.AmdSmiLibraryException):
        a.amdsmi_get_gpu_activity(handles[0])


def test_plain_ints_are_rejected_where_enums_are_expected() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()[0]
    with pytest.raises(a.AmdSmiParameterException) as err:
        a.amdsmi_get_temp_metric(h, 1, a.AmdSmiTemperatureMetric.CURRENT)
    assert err.value.err_code is None
    assert "Expected type: <enum 'AmdSmiTemperatureType'>" in str(err.value)
    with pytest.raises(a.AmdSmiParameterException):
        a.amdsmi_init(2)
    with pytest.raises(a.AmdSmiParameterException):
        a.amdsmi_get_clock_info(h, "GFX")
    with pytest.raises(a.AmdSmiParameterException):
        a.amdsmi_get_gpu_activity(h.value)  # an int is not a handle
    with pytest.raises(a.AmdSmiParameterException):
        a.AmdSmiEventReader(h, [2])


def test_enum_aliases_behave_like_the_real_ones() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()[0]
    temp, metric = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
    assert temp.JUNCTION is temp.HOTSPOT and a.AmdSmiClkType.GFX.name == "SYS"
    assert a.AmdSmiEvtNotificationType.PAGE_FAULT_START == 8  # the real wrapper's bug
    junction = a.amdsmi_get_temp_metric(h, temp.JUNCTION, metric.CURRENT)
    assert junction == a.amdsmi_get_temp_metric(h, temp.HOTSPOT, metric.CURRENT)


def test_bdf_lookup_accepts_both_forms_and_rejects_bad_text() -> None:
    _, _, a = make()
    long_form = a.amdsmi_get_processor_handle_from_bdf("0000:65:00.0")
    short_form = a.amdsmi_get_processor_handle_from_bdf("65:00.0")
    assert long_form.value == short_form.value
    assert a.amdsmi_get_gpu_device_bdf(long_form) == "0000:65:00.0"
    with pytest.raises(a.AmdSmiBdfFormatException) as err:
        a.amdsmi_get_processor_handle_from_bdf("65:00")
    assert str(err.value).startswith("Wrong BDF format: None.")
    with pytest.raises(a.AmdSmiLibraryException) as missing:
        a.amdsmi_get_processor_handle_from_bdf("0000:66:00.0")
    assert missing.value.get_error_code() == a.amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND


def test_mi300x_has_no_edge_sensor_and_reports_microwatt_caps() -> None:
    _, _, a = make("MI300X")
    h = a.amdsmi_get_processor_handles()[0]
    temp, metric = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_temp_metric(h, temp.EDGE, metric.CURRENT)
    assert err.value.get_error_code() == 2
    assert (
        str(err.value) == "Error code:\n\t2 | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"
    )
    assert a.amdsmi_get_power_cap_info(h)["power_cap"] == 750_000_000
    asic = a.amdsmi_get_gpu_asic_info(h)
    assert asic["market_name"] == "AMD Instinct MI300X"
    assert asic["target_graphics_version"] == "gfx942"
    assert asic["vendor_id"] == "0x1002" and asic["device_id"] == "0x74a1"
    assert asic["num_compute_units"] == 304
    assert a.amdsmi_get_gpu_vram_info(h)["vram_size"] == 192 * 1024
    assert a.amdsmi_get_gpu_vram_info(h)["vram_type"] == a.AmdSmiVramType.HBM3
    assert a.amdsmi_get_gpu_memory_total(h, a.AmdSmiMemoryType.VRAM) == 192 << 30
    for sensor in (temp.HBM_0, temp.GPUBOARD_NODE_RETIMER_X):
        with pytest.raises(a.AmdSmiLibraryException):
            a.amdsmi_get_temp_metric(h, sensor, metric.CURRENT)


def test_mi355x_identity_and_limits() -> None:
    _, _, a = make("MI355X")
    h = a.amdsmi_get_processor_handles()[0]
    temp, metric = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
    assert a.amdsmi_get_temp_metric(h, temp.EDGE, metric.CURRENT) > 20
    assert a.amdsmi_get_power_cap_info(h)["power_cap"] == 1_400_000_000
    assert a.amdsmi_get_gpu_asic_info(h)["target_graphics_version"] == "gfx950"
    vram = a.amdsmi_get_gpu_vram_info(h)
    assert vram["vram_size"] == 288 * 1024
    with pytest.raises(ValueError):
        a.AmdSmiVramType(vram["vram_type"])  # HBM3E (5) is not in the 7.0.2 enum: a trap
    crit = a.amdsmi_get_temp_metric(h, temp.HOTSPOT, metric.CRITICAL)
    emerg = a.amdsmi_get_temp_metric(h, temp.HOTSPOT, metric.EMERGENCY)
    assert crit < emerg
    with pytest.raises(a.AmdSmiLibraryException):
        a.amdsmi_get_temp_metric(h, temp.HOTSPOT, metric.LOWEST)


def test_traps_of_the_real_wrapper_are_reproduced() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()[0]
    metrics = a.amdsmi_get_gpu_metrics_info(h)
    assert metrics["throttle_status"] is False  # bitmask collapsed to bool, and 0 on MI3xx
    assert metrics["indep_throttle_status"] == "N/A"
    assert metrics["temperature_edge"] == "N/A"
    assert metrics["temperature_hbm"] == ["N/A"] * 4
    assert metrics["xgmi_link_status"] == [0] + [1] * 7  # per port: GPU 0's own port reads 0
    assert metrics["xcp_stats.gfx_busy_inst"][1] == ["N/A"] * 8  # only one partition
    power = a.amdsmi_get_power_info(h)
    assert power["average_socket_power"] == "N/A" and isinstance(power["socket_power"], int)
    assert a.amdsmi_get_gpu_activity(h)["mm_activity"] == "N/A"
    energy = a.amdsmi_get_energy_count(h)
    assert energy["counter_resolution"] == pytest.approx(15.259, abs=1e-5)
    assert energy["counter_resolution"] != 15.259  # a C float, as ctypes returns it
    with pytest.raises(a.AmdSmiLibraryException) as raised:  # gfx950: sysfs EINVAL
        a.amdsmi_gpu_xgmi_error_status(h)
    assert raised.value.err_code == 1  # AMDSMI_STATUS_INVAL, as amd-smi's "XGMI_ERR: N/A"
    status = a.amdsmi_get_gpu_ecc_status(h, a.AmdSmiGpuBlock.UMC)
    assert status is a.AmdSmiRasErrState.ENABLED
    with pytest.raises(a.AmdSmiLibraryException):
        a.amdsmi_get_gpu_ecc_count(h, a.AmdSmiGpuBlock.ATHUB)  # not RAS-enabled


def test_topology_is_one_fully_connected_xgmi_hive() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()
    bdfs = [a.amdsmi_get_gpu_device_bdf(x) for x in h]
    assert bdfs[0] == "0000:05:00.0" and len(set(bdfs)) == 8
    assert len({a.amdsmi_get_gpu_device_uuid(x) for x in h}) == 8
    assert len({a.amdsmi_get_gpu_asic_info(x)["asic_serial"] for x in h}) == 8
    assert len({a.amdsmi_get_gpu_board_info(x)["product_serial"] for x in h}) == 8
    assert len({a.amdsmi_get_gpu_kfd_info(x)["kfd_id"] for x in h}) == 8
    assert [a.amdsmi_get_gpu_enumeration_info(x)["hip_id"] for x in h] == list(range(8))
    hives = {a.amdsmi_get_xgmi_info(x)["xgmi_hive_id"] for x in h}
    assert len(hives) == 1 and hives.pop() != 0
    for i, x in enumerate(h):
        links = a.amdsmi_get_link_metrics(x)
        peers = [link["bdf"] for link in links["links"][: links["num_links"]]]
        assert sorted(peers) == sorted(b for j, b in enumerate(bdfs) if j != i)
        # per port, the GPU count of them: port j leads to GPU j, the port to itself reads D
        ports = ["D" if j == i else "U" for j in range(8)]
        assert a.amdsmi_get_gpu_xgmi_link_status(x) == {"status": ports, "total_links": 8}
        for j, y in enumerate(h):
            kind = a.amdsmi_topo_get_link_type(x, y)
            weight = a.amdsmi_topo_get_link_weight(x, y)
            if i == j:
                assert (kind["hops"], weight) == (0, 0)
            else:
                assert kind == {"hops": 1, "type": a.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI}
                assert weight == 15


def test_processes_are_listed_per_gpu_and_per_node() -> None:
    clock, node, a = make()
    h = a.amdsmi_get_processor_handles()
    node.set_load(1, 0.5)
    node.add_process(1, 4321, "vllm", 100 << 30)
    node.add_process(2, 4321, "vllm", 50 << 30)
    clock.advance(10)
    listed = a.amdsmi_get_gpu_process_list(h[1])
    assert [(p["pid"], p["name"], p["memory_usage"]["vram_mem"]) for p in listed] == [
        (4321, "vllm", 100 << 30)
    ]
    assert listed[0]["engine_usage"]["gfx"] == 5 * 10**9  # busy ns at 50 % for 10 s
    kfd = a.amdsmi_get_gpu_compute_process_info()
    assert kfd == [a.amdsmi_get_gpu_compute_process_info_by_pid(4321)]
    assert kfd[0]["vram_usage"] == 150 * 1024  # MB
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_gpu_compute_process_info_by_pid(1)
    assert err.value.get_error_code() == 31
    with pytest.raises(a.AmdSmiParameterException):
        a.amdsmi_get_gpu_compute_process_info_by_pid("4321")
    assert node.remove_process(4321) and a.amdsmi_get_gpu_compute_process_info() == []


def test_thermal_throttle_event_reaches_an_event_reader() -> None:
    clock, node, a = make()
    h = a.amdsmi_get_processor_handles()
    kinds = [a.AmdSmiEvtNotificationType.THERMAL_THROTTLE]
    with a.AmdSmiEventReader(h[1], kinds) as reader:
        node.set_load(None, 0.9)
        node.inject(1, "thermal_runaway", delta_c=60)
        clock.advance(300)
        events = reader.read(50)
        assert events and events[0]["event"] == "THERMAL_THROTTLE"
        assert events[0]["processor_handle"].value == h[1].value
        assert ":" in events[0]["message"]
        with pytest.raises(a.AmdSmiLibraryException):
            reader.read(50)


def test_cper_records_follow_ecc_faults_with_cursors_and_severity_filter() -> None:
    clock, node, a = make()
    h = a.amdsmi_get_processor_handles()[3]
    assert a.amdsmi_get_gpu_cper_entries(h, 0b111) == ({}, 0, [], 0)
    node.inject(3, "ecc_uncorrectable", fatal=True)
    node.inject(3, "ecc_deferred", count=2)
    node.inject(3, "ecc_ce_storm", rate_per_s=50)
    clock.advance(50)  # 2500 CEs → 25 corrected records
    entries, cursor, data, status = a.amdsmi_get_gpu_cper_entries(h, 0b111)
    assert (len(entries), cursor, status) == (20, 20, a.amdsmi_wrapper.AMDSMI_STATUS_MORE_DATA)
    assert entries[0]["error_severity"] == "fatal" and entries[0]["notify_type"] == "MCE"
    assert entries[1]["error_severity"] == "non_fatal_uncorrected"
    assert entries[2]["error_severity"] == "non_fatal_corrected"
    assert entries[2]["notify_type"] == "CMC"
    assert entries[0]["signature"] == b"CPER" and entries[0]["signature_end"] == "0xffffffff"
    assert entries[0]["timestamp"] == "2026/01/01 00:00:00"
    assert data[0]["size"] == entries[0]["record_length"] == len(data[0]["bytes"])
    assert data[0]["bytes"][:4] == list(b"CPER") and min(data[0]["bytes"]) < 0  # c_byte
    rest, cursor2, _, status2 = a.amdsmi_get_gpu_cper_entries(h, 0b111, cursor=cursor)
    assert (len(rest), cursor2, status2) == (7, 27, 0)
    fatal_only, _, _, _ = a.amdsmi_get_gpu_cper_entries(h, 1 << 1)
    assert [e["error_severity"] for e in fatal_only.values()] == ["fatal"]
    small, _, _, status3 = a.amdsmi_get_gpu_cper_entries(h, 0b111, buffer_size=700)
    assert len(small) == 2 and status3 == a.amdsmi_wrapper.AMDSMI_STATUS_MORE_DATA


def test_cper_needs_root() -> None:
    _, _, a = make(root=False)
    h = a.amdsmi_get_processor_handles()[0]
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_gpu_cper_entries(h, 0b111)
    assert err.value.get_error_code() == a.amdsmi_wrapper.AMDSMI_STATUS_NO_PERM


def test_link_topology_nearest_lists_the_hive_as_raw_pointers() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()
    xgmi = a.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI
    nearest = a.amdsmi_get_link_topology_nearest(h[0], xgmi)["processor_list"]
    assert nearest == [x.value for x in h[1:]] and all(type(p) is int for p in nearest)
    wrapped = a.amdsmi_wrapper.amdsmi_processor_handle(nearest[0])
    assert a.amdsmi_get_gpu_device_bdf(wrapped) == a.amdsmi_get_gpu_device_bdf(h[1])


def test_partition_numa_and_p2p_describe_an_spx_nps1_two_socket_node() -> None:
    _, _, a = make()
    h = a.amdsmi_get_processor_handles()
    assert a.amdsmi_get_gpu_compute_partition(h[0]) == "SPX"
    assert a.amdsmi_get_gpu_memory_partition(h[0]) == "NPS1"
    assert [a.amdsmi_topo_get_numa_node_number(x) for x in h] == [0] * 4 + [1] * 4
    assert a.amdsmi_get_gpu_topo_numa_affinity(h[5]) == 1
    assert a.amdsmi_is_P2P_accessible(h[0], h[7]) is True
    assert a.amdsmi_get_gpu_metrics_header_info(h[0])["content_revision"] == 8
