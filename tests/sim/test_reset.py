"""amdsmi_reset_gpu resets the WHOLE hive: counters zero, processes die, faults sorted out."""

from __future__ import annotations

from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import KilledProcess, SimNode, SimulatedAmdSmi, build_node


@pytest.fixture
def setup() -> tuple[FakeClock, SimNode, SimulatedAmdSmi, list[Any]]:
    clock = FakeClock()
    node = build_node("MI300X", seed=2, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    node.set_load(None, 0.7)
    return clock, node, amdsmi, amdsmi.amdsmi_get_processor_handles()


def test_reset_of_one_gpu_resets_the_whole_hive_once(
    setup: tuple[FakeClock, SimNode, SimulatedAmdSmi, list[Any]],
) -> None:
    clock, node, a, h = setup
    killed_by_callback: list[int] = []
    heard: list[KilledProcess] = []
    node.add_kill_listener(heard.append)
    for gpu in range(8):
        node.add_process(
            gpu, 9000 + gpu, f"vllm-{gpu}", 150 << 30, on_kill=killed_by_callback.append
        )
    node.add_process(7, 9100, "other-tenant", 1 << 30)  # any /dev/kfd holder dies too
    node.inject(2, "ecc_ce_storm", rate_per_s=10)
    node.inject(3, "ecc_uncorrectable")
    node.inject(5, "xgmi_link_down", link=1)
    node.inject(6, "pcie_replay_storm")
    node.inject(4, "pcie_downgrade", persistent=True)
    clock.advance(60)
    assert a.amdsmi_get_gpu_total_ecc_count(h[2])["correctable_count"] == 600
    assert len(a.amdsmi_get_gpu_compute_process_info()) == 9
    hive = {a.amdsmi_get_xgmi_info(x)["xgmi_hive_id"] for x in h}
    assert len(hive) == 1

    a.amdsmi_reset_gpu(h[0])  # GPU 0 has no fault of its own: still the hive resets

    assert node.reset_count() == 1 and node.reset_count(hive.pop()) == 1
    assert node.resets[0].gpus == tuple(range(8))
    assert sorted(killed_by_callback) == [9000 + g for g in range(8)]
    assert sorted(k.pid for k in heard) == [*range(9000, 9008), 9100]
    assert a.amdsmi_get_gpu_compute_process_info() == []
    assert all(a.amdsmi_get_gpu_process_list(x) == [] for x in h)
    for x in h:
        ecc = a.amdsmi_get_gpu_total_ecc_count(x)
        assert ecc == {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}
        metric = a.amdsmi_get_pcie_info(x)["pcie_metric"]
        assert metric["pcie_replay_count"] == metric["pcie_nak_sent_count"] == 0
        assert a.amdsmi_get_gpu_ecc_count(x, a.AmdSmiGpuBlock.XGMI_WAFL)["correctable_count"] == 0
        assert a.amdsmi_get_gpu_xgmi_link_status(x)["status"].count("U") == 7  # + its own port
        assert a.amdsmi_get_gpu_activity(x)["gfx_activity"] == 0  # the workloads died
    # the persistent fault came back; the retired page survives, no longer pending
    assert a.amdsmi_get_pcie_info(h[4])["pcie_metric"]["pcie_width"] == 8
    pages = a.amdsmi_get_gpu_bad_page_info(h[3])
    assert len(pages) == 1 and pages[0]["status"] == a.AmdSmiMemoryPageStatus.RESERVED
    clock.advance(60)  # transient storms stay gone
    assert a.amdsmi_get_gpu_total_ecc_count(h[2])["correctable_count"] == 0
    assert a.amdsmi_get_gpu_pci_replay_counter(h[6]) == 0


def test_persistent_uncorrectable_error_returns_after_every_reset(
    setup: tuple[FakeClock, SimNode, SimulatedAmdSmi, list[Any]],
) -> None:
    clock, node, a, h = setup
    node.inject(3, "ecc_uncorrectable", persistent=True)
    for expected_resets in (1, 2, 3):
        clock.advance(30)
        a.amdsmi_reset_gpu(h[3])
        assert node.reset_count() == expected_resets
        assert a.amdsmi_get_gpu_ecc_count(h[3], a.AmdSmiGpuBlock.UMC)["uncorrectable_count"] == 1
    assert len(a.amdsmi_get_gpu_bad_page_info(h[3])) == 4  # one page per occurrence


def test_reset_emits_pre_and_post_events_on_every_hive_member(
    setup: tuple[FakeClock, SimNode, SimulatedAmdSmi, list[Any]],
) -> None:
    _, _, a, h = setup
    kinds = [a.AmdSmiEvtNotificationType.GPU_PRE_RESET, a.AmdSmiEvtNotificationType.GPU_POST_RESET]
    readers = [a.AmdSmiEventReader(x, kinds) for x in h]
    with pytest.raises(a.AmdSmiLibraryException) as nothing:
        readers[0].read(100)
    assert nothing.value.get_error_code() == 40  # NO_DATA
    a.amdsmi_reset_gpu(h[1])
    events = readers[0].read(1000, num_elem=64)  # one read returns every GPU's events
    assert len(events) == 16
    assert sorted({e["processor_handle"].value for e in events}) == sorted(x.value for x in h)
    assert {e["event"] for e in events} == {"GPU_PRE_RESET", "GPU_POST_RESET"}
    assert all(e["message"] == "1" for e in events)
    with pytest.raises(a.AmdSmiLibraryException):
        readers[3].read(100)  # consumed
    for reader in readers:
        reader.stop()


def test_reset_needs_root_and_counts_nothing_when_refused() -> None:
    clock = FakeClock()
    node = build_node(seed=1, clock=clock, root=False)
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    h = a.amdsmi_get_processor_handles()
    node.add_process(0, 77, "vllm", 1 << 30)
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_reset_gpu(h[0])
    assert err.value.get_error_code() == a.amdsmi_wrapper.AMDSMI_STATUS_NO_PERM
    assert node.reset_count() == 0 and len(node.processes()) == 1
    with pytest.raises(a.AmdSmiLibraryException) as threshold:
        a.amdsmi_get_gpu_bad_page_threshold(h[0])  # debugfs needs root too
    assert threshold.value.get_error_code() == a.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED


def test_hive_is_briefly_busy_after_a_reset_when_configured() -> None:
    clock = FakeClock()
    node = build_node(seed=1, clock=clock, reset_unavailable_s=5.0)
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    h = a.amdsmi_get_processor_handles()
    a.amdsmi_reset_gpu(h[0])
    with pytest.raises(a.AmdSmiLibraryException) as busy:
        a.amdsmi_get_gpu_activity(h[7])
    assert busy.value.get_error_code() == a.amdsmi_wrapper.AMDSMI_STATUS_BUSY
    assert len(a.amdsmi_get_processor_handles()) == 8  # still enumerated
    clock.advance(5)
    assert a.amdsmi_get_gpu_activity(h[7])["gfx_activity"] == 0


def test_reset_releases_a_transient_hang() -> None:
    clock = FakeClock()
    node = build_node(seed=1, clock=clock)
    fault = node.inject(2, "hung_call", function="amdsmi_get_power_info")
    hang = node.hang_for(2, "amdsmi_get_power_info")
    assert hang is not None and hang.id == fault
    node.reset_hive(0)
    assert hang.release.is_set() and node.hang_for(2, "amdsmi_get_power_info") is None
