"""The evidence bundle writer: digest, size cap, retention, atomic writes."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from fleetd.remedy.bundle import BundleError, BundleStore, bundle_name, decode, encode, fit


def store(tmp: Path, **limits: int) -> BundleStore:
    base = {"max_bundle_bytes": 1 << 20, "max_total_bytes": 1 << 24, "keep": 10}
    base.update(limits)
    return BundleStore(tmp / "evidence", **base)


def content(n: int = 0, events: int = 10) -> dict[str, object]:
    return {
        "run_id": f"r{n}",
        "gpus": {"3": {"calls": {"amdsmi_get_gpu_bad_page_info": [{"page": 1}]}}},
        "events": [{"message": os.urandom(64).hex()} for _ in range(events)],
        "journal": {"events": []},
    }


def test_the_digest_is_the_sha256_of_the_file_and_the_content_reads_back(tmp_path: Path) -> None:
    s = store(tmp_path)
    written = content()
    ref = s.write(bundle_name("r1", "pre_reset", 1), written)
    data = Path(ref.path).read_bytes()
    assert ref.sha256 == hashlib.sha256(data).hexdigest() and ref.size == len(data)
    assert Path(ref.path).name == "r1.pre_reset.1.json.gz"
    assert decode(data) == written
    assert encode({"a": 1}) == encode({"a": 1})  # no timestamp in the gzip header
    assert [p.name for p in s.find("r1")] == ["r1.pre_reset.1.json.gz"]
    assert s.find("r1", "quarantine") == []


def test_over_the_cap_the_bulkiest_sections_are_cut_and_named(tmp_path: Path) -> None:
    big = content(events=400)  # ~50 kB of incompressible event text
    data, cut = fit(big, 8192)
    assert len(data) <= 8192 and cut == ("events",)
    body = decode(data)
    assert body["cut"] == ["events"] and "cap" in body["events"]["cut"]
    assert body["gpus"] == big["gpus"]  # what fits is kept
    ref = store(tmp_path, max_bundle_bytes=8192).write("r1.pre_reset.1.json.gz", big)
    assert ref.cut == ("events",) and ref.size <= 8192
    with pytest.raises(BundleError):
        fit({"other": os.urandom(20000).hex()}, 4096)  # nothing cuttable: refused, not cut


def test_retention_keeps_the_newest_and_drops_the_oldest_first(tmp_path: Path) -> None:
    s = store(tmp_path, keep=3)
    for i in range(5):
        ref = s.write(bundle_name(f"r{i}", "pre_reset", 1), content(i))
        os.utime(ref.path, (1000 + i, 1000 + i))  # written one second apart
    assert [p.name.split(".")[0] for p in s.bundles()] == ["r2", "r3", "r4"]
    assert s.last_capture_at() == 1004


def test_the_total_cap_drops_the_oldest_bundles(tmp_path: Path) -> None:
    one = len(fit(content(0), 1 << 20)[0])
    s = store(tmp_path, max_total_bytes=int(one * 2.5))
    for i in range(4):
        ref = s.write(bundle_name(f"r{i}", "quarantine", 1), content(i))
        os.utime(ref.path, (1000 + i, 1000 + i))
    names = [p.name.split(".")[0] for p in s.bundles()]
    assert names == ["r2", "r3"]
    assert sum(p.stat().st_size for p in s.bundles()) <= one * 2.5


def test_an_abandoned_capture_and_a_leftover_temporary_file_leave_nothing(
    tmp_path: Path,
) -> None:
    s = store(tmp_path)
    with pytest.raises(BundleError, match="abandoned"):
        s.write("r1.pre_reset.1.json.gz", content(), abandoned=lambda: True)
    assert s.bundles() == [] and list(s.directory.iterdir()) == []
    (s.directory / "r2.pre_reset.1.json.gz.tmp").write_bytes(b"half a bundle")  # a SIGKILL
    assert s.bundles() == []  # a temporary file is never a bundle
    s.write("r3.pre_reset.1.json.gz", content())
    assert sorted(p.name for p in s.directory.iterdir()) == ["r3.pre_reset.1.json.gz"]


def test_a_full_disk_drops_the_oldest_bundle_and_tries_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store(tmp_path)
    first = s.write("r0.pre_reset.1.json.gz", content())
    calls: list[Path] = []
    original = BundleStore._write_file

    def full_once(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        original(path, data)

    monkeypatch.setattr(BundleStore, "_write_file", staticmethod(full_once))
    ref = s.write("r1.pre_reset.1.json.gz", content(1))
    assert not Path(first.path).exists() and Path(ref.path).exists()


def test_a_disk_still_full_fails_the_write_and_signals_until_there_is_room_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store(tmp_path)
    s.write("r0.pre_reset.1.json.gz", content())
    s.write("r1.pre_reset.1.json.gz", content(1))

    def always_full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    free = {"bytes": 0}

    def usage(_path: object) -> shutil._ntuple_diskusage:
        return shutil._ntuple_diskusage(1 << 30, (1 << 30) - free["bytes"], free["bytes"])

    monkeypatch.setattr(BundleStore, "_write_file", staticmethod(always_full))
    monkeypatch.setattr("fleetd.remedy.bundle.shutil.disk_usage", usage)
    assert not s.failing()
    with pytest.raises(BundleError, match="No space left"):
        s.write("r2.pre_reset.1.json.gz", content(2))
    assert s.dropped_for_space == 1  # the oldest went first, and it still did not fit
    assert [p.name for p in s.bundles()] == ["r1.pre_reset.1.json.gz"]
    assert s.failing()  # FleetdStorageDegraded reads this (fleetd_evidence_write_failing)
    free["bytes"] = 1 << 20  # an operator freed the disk
    assert not s.failing()


def test_unsafe_names_are_refused() -> None:
    with pytest.raises(ValueError):
        bundle_name("../etc", "pre_reset", 1)
