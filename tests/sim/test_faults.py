"""Each fault changes the right raw readings (or makes them go missing) and nothing else.

A faulted node is diffed against a clean twin (same seed, same fake time): the set of changed
paths must stay inside the fault's footprint, and the key readings must show the fault.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import RawLibrary, SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.hardware import BDF_BUSES
from fleetd.sim.raw import SmiStatusError

from .snapshot import changed, snapshot

SETTLE = 60.0
AFTER = 120.0


def bdf(gpu: int) -> str:
    return f"0000:{BDF_BUSES[gpu]:02x}:00.0"


class Twin:
    """A clean node and a faulted node that share seed, load and clock."""

    def __init__(self, load: float = 0.6) -> None:
        self.clock = FakeClock()
        self.clean = build_node("MI355X", seed=11, clock=self.clock)
        self.faulty = build_node("MI355X", seed=11, clock=self.clock)
        self.a_clean = SimulatedAmdSmi(self.clean)
        self.a_faulty = SimulatedAmdSmi(self.faulty)
        for node, face in ((self.clean, self.a_clean), (self.faulty, self.a_faulty)):
            face.amdsmi_init()
            node.set_load(None, load)
        self.clock.advance(SETTLE)

    def diff(self, after: float = AFTER) -> tuple[set[str], dict[str, Any]]:
        self.clock.advance(after)
        after_snap = snapshot(self.a_faulty)
        return changed(snapshot(self.a_clean), after_snap), after_snap

    def handle(self, gpu: int) -> Any:
        return self.a_faulty.amdsmi_get_processor_handle_from_bdf(bdf(gpu))


def outside(paths: set[str], allowed: str) -> set[str]:
    pattern = re.compile(allowed)
    return {p for p in paths if not pattern.fullmatch(p)}


def test_thermal_runaway_heats_and_throttles_only_that_gpu() -> None:
    t = Twin(load=0.8)
    t.faulty.inject(1, "thermal_runaway", delta_c=45, hbm_delta_c=35)
    paths, snap = t.diff(180)
    g = re.escape(bdf(1))
    assert not outside(
        paths,
        rf"{g}/(amdsmi_get_temp_metric:(EDGE|HOTSPOT|VRAM|PLX):CURRENT"
        r"|amdsmi_get_gpu_metrics_info/(temperature_(hotspot|mem|vrsoc)|current_gfxclks/\d"
        r"|(socket_thm|hbm_thm|vr_thm)_residency_acc"
        r"|xcp_stats\.gfx_below_host_limit(_thm|_total)?_acc/0/\d)"
        r"|amdsmi_get_violation_status/.*|amdsmi_get_clock_info:SYS/clk)",
    )
    crit = snap[f"{bdf(1)}/amdsmi_get_temp_metric:HOTSPOT:CRITICAL"]
    assert snap[f"{bdf(1)}/amdsmi_get_temp_metric:HOTSPOT:CURRENT"] > crit
    assert snap[f"{bdf(1)}/amdsmi_get_violation_status/active_socket_thrm"] is True
    assert snap[f"{bdf(1)}/amdsmi_get_gpu_metrics_info/socket_thm_residency_acc"] > 0


def test_ce_storm_counts_correctable_errors_in_its_block() -> None:
    t = Twin()
    t.faulty.inject(2, "ecc_ce_storm", rate_per_s=20, block="UMC")
    paths, snap = t.diff()
    g = bdf(2)
    assert paths == {
        f"{g}/amdsmi_get_gpu_total_ecc_count/correctable_count",
        f"{g}/amdsmi_get_gpu_ecc_count:UMC/correctable_count",
        f"{g}/amdsmi_get_gpu_ecc_status:UMC",
    }
    assert snap[f"{g}/amdsmi_get_gpu_total_ecc_count/correctable_count"] == 2400
    assert snap[f"{g}/amdsmi_get_gpu_ecc_status:UMC"].name == "SING_C"


def test_uncorrectable_error_counts_and_retires_a_pending_page() -> None:
    t = Twin()
    t.faulty.inject(3, "ecc_uncorrectable")
    paths, snap = t.diff()
    g = re.escape(bdf(3))
    assert not outside(
        paths,
        rf"{g}/(amdsmi_get_gpu_total_ecc_count/uncorrectable_count"
        r"|amdsmi_get_gpu_ecc_count:UMC/uncorrectable_count|amdsmi_get_gpu_ecc_status:UMC"
        r"|amdsmi_get_gpu_bad_page_info/0/\w+|amdsmi_get_gpu_memory_reserved_pages)",
    )
    assert snap[f"{bdf(3)}/amdsmi_get_gpu_total_ecc_count/uncorrectable_count"] == 1
    assert snap[f"{bdf(3)}/amdsmi_get_gpu_bad_page_info/0/status"] == 1  # PENDING
    assert snap[f"{bdf(3)}/amdsmi_get_gpu_ecc_status:UMC"].name == "MULT_UC"


def test_deferred_errors_count_in_their_block() -> None:
    t = Twin()
    t.faulty.inject(4, "ecc_deferred", count=3)
    paths, snap = t.diff()
    g = bdf(4)
    assert paths == {
        f"{g}/amdsmi_get_gpu_total_ecc_count/deferred_count",
        f"{g}/amdsmi_get_gpu_ecc_count:UMC/deferred_count",
        f"{g}/amdsmi_get_gpu_ecc_status:UMC",
    }
    assert snap[f"{g}/amdsmi_get_gpu_ecc_count:UMC/deferred_count"] == 3


def test_bad_pages_retire_at_a_rate_up_to_the_count() -> None:
    t = Twin()
    t.faulty.inject(0, "bad_pages", rate_per_s=0.5, count=10)
    paths, snap = t.diff()
    g = re.escape(bdf(0))
    assert not outside(paths, rf"{g}/amdsmi_get_gpu_(bad_page_info/\d/\w+|memory_reserved_pages$)")
    pages = [k for k in snap if k.startswith(f"{bdf(0)}/amdsmi_get_gpu_bad_page_info/")]
    assert len(pages) == 10 * 4  # value, page_address, page_size, status


def test_bad_pages_stop_at_the_threshold() -> None:
    clock = FakeClock()
    node = build_node("MI300X", seed=3, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    h = amdsmi.amdsmi_get_processor_handles()[0]
    node.inject(0, "bad_pages", rate_per_s=1.0)
    threshold = amdsmi.amdsmi_get_gpu_bad_page_threshold(h)
    clock.advance(threshold / 2)
    assert len(amdsmi.amdsmi_get_gpu_bad_page_info(h)) == threshold // 2
    clock.advance(10 * threshold)
    pages = amdsmi.amdsmi_get_gpu_bad_page_info(h)
    assert len(pages) == threshold == 408
    assert len({p["page_address"] for p in pages}) == threshold
    assert all(p["page_size"] == 4096 and p["status"] == 0 for p in pages)


def test_pcie_downgrade_changes_link_width_and_speed() -> None:
    t = Twin()
    t.faulty.inject(4, "pcie_downgrade")
    paths, snap = t.diff()
    g = re.escape(bdf(4))
    assert not outside(
        paths,
        rf"{g}/(amdsmi_get_pcie_info/pcie_metric/pcie_(width|speed|bandwidth)"
        r"|amdsmi_get_gpu_metrics_info/pcie_(link_width|link_speed|bandwidth_inst|bandwidth_acc))",
    )
    metric = f"{bdf(4)}/amdsmi_get_pcie_info/pcie_metric"
    assert (snap[f"{metric}/pcie_width"], snap[f"{metric}/pcie_speed"]) == (8, 16000)
    assert snap[f"{bdf(4)}/amdsmi_get_pcie_info/pcie_static/max_pcie_width"] == 16
    assert snap[f"{bdf(4)}/amdsmi_get_gpu_metrics_info/pcie_link_speed"] == 160


def test_replay_storm_raises_the_link_error_counters() -> None:
    t = Twin()
    t.faulty.inject(7, "pcie_replay_storm", rate_per_s=500)
    paths, snap = t.diff()
    g = re.escape(bdf(7))
    assert not outside(
        paths,
        rf"{g}/(amdsmi_get_pcie_info/pcie_metric/pcie_(replay_count|l0_to_recovery_count"
        r"|replay_roll_over_count|nak_sent_count|nak_received_count"
        r"|lc_perf_other_end_recovery_count)|amdsmi_get_gpu_pci_replay_counter"
        r"|amdsmi_get_gpu_metrics_info/pcie_(l0_to_recov_count_acc|replay_count_acc"
        r"|replay_rover_count_acc|nak_sent_count_acc|nak_rcvd_count_acc"
        r"|lc_perf_other_end_recovery))",
    )
    assert snap[f"{bdf(7)}/amdsmi_get_gpu_pci_replay_counter"] == 60000
    assert snap[f"{bdf(7)}/amdsmi_get_pcie_info/pcie_metric/pcie_l0_to_recovery_count"] > 0


def test_xgmi_link_down_is_seen_on_both_ends() -> None:
    t = Twin()
    t.faulty.inject(5, "xgmi_link_down", link=2)
    peer = t.faulty.peers(5)[2]
    back = t.faulty.peers(peer).index(5)
    paths, snap = t.diff()
    ends = "|".join(re.escape(bdf(g)) for g in (5, peer))
    wafl = r"amdsmi_get_gpu_ecc_(count|status):XGMI_WAFL|amdsmi_get_gpu_total_ecc_count"
    assert not outside(
        paths,
        rf"({ends})/(amdsmi_get_gpu_xgmi_link_status/status/\d"
        rf"|({wafl})(/\w+)?"
        r"|amdsmi_get_link_metrics/links/\d/(read|write)"
        r"|amdsmi_get_gpu_metrics_info/(xgmi_link_status|xgmi_(read|write)_data_acc)/\d)",
    )
    # per port: port j of a GPU leads to GPU j (link 2 of GPU 5 is the one to GPU 2)
    assert peer == 2 and back == 4
    assert snap[f"{bdf(5)}/amdsmi_get_gpu_xgmi_link_status/status/{peer}"] == "D"
    assert snap[f"{bdf(peer)}/amdsmi_get_gpu_xgmi_link_status/status/5"] == "D"
    for end in (5, peer):  # gfx950 reports the fault as XGMI_WAFL RAS counts on both ends
        counts = f"{bdf(end)}/amdsmi_get_gpu_ecc_count:XGMI_WAFL"
        assert snap[f"{counts}/correctable_count"] == 4
        assert snap[f"{counts}/uncorrectable_count"] == 1
    assert snap[f"{bdf(5)}/amdsmi_gpu_xgmi_error_status"] == "EXC:1"  # INVAL: unreadable
    assert snap[f"{bdf(5)}/amdsmi_get_gpu_metrics_info/xgmi_link_status/2"] == 0


def test_xgmi_error_status_latches_where_it_is_readable() -> None:
    """The legacy path of DF 3.6 parts (MI2xx), which the simulator can be switched to."""
    t = Twin()
    t.faulty.xgmi_error_status_readable = True
    t.faulty.inject(5, "xgmi_link_down", link=2)
    t.clock.advance(AFTER)
    h = t.handle(5)
    assert t.a_faulty.amdsmi_gpu_xgmi_error_status(h) == 1
    t.a_faulty.amdsmi_reset_gpu_xgmi_error(h)
    assert t.a_faulty.amdsmi_gpu_xgmi_error_status(h) == 0


def test_power_excursion_pins_power_at_the_cap_and_throttles() -> None:
    t = Twin()
    t.faulty.inject(6, "power_excursion", demand_w=1600)
    paths, snap = t.diff()
    g = re.escape(bdf(6))
    assert not outside(
        paths,
        rf"{g}/(amdsmi_get_power_info/(socket_power|current_socket_power)"
        r"|amdsmi_get_energy_count/energy_accumulator"
        r"|amdsmi_get_temp_metric:(EDGE|HOTSPOT|VRAM|PLX):CURRENT"
        r"|amdsmi_get_clock_info:SYS/clk|amdsmi_get_violation_status/.*"
        r"|amdsmi_get_gpu_metrics_info/(current_socket_power|energy_accumulator"
        r"|temperature_(hotspot|mem|vrsoc)|current_gfxclks/\d|ppt_residency_acc"
        r"|xcp_stats\.gfx_below_host_limit(_ppt|_total)?_acc/0/\d))",
    )
    power = snap[f"{bdf(6)}/amdsmi_get_power_info/current_socket_power"]
    assert 1370 <= power <= 1400
    assert snap[f"{bdf(6)}/amdsmi_get_violation_status/active_ppt_pwr"] is True
    assert snap[f"{bdf(6)}/amdsmi_get_violation_status/per_ppt_pwr"] == 100
    gfx = snap[f"{bdf(6)}/amdsmi_get_clock_info:SYS/clk"]
    assert gfx < snap[f"{bdf(6)}/amdsmi_get_clock_info:SYS/max_clk"]


def test_unsupported_fields_surface_exactly_as_the_real_wrapper_shows_them() -> None:
    t = Twin()
    t.faulty.inject(
        2,
        "unsupported_fields",
        fields=[
            "amdsmi_get_power_info.current_socket_power",
            "amdsmi_get_power_info.socket_power",
            "amdsmi_get_gpu_metrics_info.temperature_hotspot",
            "amdsmi_get_pcie_info.pcie_metric.pcie_replay_count",
        ],
        calls=["amdsmi_get_temp_metric:VRAM"],
    )
    paths, snap = t.diff()
    g = bdf(2)
    vram = {f"{g}/amdsmi_get_temp_metric:VRAM:{m}" for m in ("CURRENT", "CRITICAL", "EMERGENCY")}
    assert (
        paths
        == {
            f"{g}/amdsmi_get_power_info/current_socket_power",
            f"{g}/amdsmi_get_power_info/socket_power",
            f"{g}/amdsmi_get_gpu_metrics_info/temperature_hotspot",
            f"{g}/amdsmi_get_pcie_info/pcie_metric/pcie_replay_count",
        }
        | vram
    )
    assert snap[f"{g}/amdsmi_get_power_info/current_socket_power"] == 4294967295  # leaks
    assert snap[f"{g}/amdsmi_get_power_info/socket_power"] == 18446744073709551615  # leaks
    assert snap[f"{g}/amdsmi_get_gpu_metrics_info/temperature_hotspot"] == "N/A"
    assert snap[f"{g}/amdsmi_get_pcie_info/pcie_metric/pcie_replay_count"] == "N/A"
    assert all(snap[p] == "EXC:2" for p in vram)


def test_unsupported_call_can_fail_with_other_statuses() -> None:
    t = Twin()
    t.faulty.inject(1, "unsupported_fields", calls=["amdsmi_get_gpu_activity"], status="RETRY")
    t.faulty.inject(1, "unsupported_fields", calls=["amdsmi_get_power_info"], status="NO_PERM")
    a, h = t.a_faulty, t.handle(1)
    with pytest.raises(a.AmdSmiRetryException) as retry:
        a.amdsmi_get_gpu_activity(h)
    assert retry.value.get_error_code() == 9
    with pytest.raises(a.AmdSmiLibraryException) as perm:
        a.amdsmi_get_power_info(h)
    assert perm.value.get_error_info(detailed=False) == "AMDSMI_STATUS_NO_PERM"


def test_gpu_off_bus_answers_as_real_amdsmi_and_leaves_sysfs(tmp_path: Path) -> None:
    t = Twin()
    sysfs = t.faulty.attach_sysfs(tmp_path)
    device = sysfs / "sys/bus/pci/devices" / bdf(6)
    assert device.is_dir() and (device / "vendor").read_text() == "0x1002\n"
    old = t.handle(6)
    t.faulty.inject(6, "gpu_off_bus")
    assert not device.exists()  # the kernel removed the PCI device
    paths, _ = t.diff()
    assert paths and all(p.startswith(bdf(6) + "/") for p in paths)
    a = t.a_faulty
    assert len(a.amdsmi_get_processor_handles()) == 8  # the device list is built at init
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_gpu_activity(old)
    assert err.value.get_error_code() == 2  # sysfs ENOENT → NOT_SUPPORTED, never NOT_FOUND
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_get_gpu_asic_info(old)
    assert err.value.get_error_code() == 6  # DRM_ERROR through the render node
    assert a.amdsmi_get_gpu_device_bdf(old) == bdf(6)  # from the init-time list
    a.amdsmi_shut_down()
    a.amdsmi_init()
    assert len(a.amdsmi_get_processor_handles()) == 7  # a fresh enumeration misses it
    with pytest.raises(a.AmdSmiLibraryException):
        a.amdsmi_get_processor_handle_from_bdf(bdf(6))
    t.faulty.clear_faults(6, "gpu_off_bus")
    assert device.is_dir()
    assert a.amdsmi_get_gpu_activity(old)["gfx_activity"] > 0
    a.amdsmi_shut_down()
    a.amdsmi_init()
    assert len(a.amdsmi_get_processor_handles()) == 8


def _node() -> tuple[FakeClock, SimNode, SimulatedAmdSmi]:
    clock = FakeClock()
    node = build_node(seed=5, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    return clock, node, amdsmi


def test_hung_call_blocks_until_cleared_without_blocking_other_gpus() -> None:
    _, node, a = _node()
    handles = a.amdsmi_get_processor_handles()
    node.inject(4, "hung_call", function="amdsmi_get_gpu_metrics_info")
    result: dict[str, Any] = {}

    def poll() -> None:
        result["metrics"] = a.amdsmi_get_gpu_metrics_info(handles[4])

    worker = threading.Thread(target=poll, daemon=True)
    worker.start()
    worker.join(0.2)
    assert worker.is_alive()  # still blocked
    started = time.monotonic()
    assert a.amdsmi_get_gpu_metrics_info(handles[3])["temperature_hotspot"] > 0
    assert a.amdsmi_get_gpu_activity(handles[4])["gfx_activity"] == 0  # other calls work
    assert time.monotonic() - started < 0.2
    node.clear_faults(4, "hung_call")
    worker.join(2)
    assert not worker.is_alive() and "metrics" in result


def test_hung_call_with_a_duration_blocks_for_that_real_time_each_call() -> None:
    _, node, a = _node()
    h = a.amdsmi_get_processor_handles()[2]
    node.inject(2, "hung_call", function="amdsmi_get_power_info", duration_s=0.15)
    started = time.monotonic()
    a.amdsmi_get_power_info(h)
    assert time.monotonic() - started >= 0.15
    assert node.release_hangs(2) == 1
    started = time.monotonic()
    a.amdsmi_get_power_info(h)
    assert time.monotonic() - started < 0.1


def test_fault_lookups_follow_every_change_of_the_fault_list() -> None:
    """Per-call answers are looked up once per state of the fault list (the simulator's
    speed): a fault injected or cleared after a call was answered changes the next call."""
    clock = FakeClock()
    node = build_node("MI355X", seed=3, clock=clock)
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    h = a.amdsmi_get_processor_handles()[4]
    assert a.amdsmi_get_power_info(h)["socket_power"] != 18446744073709551615
    assert a.amdsmi_get_gpu_xgmi_link_status(h)["status"][0] == "U"
    fields = node.inject(4, "unsupported_fields", fields=["amdsmi_get_power_info.socket_power"])
    calls = node.inject(4, "unsupported_fields", calls=["amdsmi_get_gpu_activity"])
    link = node.inject(4, "xgmi_link_down", link=0)
    assert a.amdsmi_get_power_info(h)["socket_power"] == 18446744073709551615
    with pytest.raises(a.AmdSmiLibraryException):
        a.amdsmi_get_gpu_activity(h)
    assert a.amdsmi_get_gpu_xgmi_link_status(h)["status"][0] == "D"
    for fault in (fields, calls, link):
        node.clear(fault)
    assert a.amdsmi_get_power_info(h)["socket_power"] != 18446744073709551615
    assert a.amdsmi_get_gpu_activity(h)["gfx_activity"] == 0
    assert a.amdsmi_get_gpu_xgmi_link_status(h)["status"][0] == "U"


def test_an_unknown_handle_is_not_found_and_a_null_one_invalid() -> None:
    lib = RawLibrary(build_node("MI300X", seed=1, clock=FakeClock()))
    lib.amdsmi_init(0)
    with pytest.raises(SmiStatusError) as unknown:
        lib.amdsmi_get_gpu_activity(0xDEAD)
    assert unknown.value.status == 31  # AMDSMI_STATUS_NOT_FOUND
    with pytest.raises(SmiStatusError) as null:
        lib.amdsmi_get_gpu_activity(0)
    assert null.value.status == 1  # AMDSMI_STATUS_INVAL
