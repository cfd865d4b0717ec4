"""Pure conversions from raw amdsmi results to fleetd's base units.

Every unit conversion happens here, exactly once: °C, W, J, bytes, seconds, Hz, GT/s and
ratios (0..1). amdsmi reports "no value" in three ways — an exception (handled by the
collectors), the string ``"N/A"``, or a raw all-ones integer the wrapper forgot to convert
(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF). Each function here returns ``None`` for any of
those and for values of the wrong type, never a zero; ``missing_reason`` says which it was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

SENTINELS: Final = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
NA: Final = "N/A"

MICRO: Final = 1e-6
MEGA: Final = 1e6
KIB: Final = 1024

# Reasons a reading is missing; also used by collectors and the poller.
REASON_NA: Final = "na"
REASON_SENTINEL: Final = "sentinel"
REASON_WRONG_TYPE: Final = "wrong_type"
REASON_ABSENT: Final = "absent"
REASON_OUT_OF_RANGE: Final = "out_of_range"


def number(raw: object) -> float | None:
    """A finite number from an amdsmi value, or None for "N/A", a sentinel or a wrong type.

    Booleans are rejected: the wrapper turns some bitmasks into bools, and a bool where a
    number is expected is exactly the kind of silent conversion that must not become 0/1.
    """
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int):
        if raw in SENTINELS:
            return None
        return float(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw) or raw in SENTINELS:
            return None
        return raw
    return None


def missing_reason(raw: object) -> str:
    """Why ``number(raw)`` (or a unit conversion of it) gave None."""
    if raw is None:
        return REASON_ABSENT
    if isinstance(raw, str) and raw.strip().upper() == NA:
        return REASON_NA
    if isinstance(raw, int) and not isinstance(raw, bool) and raw in SENTINELS:
        return REASON_SENTINEL
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return REASON_OUT_OF_RANGE
    return REASON_WRONG_TYPE


def first_reason(*raws: object) -> str:
    """The reason of the first raw value that does not parse as a number."""
    for raw in raws:
        if number(raw) is None:
            return missing_reason(raw)
    return REASON_OUT_OF_RANGE


def nonnegative(raw: object) -> float | None:
    """``number(raw)``, unless it is negative."""
    value = number(raw)
    if value is None or value < 0:
        return None
    return value


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def count(raw: object) -> float | None:
    """A non-negative counter or count (ECC errors, replays, lanes, pages)."""
    return nonnegative(raw)


def celsius(raw: object) -> float | None:
    """Temperature: amdsmi reports integer °C already (not millidegrees)."""
    return number(raw)


def watts(raw: object) -> float | None:
    """Power from amdsmi_get_power_info / gpu_metrics, already in W."""
    return nonnegative(raw)


def microwatts_to_watts(raw: object) -> float | None:
    """Power cap from amdsmi_get_power_cap_info: µW on Linux bare metal → W."""
    return _scaled(nonnegative(raw), MICRO)


def energy_joules(accumulator: object, resolution_uj: object) -> float | None:
    """Energy counter: accumulator ticks × resolution (µJ per tick) → J."""
    ticks = number(accumulator)
    resolution = number(resolution_uj)
    if ticks is None or resolution is None or ticks < 0 or resolution <= 0:
        return None
    return ticks * resolution * MICRO


def mts_to_gts(raw: object) -> float | None:
    """PCIe speed from amdsmi_get_pcie_info: MT/s → GT/s (32000 → 32, Gen5)."""
    value = number(raw)
    if value is None or value <= 0:
        return None
    return value / 1000.0


def kib_to_bytes(raw: object) -> float | None:
    """XGMI link data from amdsmi_get_link_metrics / gpu_metrics: KB (KiB) → bytes."""
    return _scaled(nonnegative(raw), KIB)


def percent_to_ratio(raw: object) -> float | None:
    """Activity in % → 0..1; above 100 % is garbage (the wrapper misses it for some calls)."""
    value = number(raw)
    if value is None or value < 0 or value > 100:
        return None
    return value / 100.0


def mhz_to_hz(raw: object) -> float | None:
    """Clock from amdsmi_get_clock_info: MHz → Hz."""
    return _scaled(nonnegative(raw), MEGA)


def nonneg_bytes(raw: object) -> float | None:
    """A size already in bytes (amdsmi_get_gpu_memory_usage/total, process memory)."""
    return nonnegative(raw)


def residency_ratio(
    residency_before: object,
    residency_after: object,
    accumulation_before: object,
    accumulation_after: object,
) -> float | None:
    """Fraction of an interval spent throttled, from two gpu_metrics samples.

    AMD's formula (amdsmi.h): ``Δ<reason>_residency_acc / Δaccumulation_counter``. It is what
    amdsmi_get_violation_status computes after sleeping 100 ms; here the window is the poll
    interval and nothing sleeps. A counter that went backwards (reset) or did not advance
    gives None: there is no interval to measure.
    """
    r0, r1 = number(residency_before), number(residency_after)
    a0, a1 = number(accumulation_before), number(accumulation_after)
    if r0 is None or r1 is None or a0 is None or a1 is None:
        return None
    d_acc = a1 - a0
    d_res = r1 - r0
    if d_acc <= 0 or d_res < 0:
        return None
    ratio = d_res / d_acc
    if ratio > 1.0:
        return None
    return ratio


# --- XGMI ----------------------------------------------------------------------------

LINK_UP: Final = "U"
LINK_DOWN: Final = "D"
LINK_DISABLED: Final = "X"


def xgmi_link_up(raw: object) -> float | None:
    """One entry of amdsmi_get_gpu_xgmi_link_status()['status']: U → 1, D → 0, else None.

    Disabled links ("X") are not links that can be down, so they have no up/down value.
    """
    if raw == LINK_UP:
        return 1.0
    if raw == LINK_DOWN:
        return 0.0
    return None


def xgmi_link_states(status: object) -> dict[str, float] | None:
    """Counts of links by state (up, down, disabled) from the status list; None if unusable."""
    if not isinstance(status, list | tuple):
        return None
    counts = {"up": 0.0, "down": 0.0, "disabled": 0.0}
    for entry in status:
        if entry == LINK_UP:
            counts["up"] += 1
        elif entry == LINK_DOWN:
            counts["down"] += 1
        elif entry == LINK_DISABLED:
            counts["disabled"] += 1
        else:
            return None
    return counts


def xgmi_error_status(raw: object) -> float | None:
    """amdsmi_gpu_xgmi_error_status: 0 no errors, 1 error, 2 multiple errors."""
    value = number(raw)
    if value is None or value not in (0.0, 1.0, 2.0):
        return None
    return value


# --- ECC and bad pages -----------------------------------------------------------------

ECC_TYPES: Final = (
    ("correctable", "correctable_count"),
    ("uncorrectable", "uncorrectable_count"),
    ("deferred", "deferred_count"),
)

PAGE_STATUSES: Final = {0: "reserved", 1: "pending", 2: "unreservable"}


def enabled_blocks(mask: object, blocks: Mapping[str, int]) -> dict[str, bool] | None:
    """Which RAS blocks have ECC enabled, from the amdsmi_get_gpu_ecc_enabled bitmask.

    ``blocks`` maps block names to their AmdSmiGpuBlock bit values.
    """
    value = number(mask)
    if value is None or value < 0 or value != int(value):
        return None
    bits = int(value)
    return {name: bool(bits & bit) for name, bit in blocks.items()}


def bad_pages_by_status(records: object) -> dict[str, float] | None:
    """Retired-page counts per status from amdsmi_get_gpu_bad_page_info; [] is zero pages."""
    if not isinstance(records, list | tuple):
        return None
    counts = dict.fromkeys(PAGE_STATUSES.values(), 0.0)
    for record in records:
        if not isinstance(record, Mapping):
            return None
        status = record.get("status")
        if isinstance(status, bool) or not isinstance(status, int) or status not in PAGE_STATUSES:
            return None
        counts[PAGE_STATUSES[status]] += 1
    return counts


# --- identity --------------------------------------------------------------------------

_MODEL_RE = re.compile(r"\bMI\s?(\d{3})([A-Z]?)\b", re.IGNORECASE)


def text(raw: object) -> str | None:
    """A usable identity string: None for "N/A", empty strings and non-strings."""
    if not isinstance(raw, str):
        return None
    value = raw.strip()
    if not value or value.upper() == NA:
        return None
    return value


def normalise_model(*names: object) -> str | None:
    """The product family (MI300X, MI325X, MI350X, MI355X, …) from market/product names.

    The first name that mentions an Instinct part wins: "AMD Instinct MI355X OAM" → MI355X.
    """
    for raw in names:
        name = text(raw)
        if name is None:
            continue
        match = _MODEL_RE.search(name)
        if match:
            return f"MI{match.group(1)}{match.group(2).upper()}"
    return None


def hive_id(raw: object) -> str | None:
    """XGMI hive id as a hex string; 0 (not in a hive), sentinels and junk → None."""
    value = number(raw)
    if value is None or value <= 0 or value != int(value):
        return None
    return f"0x{int(value):x}"


def index_value(raw: object) -> int | None:
    """A KFD/HIP index: a non-negative int, or None."""
    value = number(raw)
    if value is None or value < 0 or value != int(value):
        return None
    return int(value)


def process_memory(processes: Iterable[Mapping[str, object]]) -> float | None:
    """Total memory held by GPU processes (the ``mem`` field, bytes); None if any is unusable."""
    total = 0.0
    for proc in processes:
        value = nonneg_bytes(proc.get("mem"))
        if value is None:
            return None
        total += value
    return total


def link_count(num_links: object, links: Sequence[object]) -> int:
    """How many entries of amdsmi_get_link_metrics()['links'] are real links.

    The wrapper always returns 8 entries (the C struct holds 64); ``num_links`` says how
    many are filled. A bad ``num_links`` means none can be trusted.
    """
    value = number(num_links)
    if value is None or value < 0 or value != int(value):
        return 0
    return min(int(value), len(links))
