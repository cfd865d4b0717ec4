"""CPER records from ``amdsmi_get_gpu_cper_entries``: decoded, AFIDs attached, stale marked.

A record is decoded from its raw bytes (UEFI CPER: a 128-byte header, ``sec_cnt`` section
descriptors of 72 bytes, the section bodies), cross-checked with the dict amdsmi built, and
only then handed to amdsmi's AFID decoder: the C decoder follows the section offsets it
finds without bounds checks, so a truncated or malformed record must never reach it.

Time: the ``timestamp`` text ("YYYY/MM/DD HH:MM:SS") is read as UTC. amdgpu fills it from
``ktime_get_real_seconds()`` through ``time64_to_tm(now, 0, ...)`` (drivers/gpu/drm/amd/
amdgpu/amdgpu_cper.c, amdgpu_cper_get_timestamp): offset 0, i.e. UTC, whatever the host's
time zone. A timestamp that is not a real date reads as None.

Staleness (device-metrics-exporter#506: a fatal CPER from before a reboot kept a working
MI300X unhealthy): the records already in a GPU's ring at the first read of a boot are the
*backlog*; a backlog record stamped before the boot, or older than ``max_age``, or with no
usable stamp, is ``stale`` and must never make a GPU unhealthy. A record that appears after
the first read of this boot is new by observation and is never stale, whatever its stamp
says (a firmware clock can be wrong: a real new fault is not hidden by a bad clock; its
``clock_suspect`` flag says so).

Cursor: per GPU, the amdsmi cursor, the boot it belongs to, and the ids of the last records
seen (a repeat after a ring wrap or a cursor restart is dropped by record id); kept in
``<state_dir>/cper.cursor.json``, written atomically after each read that moved it. Call
``CperReader.read`` for partition 0 only (AMD's CLI reads CPER there; other partitions
of the same GPU return the same ring).
"""

from __future__ import annotations

import base64
import calendar
import dataclasses
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from fleetd.events.model import Tally
from fleetd.logs import get_logger
from fleetd.statefile import StateFile

HEADER = struct.Struct("<4sHIHIII8B16s16s16s16s8sIQ12s")  # 128 bytes (UEFI N.2.1)
SECTION = struct.Struct("<IIBBBBI16s16sI20s")  # 72 bytes (UEFI N.2.2)
SIGNATURE_END = 0xFFFFFFFF
VALID_TIMESTAMP = 0x2
CURSOR_FILE = "cper.cursor.json"
MAX_SEEN = 256
"""Record ids remembered per GPU to drop repeats (the amdgpu CPER ring holds a few hundred)."""
MAX_CALLS = 32
"""amdsmi calls per read (each returns at most 20 records: MORE_DATA asks for another)."""
SEVERITY_MASK_ALL = 0b111

SEVERITIES = ("non_fatal_uncorrected", "fatal", "non_fatal_corrected")


def _guid(text: str) -> bytes:
    """``"32AC0C78-2623-48F6-B0D0-7365725FD6AE"`` → the 16 bytes a CPER stores (mixed endian)."""
    a, b, c, d, e = text.split("-")
    return (
        int(a, 16).to_bytes(4, "little")
        + int(b, 16).to_bytes(2, "little")
        + int(c, 16).to_bytes(2, "little")
        + bytes.fromhex(d + e)
    )


def guid_text(raw: bytes) -> str:
    """The inverse of ``_guid``: 16 bytes → canonical upper-case GUID text."""
    if len(raw) != 16:
        return raw.hex()
    a = int.from_bytes(raw[0:4], "little")
    b = int.from_bytes(raw[4:6], "little")
    c = int.from_bytes(raw[6:8], "little")
    return f"{a:08X}-{b:04X}-{c:04X}-{raw[8:10].hex().upper()}-{raw[10:16].hex().upper()}"


SECTION_TYPES: dict[bytes, str] = {
    # AMD's own section types (ROCm/amdsmi src/amd_smi/amd_smi_cper.cc; amdgpu_cper.h)
    _guid("32AC0C78-2623-48F6-B0D0-7365725FD6AE"): "amd_crashdump",
    _guid("32AC0C78-2623-48F6-81A2-AC691780551D"): "amd_nonstandard",
    _guid("DC3EA0B0-A144-4797-B95B-53FA242B6E1D"): "processor",
    # UEFI standard sections a platform may add (UEFI 2.10 appendix N.2.2)
    _guid("9876CCAD-47B4-4BDB-B65E-16F193C4F3DB"): "processor_generic",
    _guid("A5BC1114-6F64-4EDE-B863-3E83ED7C83B1"): "memory",
    _guid("D995E954-BBC1-430F-AD91-B44DCB3C6F35"): "pcie",
}


@dataclass(frozen=True, slots=True)
class CperSectionDescriptor:
    type: str  # a SECTION_TYPES name, or "unknown"
    guid: str
    offset: int
    length: int
    severity: int
    fru_text: str


@dataclass(frozen=True, slots=True)
class CperRecord:
    """One decoded record. ``stale`` records are evidence only: never a reason for health."""

    gpu: str
    record_id: str
    severity: str  # non_fatal_uncorrected, fatal, non_fatal_corrected, unused
    timestamp: float | None
    timestamp_text: str
    notify_type: str
    section_count: int
    sections: tuple[CperSectionDescriptor, ...]
    afids: tuple[int, ...]
    raw: bytes
    stale: bool = False
    stale_reason: str | None = None
    clock_suspect: bool = False
    problems: tuple[str, ...] = ()
    creator_id: str = ""

    @property
    def raw_base64(self) -> str:
        return base64.b64encode(self.raw).decode("ascii")

    @property
    def fatal(self) -> bool:
        return self.severity == "fatal"

    @property
    def may_affect_health(self) -> bool:
        """A fresh record: the only kind a rule may turn into "unhealthy"."""
        return not self.stale

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the event log, the raw record in base64 as evidence."""
        fields = _RECORD.dump_python(self, mode="json", exclude={"raw"})
        return {"source": "cper", **fields, "raw_base64": self.raw_base64}


_RECORD = TypeAdapter(CperRecord)


def parse_timestamp(text: str) -> float | None:
    """``"2025/03/14 09:26:53"`` (UTC, see the module docstring) → Unix seconds, or None."""
    try:
        date, clock = text.strip().split(" ")
        year, month, day = (int(x) for x in date.split("/"))
        hour, minute, second = (int(x) for x in clock.split(":"))
    except (ValueError, AttributeError):
        return None
    if not (
        1970 <= year <= 9999
        and 1 <= month <= 12
        and 1 <= day <= 31
        and hour < 24
        and minute < 60
        and second < 61
    ):
        return None
    try:
        return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))
    except (OverflowError, ValueError):
        return None


def raw_bytes(item: Any) -> bytes | None:
    """A ``cper_data`` item (``{"bytes": [c_byte values -128..127], "size": n}``) → bytes.

    amdsmi 7.0.2 lists the bytes as signed ``c_byte`` values, and its own
    ``amdsmi_get_afids_from_cper`` passes them to ``bytes()``, which raises ValueError on
    any negative one: always convert with ``& 0xFF`` first (done here).
    """
    if isinstance(item, bytes | bytearray):
        return bytes(item)
    if not isinstance(item, Mapping):
        return None
    values, size = item.get("bytes"), item.get("size")
    if not isinstance(values, list | tuple) or not isinstance(size, int):
        return None
    try:
        data = bytes(int(v) & 0xFF for v in values)
    except (TypeError, ValueError):
        return None
    return data if len(data) == size else data[:size] if len(data) > size else None


AfidDecoder = Callable[[bytes], Sequence[int]]


def amdsmi_afid_decoder(amdsmi: Any) -> AfidDecoder | None:
    """amdsmi's ``amdsmi_get_afids_from_cper`` (module-level only in 7.0.2) as bytes → AFIDs."""
    interface = getattr(amdsmi, "amdsmi_interface", None)
    function = getattr(interface, "amdsmi_get_afids_from_cper", None)
    if function is None:
        function = getattr(amdsmi, "amdsmi_get_afids_from_cper", None)
    if function is None:
        return None

    def decode(raw: bytes) -> Sequence[int]:
        afids, _count = function(raw)
        return [int(a) for a in afids]

    return decode


def decode_record(
    gpu: str,
    entry: Mapping[str, Any],
    raw: bytes | None,
    afids_of: AfidDecoder | None,
    tally: Tally,
) -> CperRecord | None:
    """One record, or None when it is too broken to be a record at all (counted)."""
    problems: list[str] = []
    if raw is None or len(raw) < HEADER.size:
        tally.note("truncated_record")
        return None
    head = HEADER.unpack_from(raw)
    signature, _rev, sig_end, sec_cnt, sev_code, valid_bits, length = head[:7]
    if signature != b"CPER" or sig_end != SIGNATURE_END:
        tally.note("bad_signature")
        return None
    if length != len(raw):
        problems.append("length_mismatch")
    sections: list[CperSectionDescriptor] = []
    structural_ok = length <= len(raw) and HEADER.size + SECTION.size * sec_cnt <= length
    if not structural_ok:
        problems.append("truncated_sections")
    else:
        for i in range(sec_cnt):
            section = _section(raw, HEADER.size + SECTION.size * i, length)
            if section is None:
                problems.append("bad_section_bounds")
                structural_ok = False
                continue
            if section.type == "unknown":
                problems.append("unknown_section_type")
            sections.append(section)
    severity = entry.get("error_severity")
    if severity not in (*SEVERITIES, "unused"):
        problems.append("unknown_severity")
        severity = SEVERITIES[sev_code] if 0 <= sev_code < len(SEVERITIES) else "unused"
    text = entry.get("timestamp")
    text = text if isinstance(text, str) else ""
    stamp = parse_timestamp(text) if valid_bits & VALID_TIMESTAMP else None
    if stamp is None:
        problems.append("bad_timestamp")
    afids: tuple[int, ...] = ()
    if afids_of is None:
        problems.append("afid_unavailable")
    elif structural_ok and sections:
        try:
            afids = tuple(afids_of(raw[:length]))
        except Exception:  # amdsmi's exception, or a bug of its own (TypeError, ValueError)
            problems.append("afid_decode_failed")
    for problem in problems:
        tally.note(problem)
    return CperRecord(
        gpu=gpu,
        record_id=_text(entry.get("record_id"), head[-4]),
        severity=str(severity),
        timestamp=stamp,
        timestamp_text=text,
        notify_type=str(entry.get("notify_type", "Unknown")),
        section_count=sec_cnt,
        sections=tuple(sections),
        afids=afids,
        raw=raw,
        problems=tuple(problems),
        creator_id=_text(entry.get("creator_id"), head[-6]),
    )


def _section(raw: bytes, at: int, length: int) -> CperSectionDescriptor | None:
    (offset, size, _minor, _major, _valid, _res, _flags, kind, _fru, sev, fru) = (
        SECTION.unpack_from(raw, at)
    )
    if offset < HEADER.size or size == 0 or offset + size > length:
        return None
    name = SECTION_TYPES.get(kind, "unknown")
    return CperSectionDescriptor(name, guid_text(kind), offset, size, sev, _text(fru, b""))


def _text(value: Any, fallback: bytes) -> str:
    if isinstance(value, str):
        return value
    data = value if isinstance(value, bytes | bytearray) else fallback
    return bytes(data).split(b"\0", 1)[0].decode("ascii", "replace").strip()


def decode_cper_entries(
    gpu: str,
    entries: Any,
    cper_data: Any,
    afids_of: AfidDecoder | None,
    tally: Tally | None = None,
) -> list[CperRecord]:
    """The records of one ``amdsmi_get_gpu_cper_entries`` result (its 1st and 3rd items)."""
    tally = tally if tally is not None else Tally()
    if not isinstance(entries, Mapping) or not isinstance(cper_data, list | tuple):
        tally.note("malformed_buffer")
        return []
    if len(entries) != len(cper_data):
        tally.note("entry_count_mismatch")
    out = []
    for index in range(min(len(entries), len(cper_data))):
        entry = entries.get(index)
        if not isinstance(entry, Mapping):
            tally.note("malformed_entry")
            continue
        record = decode_record(gpu, entry, raw_bytes(cper_data[index]), afids_of, tally)
        if record is not None:
            out.append(record)
    return out


def is_partition_zero(amdsmi: Any, handle: Any) -> bool | None:
    """Whether ``handle`` is its GPU's partition 0 (read CPER there only); None: unknown."""
    try:
        info = amdsmi.amdsmi_get_gpu_kfd_info(handle)
    except Exception:
        return None
    partition = info.get("current_partition_id") if isinstance(info, Mapping) else None
    return partition == 0 if isinstance(partition, int) else None


# ---------------------------------------------------------------------------------- the reader
@dataclass(slots=True)
class CperBatch:
    """What one read of one GPU gave: new records (fresh and stale) and how the call went."""

    gpu: str
    records: list[CperRecord] = field(default_factory=list)
    status: str = "ok"  # ok, no_permission, not_supported, error
    error: str = ""

    @property
    def fresh(self) -> list[CperRecord]:
        return [r for r in self.records if not r.stale]


class CperReader:
    """Reads each GPU's CPER ring forward from a persisted cursor.

    ``amdsmi`` is the real module or the simulator's face; ``boot_id``/``boot_time`` are this
    boot's; ``max_age`` (seconds, None: no limit) marks old backlog records stale.
    """

    def __init__(
        self,
        amdsmi: Any,
        state_dir: str | Path,
        *,
        boot_id: str,
        boot_time: float,
        max_age: float | None = None,
        severity_mask: int = SEVERITY_MASK_ALL,
        buffer_size: int = 1 << 20,
    ) -> None:
        self.amdsmi = amdsmi
        self.boot_id = boot_id
        self.boot_time = boot_time
        self.max_age = max_age
        self.severity_mask = severity_mask
        self.buffer_size = buffer_size
        self.afids_of = amdsmi_afid_decoder(amdsmi)
        self.tally = Tally()
        self.state = StateFile(state_dir, CURSOR_FILE)
        self.log = get_logger("events.cper")
        saved = self.state.load() or {}
        if self.state.exists() and not saved:
            self._note("cursor_unreadable")
        gpus = saved.get("gpus") if saved.get("boot_id") == boot_id else None
        self._gpus: dict[str, dict[str, Any]] = gpus if isinstance(gpus, dict) else {}
        self._unsaved = False  # a write failed: the next read writes, changed or not

    def read(self, gpu: str, handle: Any, now: float) -> CperBatch:
        """New records of ``gpu`` (its partition-0 ``handle``) since the last read."""
        batch = CperBatch(gpu)
        state = self._gpus.get(gpu)
        state = state if isinstance(state, dict) else {}
        primed = bool(state.get("primed"))
        saved_cursor = state.get("cursor")
        cursor: int = saved_cursor if isinstance(saved_cursor, int) and saved_cursor >= 0 else 0
        saved_seen = state.get("seen")
        seen = [s for s in saved_seen if isinstance(s, str)] if isinstance(saved_seen, list) else []
        for _ in range(MAX_CALLS):
            try:
                result = self.amdsmi.amdsmi_get_gpu_cper_entries(
                    handle, self.severity_mask, self.buffer_size, cursor
                )
            except Exception as exc:
                batch.status, batch.error = _failure(exc)
                self._note(f"read_{batch.status}", gpu=gpu, error=batch.error)
                break
            if not isinstance(result, tuple) or len(result) != 4:
                self._note("malformed_buffer", gpu=gpu)
                batch.status = "error"
                break
            entries, next_cursor, cper_data, status = result
            for record in decode_cper_entries(gpu, entries, cper_data, self.afids_of, self.tally):
                if record.record_id and record.record_id in seen:
                    self.tally.counts["repeat_dropped"] += 1
                    continue
                if record.record_id:
                    seen.append(record.record_id)
                batch.records.append(self._judge(record, backlog=not primed, now=now))
            if isinstance(next_cursor, int) and next_cursor >= cursor:
                cursor = next_cursor
            if status != 39:  # AMDSMI_STATUS_MORE_DATA: another call has the rest
                break
        else:
            self._note("more_data_left", gpu=gpu)
        if batch.status == "ok":
            new_state = {"cursor": cursor, "primed": True, "seen": seen[-MAX_SEEN:]}
            if new_state != self._gpus.get(gpu) or self._unsaved:  # a cursor at rest: no write
                self._gpus[gpu] = new_state
                self._save(gpu)
        for record in batch.records:
            self.tally.counts[f"records.{record.severity}"] += 1
            if record.stale:
                self.tally.counts["records.stale"] += 1
        return batch

    def _judge(self, record: CperRecord, *, backlog: bool, now: float) -> CperRecord:
        stamp = record.timestamp
        suspect = stamp is None or stamp < self.boot_time or stamp > now + 300
        if not backlog:
            return _replace(record, clock_suspect=suspect)
        reason = None
        if stamp is None:
            reason = "no_timestamp"
        elif stamp < self.boot_time:
            reason = "before_boot"
        elif self.max_age is not None and now - stamp > self.max_age:
            reason = "too_old"
        return _replace(record, stale=reason is not None, stale_reason=reason)

    def _save(self, gpu: str) -> None:
        """Write the cursors (fsynced: once per change, never once per read)."""
        try:
            self.state.save({"version": 1, "boot_id": self.boot_id, "gpus": self._gpus})
        except OSError as exc:
            self._unsaved = True  # written again at the next read, changed or not
            self._note("cursor_write_failed", gpu=gpu, error=exc.strerror or str(exc))
        else:
            self._unsaved = False

    def _note(self, kind: str, **context: Any) -> None:
        if self.tally.note(kind):
            self.log.warning("cper_problem", kind=kind, **context)


def _replace(record: CperRecord, **changes: Any) -> CperRecord:
    return dataclasses.replace(record, **changes)


def _failure(exc: Exception) -> tuple[str, str]:
    code = getattr(exc, "err_code", None)
    if code == 10:
        return "no_permission", "AMDSMI_STATUS_NO_PERM (CPER needs root)"
    if code in (2, 52, 14):  # NOT_SUPPORTED, FILE_NOT_FOUND, FILE_ERROR: CPER not enabled
        return "not_supported", f"amdsmi status {code}"
    return "error", repr(exc)[:200]
