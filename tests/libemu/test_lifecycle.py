"""State-changing calls through the real package: init/shut-down, events, hive reset.

Where a call changes the model (a reset kills processes), each face gets its own twin node
(same model, seed and clock) and the twins must end up in the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import SimProvider

from .conftest import Faces
from .surface import differences, read_surface, tag


def read_events(a: Any, reader: Any, limit: int = 64) -> list[Any]:
    try:
        events = reader.read(50, num_elem=limit)
    except a.AmdSmiLibraryException as err:
        return [("EXC", err.get_error_code())]
    return [(tag(e["processor_handle"]), e["event"], e["message"]) for e in events]


def test_thermal_throttle_events_reach_both_readers(faces: Faces) -> None:
    readers = []
    for a in (faces.sim, faces.real):
        kinds = [
            a.AmdSmiEvtNotificationType.THERMAL_THROTTLE,
            a.AmdSmiEvtNotificationType.GPU_PRE_RESET,
        ]
        readers.append([a.AmdSmiEventReader(h, kinds) for h in a.amdsmi_get_processor_handles()])
    faces.node.set_load(1, 1.0)
    faces.node.inject(1, "thermal_runaway", delta_c=60, hbm_delta_c=40, vr_delta_c=40)
    faces.clock.advance(600)
    faces_ = (faces.sim, faces.real)
    first = [read_events(a, r[0], limit=1) for a, r in zip(faces_, readers, strict=True)]
    assert first[0] == first[1] and len(first[1]) == 1  # num_elem caps one read
    sim_events = first[0] + read_events(faces.sim, readers[0][0])
    real_events = first[1] + read_events(faces.real, readers[1][0])
    assert sim_events == real_events
    assert {e[1] for e in real_events} == {"THERMAL_THROTTLE"}
    assert len(real_events) >= 2  # hotspot and HBM both crossed their limits
    assert read_events(faces.real, readers[1][0]) == [("EXC", 40)]  # consumed
    for reader in readers[1]:
        reader.stop()


def test_event_mask_filters_in_the_library(faces: Faces) -> None:
    kinds = [faces.real.AmdSmiEvtNotificationType.GPU_POST_RESET]
    h = faces.real.amdsmi_get_processor_handles()[1]
    with faces.real.AmdSmiEventReader(h, kinds) as reader:
        faces.node.inject(1, "thermal_runaway", delta_c=80)
        faces.clock.advance(600)
        assert read_events(faces.real, reader) == [("EXC", 40)]


@pytest.fixture
def twins(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> tuple[SimNode, SimulatedAmdSmi, SimNode, ModuleType]:
    """Two identical nodes: one read by the stand-in, one by the real package."""
    nodes = [build_node("MI300X", seed=8, clock=clock, reset_unavailable_s=20.0) for _ in "ab"]
    attach(nodes[1])
    sim = SimulatedAmdSmi(nodes[0])
    for node in nodes:
        node.set_load(None, 0.7)
        for gpu in range(8):
            node.add_process(gpu, pid=9000 + gpu, name=f"vllm-{gpu}", vram_bytes=150 << 30)
        node.add_process(3, pid=9100, name="trainer", vram_bytes=1 << 30)
        node.inject(3, "ecc_uncorrectable", persistent=False)
        node.inject(5, "ecc_uncorrectable", persistent=True)
    sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    clock.advance(60)
    return nodes[0], sim, nodes[1], real_amdsmi


def test_a_reset_through_either_face_resets_the_hive_once(
    twins: tuple[SimNode, SimulatedAmdSmi, SimNode, ModuleType], clock: FakeClock
) -> None:
    sim_node, sim, real_node, real = twins
    readers = []
    for a in (sim, real):
        kinds = [
            a.AmdSmiEvtNotificationType.GPU_PRE_RESET,
            a.AmdSmiEvtNotificationType.GPU_POST_RESET,
        ]
        readers.append(a.AmdSmiEventReader(a.amdsmi_get_processor_handles()[6], kinds))
    for a in (sim, real):
        a.amdsmi_reset_gpu(a.amdsmi_get_processor_handles()[3])
    for node in (sim_node, real_node):
        assert node.reset_count() == 1
        assert sorted(k.pid for k in node.killed) == [*range(9000, 9008), 9100]
    assert [(r.gpus, r.killed_pids) for r in sim_node.resets] == [
        (r.gpus, r.killed_pids) for r in real_node.resets
    ]
    for a in (sim, real):  # the hive answers BUSY while it recovers
        with pytest.raises(a.AmdSmiLibraryException) as info:
            a.amdsmi_get_power_info(a.amdsmi_get_processor_handles()[0])
        assert info.value.get_error_code() == 30
    clock.advance(30)
    events = read_events(real, readers[1])
    assert read_events(sim, readers[0]) == events
    assert [e[1] for e in events] == ["GPU_PRE_RESET", "GPU_POST_RESET"]
    assert read_events(sim, readers[0]) == read_events(real, readers[1]) == [("EXC", 40)]
    assert differences(read_surface(sim, []), read_surface(real, [])) == []
    total = real.amdsmi_get_gpu_total_ecc_count(real.amdsmi_get_processor_handles()[5])
    assert total["uncorrectable_count"] == 1  # the persistent fault came back


def test_reset_events_name_every_hive_member(
    twins: tuple[SimNode, SimulatedAmdSmi, SimNode, ModuleType], clock: FakeClock
) -> None:
    _, _, _real_node, real = twins
    kinds = [real.AmdSmiEvtNotificationType.GPU_PRE_RESET]
    handles = real.amdsmi_get_processor_handles()
    readers = [real.AmdSmiEventReader(h, kinds) for h in handles]
    real.amdsmi_reset_gpu(handles[0])
    clock.advance(30)
    events = readers[0].read(10, num_elem=16)  # one global read returns every GPU's events
    assert sorted(e["processor_handle"].value for e in events) == sorted(h.value for h in handles)
    assert {e["event"] for e in events} == {"GPU_PRE_RESET"}
    assert {e["message"] for e in events} == {"1"}
    for reader in readers:
        reader.stop()


def test_shut_down_makes_calls_fail_not_init_until_init(faces: Faces) -> None:
    for a in (faces.sim, faces.real):
        handle = a.amdsmi_get_processor_handles()[0]
        a.amdsmi_shut_down()
        with pytest.raises(a.AmdSmiLibraryException) as info:
            a.amdsmi_get_gpu_activity(handle)
        assert info.value.get_error_code() == 32
        with pytest.raises(a.AmdSmiLibraryException):
            a.amdsmi_get_processor_handles()
        a.amdsmi_init()
        assert a.amdsmi_get_gpu_activity(handle)["gfx_activity"] > 0


def test_clearing_the_xgmi_error_goes_through_the_library(faces: Faces) -> None:
    faces.node.xgmi_error_status_readable = True  # a DF 3.6 part (MI2xx): the legacy path
    faces.node.inject(4, "xgmi_link_down", link=1)
    h = faces.real.amdsmi_get_processor_handles()[4]
    assert faces.real.amdsmi_gpu_xgmi_error_status(h) == 1
    faces.real.amdsmi_reset_gpu_xgmi_error(h)
    assert faces.real.amdsmi_gpu_xgmi_error_status(h) == 0
    assert faces.sim.amdsmi_gpu_xgmi_error_status(faces.sim.amdsmi_get_processor_handles()[4]) == 0


def test_nearest_peers_are_raw_pointers_that_wrap_into_working_handles(faces: Faces) -> None:
    real = faces.real
    h = real.amdsmi_get_processor_handles()[0]
    nearest = real.amdsmi_get_link_topology_nearest(h, real.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI)[
        "processor_list"
    ]
    assert len(nearest) == 7 and all(type(p) is int for p in nearest)
    peer = real.amdsmi_wrapper.amdsmi_processor_handle(nearest[0])
    assert real.amdsmi_topo_get_link_type(h, peer) == {"hops": 1, "type": 2}


def test_the_real_package_reports_the_library_and_refuses_an_unsafe_one(
    clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> None:
    from fleetd.collect.amdsmi_backend import AmdSmiBackend
    from fleetd.errors import BackendError

    node = build_node("MI355X", seed=3, clock=clock)
    attach(node)
    backend = AmdSmiBackend(real_amdsmi)
    try:
        assert (backend.abi.package, backend.abi.library) == ("7.0.2", "26.1.0")
        assert backend.abi.verdict == "validated"
    finally:
        backend.close()
    node.library_version = (26, 4, 0, "7.13.0")  # the node's ROCm upgraded under the wheel
    with pytest.raises(BackendError, match="176 bytes past the gpu_metrics buffer"):
        AmdSmiBackend(real_amdsmi)


def test_fleetds_event_reader_reads_the_real_package_as_the_stand_in(faces: Faces) -> None:
    """fleetd's one-thread KFD reader (fleetd.events.driver_events) over the real amdsmi
    7.0.2 and over the stand-in: the same events of every GPU, the same decoded fields, and
    the PAGE_FAULT_START trap handled the same way (the real enum has the value-8 alias)."""
    from fleetd.events.driver_events import DEVICE_WIDE, AmdSmiEventSource

    sources = []
    for a in (faces.sim, faces.real):
        handles = a.amdsmi_get_processor_handles()
        source = AmdSmiEventSource(
            a, lambda h=handles: list(enumerate(h)), lambda _e: None,
            kinds=(*DEVICE_WIDE, "page_fault_start"), now=faces.clock.now,
        )  # fmt: skip
        assert source.open() == len(handles)
        assert source.kind_of("PAGE_FAULT_START") == "page_fault_end"
        assert "page_fault_start" not in source.kinds
        sources.append(source)
    faces.node.inject(2, "vm_fault", pid=0x4242, process="python3")
    faces.node.inject(4, "power_excursion")
    faces.clock.advance(5)
    seen = []
    for source in sources:
        events = source.read_once()
        assert events is not None
        seen.append(sorted((e.gpu, e.kind, tuple(sorted(e.fields.items()))) for e in events))
        source.close()
    assert seen[0] == seen[1]
    assert (2, "vmfault", (("pid", 0x4242), ("task", "python3"))) in seen[1]
    assert any(gpu == 4 and kind == "thermal_throttle" for gpu, kind, _ in seen[1])
