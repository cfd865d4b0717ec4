"""CPER decoding, the per-GPU cursor, staleness across boots, and bad buffers."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from fleetd.events.cper import (
    CURSOR_FILE,
    CperReader,
    decode_cper_entries,
    is_partition_zero,
    parse_timestamp,
    raw_bytes,
)
from fleetd.events.model import Tally

from .cper_builder import CRASHDUMP, NONSTANDARD, entry, record, signed

BOOT = "boot-1"
BOOT_TIME = 1_767_225_000.0  # 2025-12-31T23:50:00Z
NOW = 1_767_226_000.0
GPU = "0000:c1:00.0"


class Decoder:
    """Stands in for amdsmi_get_afids_from_cper: records what it was given."""

    def __init__(self, afids: list[int]) -> None:
        self.afids = afids
        self.calls: list[bytes] = []

    def __call__(self, raw: bytes) -> list[int]:
        self.calls.append(raw)
        return self.afids


def decode(data: bytes, decoder: Decoder | None = None, **kw: Any) -> tuple[list, Tally]:
    tally = Tally()
    items = [{"bytes": signed(data), "size": kw.pop("size", len(data))}]
    out = decode_cper_entries(GPU, {0: entry(data, **kw)}, items, decoder, tally)
    return out, tally


def test_a_record_decodes_with_sections_afids_and_raw_bytes() -> None:
    data = record(sections=[NONSTANDARD, CRASHDUMP], body=b"\xf0" * 96)
    decoder = Decoder([30, 18])
    (rec,), tally = decode(data, decoder)
    assert (rec.gpu, rec.record_id, rec.severity) == (GPU, "00000001", "fatal")
    assert rec.notify_type == "MCE"
    assert rec.timestamp == 1_767_225_600.0 + 300  # 2026-01-01T00:05:00Z
    assert [s.type for s in rec.sections] == ["amd_nonstandard", "amd_crashdump"]
    assert rec.sections[0].guid == NONSTANDARD and rec.sections[0].fru_text == "OAM0"
    assert rec.afids == (30, 18) and decoder.calls == [data]
    assert base64.b64decode(rec.raw_base64) == data and rec.problems == ()
    assert tally.snapshot() == {}


def test_signed_bytes_are_converted_before_anyone_calls_bytes_on_them() -> None:
    data = record(body=b"\xff" * 96)
    with pytest.raises(ValueError):
        bytes(signed(data))  # what amdsmi 7.0.2's own amdsmi_get_afids_from_cper does
    assert raw_bytes({"bytes": signed(data), "size": len(data)}) == data


def test_timestamps_are_utc_and_bad_ones_read_as_none() -> None:
    assert parse_timestamp("1970/01/01 00:00:10") == 10.0
    assert parse_timestamp("2026/01/01 00:00:00") == 1_767_225_600.0
    for bad in ("0000/00/00 00:00:00", "2026/13/01 00:00:00", "garbage", "", "2026/02/30 1:2:3x"):
        assert parse_timestamp(bad) is None


def test_a_truncated_record_never_reaches_the_afid_decoder() -> None:
    data = record()
    decoder = Decoder([1])
    (rec,), tally = decode(data[:200], decoder, size=200)
    assert decoder.calls == [] and rec.afids == ()
    assert "truncated_sections" in rec.problems and tally["length_mismatch"] == 1


def test_a_section_pointing_outside_the_record_never_reaches_the_decoder() -> None:
    data = bytearray(record())
    data[128:132] = (5000).to_bytes(4, "little")  # section offset beyond the record
    decoder = Decoder([1])
    (_rec,), tally = decode(bytes(data), decoder)
    assert decoder.calls == [] and tally["bad_section_bounds"] == 1


def test_an_unknown_section_type_is_counted_and_still_decoded() -> None:
    data = record(sections=["01234567-89AB-CDEF-0123-456789ABCDEF"])
    decoder = Decoder([34])
    (rec,), tally = decode(data, decoder)
    assert rec.sections[0].type == "unknown" and tally["unknown_section_type"] == 1
    assert rec.afids == (34,)


def test_broken_buffers_are_counted_never_raised() -> None:
    tally = Tally()
    assert decode_cper_entries(GPU, "nope", None, None, tally) == []
    good = record()
    items = [
        {"bytes": signed(good), "size": len(good)},
        {"bytes": "x", "size": 3},
        {"size": 1},
        {"bytes": signed(b"NOPE" + good[4:]), "size": len(good)},
    ]
    entries = {0: entry(good), 1: entry(good), 2: entry(good), 3: entry(good)}
    out = decode_cper_entries(GPU, entries, items, Decoder([]), tally)
    assert len(out) == 1
    assert tally["malformed_buffer"] == 1 and tally["truncated_record"] == 2
    assert tally["bad_signature"] == 1


def test_an_afid_decoder_that_raises_is_a_problem_not_a_crash() -> None:
    def broken(raw: bytes) -> list[int]:
        raise ValueError("bytes must be in range(0, 256)")

    (rec,), tally = decode(record(), broken)  # type: ignore[arg-type]
    assert rec.afids == () and tally["afid_decode_failed"] == 1


# ---------------------------------------------------------------------------------- the reader
class FakeAmdSmi:
    """A CPER ring with amdsmi 7.0.2's cursor semantics (header index; 20 per call)."""

    def __init__(self) -> None:
        self.ring: list[bytes] = []
        self.error: Exception | None = None
        self.calls = 0
        self.amdsmi_interface = self

    def add(self, n: int, stamp: tuple[int, ...] = (2026, 1, 1, 0, 5, 0), **kw: Any) -> None:
        for _ in range(n):
            rid = f"{len(self.ring) + 1:08d}".encode()
            self.ring.append(record(record_id=rid, stamp=stamp, **kw))  # type: ignore[arg-type]

    def amdsmi_get_gpu_cper_entries(self, handle: Any, mask: int, size: int, cursor: int) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        chunk = self.ring[cursor : cursor + 20]
        entries = {i: entry(d, stamp=_text(d)) for i, d in enumerate(chunk)}
        data = [{"bytes": signed(d), "size": len(d)} for d in chunk]
        more = cursor + 20 < len(self.ring)
        return entries, cursor + len(chunk), data, 39 if more else 0

    def amdsmi_get_afids_from_cper(self, raw: bytes) -> tuple[list[int], int]:
        return [22], 1


def _text(data: bytes) -> str:
    sec, minute, hour, _flag, day, month, year, century = data[24:32]
    return f"{century * 100 + year:04d}/{month:02d}/{day:02d} {hour:02d}:{minute:02d}:{sec:02d}"


class LibError(Exception):
    def __init__(self, code: int) -> None:
        self.err_code = code


def reader(
    tmp: Path, amdsmi: FakeAmdSmi, boot: str = BOOT, boot_time: float = BOOT_TIME, **kw: Any
) -> CperReader:
    return CperReader(amdsmi, tmp, boot_id=boot, boot_time=boot_time, **kw)


def test_reads_forward_and_a_restart_reports_nothing_twice(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    smi.add(45)
    first = reader(tmp_path, smi).read(GPU, object(), NOW)
    assert len(first.records) == 45 and smi.calls == 3  # MORE_DATA twice
    assert first.records[0].afids == (22,)
    saved = json.loads((tmp_path / CURSOR_FILE).read_text())
    assert saved["gpus"][GPU]["cursor"] == 45 and saved["boot_id"] == BOOT
    smi.add(2)
    again = reader(tmp_path, smi).read(GPU, object(), NOW + 60)  # restarted daemon
    assert [r.record_id for r in again.records] == ["00000046", "00000047"]
    assert reader(tmp_path, smi).read(GPU, object(), NOW + 61).records == []


def test_backlog_records_from_before_the_boot_are_stale(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    smi.add(1, stamp=(2025, 12, 31, 20, 0, 0))  # before this boot
    smi.add(1, stamp=(2026, 1, 1, 0, 5, 0))  # this boot, before fleetd started
    batch = reader(tmp_path, smi).read(GPU, object(), NOW)
    assert [(r.stale, r.stale_reason) for r in batch.records] == [
        (True, "before_boot"),
        (False, None),
    ]
    assert [r.record_id for r in batch.fresh] == ["00000002"]


def test_a_new_boot_restarts_the_cursor_and_judges_the_ring_again(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    smi.add(3, stamp=(2025, 12, 31, 20, 0, 0))
    reader(tmp_path, smi, boot="old", boot_time=BOOT_TIME - 86400).read(GPU, object(), NOW)
    batch = reader(tmp_path, smi).read(GPU, object(), NOW)  # the same ring after a reboot
    assert len(batch.records) == 3 and all(r.stale for r in batch.records)
    assert batch.fresh == []


def test_a_record_that_appears_later_is_fresh_whatever_its_clock_says(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    r = reader(tmp_path, smi)
    assert r.read(GPU, object(), NOW).records == []  # the first read of this boot: empty ring
    smi.add(1, stamp=(2000, 6, 27, 10, 45, 13))  # firmware clock off (seen in AMD's docs)
    (rec,) = r.read(GPU, object(), NOW + 5).records
    assert not rec.stale and rec.clock_suspect


def test_max_age_marks_old_backlog_stale(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    smi.add(1, stamp=(2026, 1, 1, 0, 5, 0))
    (rec,) = reader(tmp_path, smi, max_age=60.0).read(GPU, object(), NOW + 3600).records
    assert (rec.stale, rec.stale_reason) == (True, "too_old")


@pytest.mark.parametrize(
    ("code", "status"),
    [(10, "no_permission"), (2, "not_supported"), (52, "not_supported"), (16, "error")],
)
def test_a_failing_call_keeps_the_cursor_and_says_why(
    tmp_path: Path, code: int, status: str
) -> None:
    smi = FakeAmdSmi()
    smi.add(2)
    r = reader(tmp_path, smi)
    r.read(GPU, object(), NOW)
    smi.error = LibError(code)
    batch = r.read(GPU, object(), NOW + 1)
    assert batch.status == status and batch.records == []
    smi.error = None
    smi.add(1)
    assert [x.record_id for x in r.read(GPU, object(), NOW + 2).records] == ["00000003"]


def test_a_cursor_reset_does_not_repeat_records(tmp_path: Path) -> None:
    smi = FakeAmdSmi()
    smi.add(3)
    r = reader(tmp_path, smi)
    r.read(GPU, object(), NOW)
    r._gpus[GPU]["cursor"] = 0  # as if the ring index restarted under us
    assert r.read(GPU, object(), NOW + 1).records == []
    assert r.tally["repeat_dropped"] == 3


class SaveSpy:
    """Stands in ``reader.state.save``: records each write, refuses while ``failing``."""

    def __init__(self, reader: CperReader, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[dict[str, Any]] = []
        self.failing = False
        self._real = reader.state.save
        monkeypatch.setattr(reader.state, "save", self)

    def __call__(self, data: dict[str, Any]) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        self.writes.append(json.loads(json.dumps(data)))
        self._real(data)


def test_the_cursor_is_written_when_it_moves_not_at_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write is fsynced: an idle ring read every few seconds must not write at all."""
    smi = FakeAmdSmi()
    smi.add(2)
    r = reader(tmp_path, smi)
    spy = SaveSpy(r, monkeypatch)
    r.read(GPU, object(), NOW)
    for i in range(5):
        assert r.read(GPU, object(), NOW + 1 + i).records == []
    assert len(spy.writes) == 1 and spy.writes[0]["gpus"][GPU]["cursor"] == 2
    smi.add(1)
    r.read(GPU, object(), NOW + 10)
    assert len(spy.writes) == 2 and spy.writes[1]["gpus"][GPU]["cursor"] == 3


def test_a_cursor_write_that_failed_is_written_at_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = FakeAmdSmi()
    smi.add(1)
    r = reader(tmp_path, smi)
    spy = SaveSpy(r, monkeypatch)
    spy.failing = True
    r.read(GPU, object(), NOW)
    assert r.tally["cursor_write_failed"] == 1 and not (tmp_path / CURSOR_FILE).exists()
    spy.failing = False
    assert r.read(GPU, object(), NOW + 1).records == []  # nothing new, but the write is owed
    assert json.loads((tmp_path / CURSOR_FILE).read_text())["gpus"][GPU]["cursor"] == 1


def test_an_unreadable_cursor_file_starts_afresh(tmp_path: Path) -> None:
    (tmp_path / CURSOR_FILE).write_text("[1, 2")
    smi = FakeAmdSmi()
    smi.add(1)
    r = reader(tmp_path, smi)
    assert r.tally["cursor_unreadable"] == 1 and len(r.read(GPU, object(), NOW).records) == 1


def test_records_serialise_with_their_raw_bytes() -> None:
    data = record()
    (rec,), _ = decode(data, Decoder([18]))
    out = json.loads(json.dumps(rec.as_dict()))
    assert base64.b64decode(out["raw_base64"]) == data and out["afids"] == [18]
    assert out["sections"][0]["type"] == "amd_nonstandard"


def test_partition_zero_is_read_from_kfd_info() -> None:
    class Smi:
        def __init__(self, value: Any) -> None:
            self.value = value

        def amdsmi_get_gpu_kfd_info(self, handle: Any) -> Any:
            if isinstance(self.value, Exception):
                raise self.value
            return {"kfd_id": 1, "node_id": 2, "current_partition_id": self.value}

    assert is_partition_zero(Smi(0), None) is True
    assert is_partition_zero(Smi(3), None) is False
    assert is_partition_zero(Smi("N/A"), None) is None
    assert is_partition_zero(Smi(LibError(2)), None) is None
