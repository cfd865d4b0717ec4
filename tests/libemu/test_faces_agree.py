"""Both faces over one model: the stand-in and the real amdsmi over the emulated library.

Every reading of every GPU — values, types, "N/A" conversions, raw sentinels, exception
classes and codes, dict key order — must be identical. A difference is a fidelity bug in
the stand-in (or in the provider), never something to paper over here.
"""

from __future__ import annotations

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
