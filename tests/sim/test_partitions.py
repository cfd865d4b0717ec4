"""Partitioned nodes through the stand-in: handles, BDFs, UUIDs, board calls on partition 0."""

from __future__ import annotations

import pytest

from fleetd.clock import FakeClock
from fleetd.errors import ConfigError
from fleetd.sim import SimulatedAmdSmi, build_node, parse_scenario
from fleetd.sim.scenario import start_scenario


def _face(model: str, compute: str, memory: str = "NPS1") -> SimulatedAmdSmi:
    node = build_node(
        model, seed=3, clock=FakeClock(), compute_partition=compute, memory_partition=memory
    )
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    return amdsmi


@pytest.mark.parametrize("model", ["MI300X", "MI355X"])
@pytest.mark.parametrize(
    ("compute", "memory", "count"),
    [("SPX", "NPS1", 8), ("DPX", "NPS1", 16), ("QPX", "NPS4", 32), ("CPX", "NPS1", 64)],
)
def test_one_handle_per_partition_with_its_own_bdf_uuid_and_kfd_partition(
    model: str, compute: str, memory: str, count: int
) -> None:
    a = _face(model, compute, memory)
    handles = a.amdsmi_get_processor_handles()
    assert len(handles) == count
    bdfs = [a.amdsmi_get_gpu_device_bdf(h) for h in handles]
    uuids = [a.amdsmi_get_gpu_device_uuid(h) for h in handles]
    assert len(set(bdfs)) == len(set(uuids)) == count
    per_gpu = count // 8
    for i, h in enumerate(handles):
        assert bdfs[i].endswith(f".{i % per_gpu}")  # function digit = partition id
        assert a.amdsmi_get_gpu_kfd_info(h)["current_partition_id"] == i % per_gpu
        assert a.amdsmi_get_gpu_compute_partition(h) == compute
        assert a.amdsmi_get_gpu_memory_partition(h) == memory
        assert a.amdsmi_get_processor_handle_from_bdf(bdfs[i]).value == h.value
    serials = {a.amdsmi_get_gpu_asic_info(h)["asic_serial"] for h in handles}
    assert len(serials) == 8  # partitions share their physical GPU's serial


def test_board_level_calls_answer_not_supported_on_secondary_partitions() -> None:
    a = _face("MI300X", "CPX")
    primary, secondary = a.amdsmi_get_processor_handles()[:2]
    assert a.amdsmi_get_power_info(primary)["current_socket_power"] > 0
    assert a.amdsmi_get_gpu_metrics_info(primary)["num_partition"] == 8
    for call in (
        a.amdsmi_get_power_info,
        a.amdsmi_get_pcie_info,
        a.amdsmi_get_gpu_metrics_info,
        a.amdsmi_get_gpu_total_ecc_count,
    ):
        with pytest.raises(a.AmdSmiLibraryException) as err:
            call(secondary)
        assert err.value.get_error_code() == 2  # NOT_SUPPORTED, as the real library answers
    assert set(a.amdsmi_get_gpu_activity(secondary)) >= {"gfx_activity"}


def test_invalid_combinations_are_refused() -> None:
    with pytest.raises(ValueError, match="NPS4 needs QPX or CPX"):
        build_node("MI300X", clock=FakeClock(), compute_partition="SPX", memory_partition="NPS4")


def test_an_invalid_scenario_partition_names_file_and_line() -> None:
    text = "model: MI300X\npartition:\n  compute: DPX\n  memory: NPS4\n"
    with pytest.raises(ConfigError) as err:
        parse_scenario(text, "bad.yaml")
    assert "bad.yaml:" in str(err.value) and "NPS4 needs QPX or CPX" in str(err.value)


def test_set_calls_re_partition_and_the_handles_change_at_the_next_init() -> None:
    a = _face("MI300X", "SPX")
    h = a.amdsmi_get_processor_handles()[0]
    a.amdsmi_set_gpu_compute_partition(h, a.AmdSmiComputePartitionType.CPX)
    with pytest.raises(a.AmdSmiParameterException):
        a.amdsmi_set_gpu_memory_partition(h, 4)  # plain ints are not the enum
    a.amdsmi_set_gpu_memory_partition(h, a.AmdSmiMemoryPartitionType.NPS4)
    assert a.amdsmi_get_gpu_compute_partition(h) == "CPX"
    a.amdsmi_shut_down()
    a.amdsmi_init()
    assert len(a.amdsmi_get_processor_handles()) == 64
    h = a.amdsmi_get_processor_handles()[0]
    with pytest.raises(a.AmdSmiLibraryException) as err:  # SPX under NPS4 is invalid
        a.amdsmi_set_gpu_compute_partition(h, a.AmdSmiComputePartitionType.SPX)
    assert err.value.get_error_code() == 1


def test_a_reset_can_lose_the_mode_and_the_set_calls_can_fail() -> None:
    clock = FakeClock()
    node, _runner = start_scenario("cpx_partition_lost", clock)
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    h = a.amdsmi_get_processor_handles()[0]
    assert a.amdsmi_get_gpu_compute_partition(h) == "CPX"
    a.amdsmi_reset_gpu(h)
    assert a.amdsmi_get_gpu_compute_partition(h) == "SPX"
    with pytest.raises(a.AmdSmiLibraryException) as err:
        a.amdsmi_set_gpu_compute_partition(h, a.AmdSmiComputePartitionType.CPX)
    assert err.value.get_error_code() == 30  # BUSY: the mode will not re-apply
