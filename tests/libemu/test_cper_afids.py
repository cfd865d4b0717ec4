"""CPER AFIDs through both faces: the stand-in's amdsmi_interface and the real amdsmi 7.0.2
over the emulated library must decode the same records to the same AFIDs, and fail alike."""

from __future__ import annotations

from typing import Any

import pytest

from fleetd.events.afid import AfidTable
from fleetd.events.cper import CperReader, amdsmi_afid_decoder, decode_cper_entries

from .conftest import Faces
from .surface import outcome


def both(faces: Faces) -> list[tuple[Any, Any]]:
    return [(a, a.amdsmi_get_processor_handles()[2]) for a in (faces.sim, faces.real)]


def faulted(faces: Faces) -> None:
    faces.node.inject(2, "ecc_uncorrectable", block="XGMI_WAFL")  # AFID 18, physical
    faces.node.inject(2, "ecc_deferred", count=2)  # AFID 22, reset
    faces.node.inject(2, "ecc_uncorrectable", fatal=True)  # HBM fatal, AFID 20, physical


def unsigned(item: dict[str, Any]) -> bytes:
    return bytes(b & 0xFF for b in item["bytes"])


def test_both_faces_give_the_same_afids_for_the_same_records(faces: Faces) -> None:
    faulted(faces)
    seen = []
    for a, h in both(faces):
        _entries, _cursor, data, _status = a.amdsmi_get_gpu_cper_entries(h, 0b111)
        interface = a.amdsmi_interface
        per_record = [interface.amdsmi_get_afids_from_cper(unsigned(d)) for d in data]
        fixed = [{"bytes": list(unsigned(d)), "size": d["size"]} for d in data]
        seen.append((per_record, interface.amdsmi_get_afids_from_cper(fixed)))
    assert seen[0] == seen[1]
    assert seen[0][0] == [([18], 1), ([22], 1), ([20], 1)]
    assert seen[0][1] == ([18, 22, 20], 3)


def test_both_faces_fail_alike_on_bad_input(faces: Faces) -> None:
    faulted(faces)
    results = []
    for a, h in both(faces):
        _entries, _cursor, data, _status = a.amdsmi_get_gpu_cper_entries(h, 0b111)
        f = a.amdsmi_interface.amdsmi_get_afids_from_cper
        results.append(
            [
                outcome(lambda f=f, d=data: f(d)),  # the signed-byte trap: ValueError
                outcome(lambda f=f: f(b"not a cper record at all")),
                outcome(lambda f=f: f([{"bytes": [1, 2, 3], "size": 2}])),
                outcome(lambda f=f: f([{"size": 3}])),
                outcome(lambda f=f: f([])),
            ]
        )
    assert results[0] == results[1]
    assert results[0][0][:2] == ("EXC", "ValueError")
    assert results[0][1][:3] == ("EXC", "AmdSmiLibraryException", 43)
    assert results[0][4] == ([], 0)


def test_the_top_level_module_has_no_afid_function_on_either_face(faces: Faces) -> None:
    for a, _h in both(faces):
        assert not hasattr(a, "amdsmi_get_afids_from_cper")


@pytest.mark.parametrize("face", ["sim", "real"])
def test_the_reader_decodes_sim_records_to_actions(faces: Faces, face: str, tmp_path: Any) -> None:
    a = getattr(faces, face)
    h = a.amdsmi_get_processor_handles()[2]
    boot = faces.clock.now() - 3600
    reader = CperReader(a, tmp_path, boot_id="b", boot_time=boot)
    assert reader.read("gpu2", h, faces.clock.now()).records == []
    faulted(faces)
    batch = reader.read("gpu2", h, faces.clock.now())
    table = AfidTable.load()
    got = [(r.severity, r.afids, table.action_for(r.afids).action) for r in batch.records]
    assert got == [
        ("fatal", (18,), "physical"),
        ("non_fatal_uncorrected", (22,), "reset"),
        ("fatal", (20,), "physical"),
    ]
    assert all(not r.stale and r.problems == () for r in batch.records)
    assert [s.type for s in batch.records[0].sections] == ["amd_crashdump"]
    assert reader.tally.snapshot().get("afid_decode_failed", 0) == 0
    decoder = amdsmi_afid_decoder(a)
    assert decoder is not None
    entries, _c, data, _s = a.amdsmi_get_gpu_cper_entries(h, 0b111)
    assert [r.afids for r in decode_cper_entries("g", entries, data, decoder)] == [
        (18,),
        (22,),
        (20,),
    ]
