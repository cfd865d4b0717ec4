"""Both faces over one model: the stand-in and the real amdsmi over the emulated library.

Every reading of every GPU — values, types, "N/A" conversions, raw sentinels, exception
classes and codes, dict key order — must be identical. A difference is a fidelity bug in
the stand-in (or in the provider), never something to paper over here.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import SPECS, SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.libemu import SimProvider

from .conftest import Faces
from .surface import MUTATORS, covered_functions, differences, read_surface


def _pids(faces: Faces) -> list[int]:
    return [p.pid for p in faces.node.processes()]


def assert_agree(faces: Faces) -> int:
    pids = _pids(faces)
    stand_in = read_surface(faces.sim, pids)
    real = read_surface(faces.real, pids)
    assert differences(stand_in, real) == []
    return len(real)


def test_surface_read_covers_every_function_the_stand_in_offers(faces: Faces) -> None:
    offered = {
        name
        for name in dir(faces.sim)
        if name.startswith("amdsmi_") and callable(getattr(faces.sim, name))
    }
    assert offered - MUTATORS - covered_functions(faces.sim) == set()


def test_a_loaded_node_reads_identically(faces: Faces) -> None:
    faces.node.add_process(2, pid=4242, name="vllm", vram_bytes=200 << 30)
    faces.clock.advance(30)
    leaves = assert_agree(faces)
    assert leaves > 8 * 500  # the read really covered every GPU


@pytest.mark.parametrize("model", sorted(SPECS))
def test_every_gpu_model_reads_identically(
    model: str, clock: FakeClock, real_amdsmi: ModuleType, attach: Callable[[SimNode], SimProvider]
) -> None:
    node = build_node(model, seed=21, clock=clock, gpu_count=4)
    faces = Faces(clock, node, SimulatedAmdSmi(node), real_amdsmi, attach(node))
    faces.sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    node.set_load(None, 0.9)
    node.add_process(1, pid=77, name="", vram_bytes=1 << 30)  # a nameless process reads "N/A"
    clock.advance(300)
    assert_agree(faces)
    assert len(real_amdsmi.amdsmi_get_processor_handles()) == 4


def test_the_comparison_can_fail(faces: Faces) -> None:
    """Self-check: a one-field difference between the faces is reported."""
    pids = _pids(faces)
    stand_in = read_surface(faces.sim, pids)
    faces.node.inject(0, "unsupported_fields", fields=["amdsmi_get_gpu_kfd_info.node_id"])
    real = read_surface(faces.real, pids)
    found = differences(stand_in, real)
    assert len(found) == 1 and "amdsmi_get_gpu_kfd_info/'node_id'" in found[0]
    assert "('str', 'N/A')" in found[0]
