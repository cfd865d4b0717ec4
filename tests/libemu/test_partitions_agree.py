"""A partitioned node reads identically through the stand-in and the real amdsmi package."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import SimProvider

from .conftest import Faces
from .surface import differences, read_surface


@pytest.mark.parametrize(
    ("model", "compute", "memory"), [("MI300X", "CPX", "NPS1"), ("MI355X", "QPX", "NPS4")]
)
def test_partitioned_nodes_read_identically(
    model: str,
    compute: str,
    memory: str,
    clock: FakeClock,
    real_amdsmi: ModuleType,
    attach: Callable[[SimNode], SimProvider],
) -> None:
    node = build_node(
        model, seed=5, clock=clock, gpu_count=2, compute_partition=compute, memory_partition=memory
    )
    faces = Faces(clock, node, SimulatedAmdSmi(node), real_amdsmi, attach(node))
    faces.sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    node.set_load(None, 0.5)
    clock.advance(60)
    stand_in = read_surface(faces.sim, [])
    real = read_surface(faces.real, [])
    assert differences(stand_in, real) == []
    handles = real_amdsmi.amdsmi_get_processor_handles()
    assert len(handles) == 2 * {"CPX": 8, "QPX": 4}[compute]
    with pytest.raises(real_amdsmi.AmdSmiLibraryException) as err:
        real_amdsmi.amdsmi_get_power_info(handles[1])
    assert err.value.get_error_code() == 2
    assert real_amdsmi.amdsmi_get_gpu_kfd_info(handles[1])["current_partition_id"] == 1
    assert real_amdsmi.amdsmi_get_gpu_device_bdf(handles[1]).endswith(".1")


def test_the_real_set_call_re_partitions_the_simulated_node(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> None:
    node = build_node("MI300X", seed=5, clock=clock, gpu_count=2)
    attach(node)
    real_amdsmi.amdsmi_init()
    h = real_amdsmi.amdsmi_get_processor_handles()[0]
    real_amdsmi.amdsmi_set_gpu_compute_partition(h, real_amdsmi.AmdSmiComputePartitionType.DPX)
    assert real_amdsmi.amdsmi_get_gpu_compute_partition(h) == "DPX"
    real_amdsmi.amdsmi_shut_down()
    real_amdsmi.amdsmi_init()
    assert len(real_amdsmi.amdsmi_get_processor_handles()) == 4
    node.partition_set_status = 30
    with pytest.raises(real_amdsmi.AmdSmiLibraryException) as err:
        real_amdsmi.amdsmi_set_gpu_compute_partition(h, real_amdsmi.AmdSmiComputePartitionType.CPX)
    assert err.value.get_error_code() == 30
    real_amdsmi.amdsmi_shut_down()
