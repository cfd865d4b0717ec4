"""Build CPER records byte by byte for tests (UEFI layout; AMD section GUIDs)."""

from __future__ import annotations

import struct

from fleetd.events.cper import HEADER, SECTION, _guid

NONSTANDARD = "32AC0C78-2623-48F6-81A2-AC691780551D"
CRASHDUMP = "32AC0C78-2623-48F6-B0D0-7365725FD6AE"


def record(
    *,
    severity: int = 1,
    sections: list[str] | None = None,
    body: bytes = b"\x11" * 96,
    record_id: bytes = b"00000001",
    stamp: tuple[int, int, int, int, int, int] = (2026, 1, 1, 0, 5, 0),
    valid_bits: int = 0b011,
) -> bytes:
    kinds = sections if sections is not None else [NONSTANDARD]
    offset = HEADER.size + SECTION.size * len(kinds)
    length = offset + len(body) * len(kinds)
    year, month, day, hour, minute, second = stamp
    head = HEADER.pack(
        b"CPER", 0x0100, 0xFFFFFFFF, len(kinds), severity, valid_bits, length,
        second, minute, hour, 0, day, month, year % 100, year // 100,
        b"MI300X-OAM0", b"\0" * 16, b"amdgpu", b"\0" * 16, record_id, 0, 0, b"\0" * 12,
    )  # fmt: skip
    descs = b"".join(
        SECTION.pack(
            offset + i * len(body),
            len(body),
            0,
            1,
            0,
            0,
            0,
            _guid(kind),
            b"\0" * 16,
            severity,
            b"OAM0",
        )
        for i, kind in enumerate(kinds)
    )
    return head + descs + body * len(kinds)


def signed(data: bytes) -> list[int]:
    """As amdsmi 7.0.2 lists a record: c_byte values, -128..127."""
    return [b - 256 if b > 127 else b for b in data]


def entry(data: bytes, *, severity: str = "fatal", stamp: str = "2026/01/01 00:05:00") -> dict:
    return {
        "error_severity": severity,
        "notify_type": "MCE",
        "timestamp": stamp,
        "signature": data[:4],
        "revision": 256,
        "signature_end": "0xffffffff",
        "sec_cnt": struct.unpack_from("<H", data, 10)[0],
        "record_length": len(data),
        "platform_id": b"MI300X-OAM0",
        "creator_id": b"amdgpu",
        "record_id": data[96:104].rstrip(b"\0"),
        "flags": 0,
        "persistence_info": 0,
    }
