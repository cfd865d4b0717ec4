"""Unit conversions and missing-value rules of fleetd.collect.parse."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetd.collect import parse

SENTINELS = [0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF]
JUNK = ["N/A", "n/a", None, True, False, "42", [1], {"a": 1}, math.nan, math.inf]


@pytest.mark.parametrize(
    "convert",
    [
        parse.number,
        parse.count,
        parse.celsius,
        parse.watts,
        parse.microwatts_to_watts,
        parse.mts_to_gts,
        parse.kib_to_bytes,
        parse.percent_to_ratio,
        parse.mhz_to_hz,
        parse.nonneg_bytes,
        parse.xgmi_error_status,
    ],
)
@pytest.mark.parametrize("raw", SENTINELS + JUNK)
def test_missing_values_never_become_numbers(convert, raw):
    assert convert(raw) is None


def test_missing_reason_names_what_was_wrong():
    assert parse.missing_reason("N/A") == parse.REASON_NA
    for raw in SENTINELS:
        assert parse.missing_reason(raw) == parse.REASON_SENTINEL
    assert parse.missing_reason(None) == parse.REASON_ABSENT
    assert parse.missing_reason("hot") == parse.REASON_WRONG_TYPE
    assert parse.missing_reason(True) == parse.REASON_WRONG_TYPE
    assert parse.missing_reason(-5) == parse.REASON_OUT_OF_RANGE
    assert parse.first_reason(12, "N/A", 0xFFFF) == parse.REASON_NA


def test_zero_is_a_value_not_missing():
    assert parse.count(0) == 0.0
    assert parse.celsius(0) == 0.0
    assert parse.percent_to_ratio(0) == 0.0


def test_temperature_is_already_celsius():
    assert parse.celsius(87) == 87.0
    assert parse.celsius(-5) == -5.0


def test_power_units():
    assert parse.watts(742) == 742.0
    assert parse.watts(-1) is None
    assert parse.microwatts_to_watts(750_000_000) == pytest.approx(750.0)
    assert parse.microwatts_to_watts(1_400_000_000) == pytest.approx(1400.0)


def test_energy_is_ticks_times_microjoules():
    assert parse.energy_joules(1_000_000, 15.259) == pytest.approx(15.259)
    assert parse.energy_joules(0, 15.259) == 0.0
    assert parse.energy_joules("N/A", 15.259) is None
    assert parse.energy_joules(0xFFFFFFFFFFFFFFFF, 15.259) is None
    assert parse.energy_joules(100, 0.0) is None
    assert parse.energy_joules(100, None) is None


def test_pcie_speed_mt_to_gt():
    assert parse.mts_to_gts(32000) == 32.0
    assert parse.mts_to_gts(16000) == 16.0
    assert parse.mts_to_gts(0) is None


def test_xgmi_kib_to_bytes():
    assert parse.kib_to_bytes(3) == 3072.0
    assert parse.kib_to_bytes(0) == 0.0


def test_percent_to_ratio_rejects_over_100():
    assert parse.percent_to_ratio(100) == 1.0
    assert parse.percent_to_ratio(37) == pytest.approx(0.37)
    assert parse.percent_to_ratio(101) is None
    assert parse.percent_to_ratio(0xFFFF) is None


def test_clock_mhz_to_hz():
    assert parse.mhz_to_hz(2100) == 2.1e9


def test_residency_ratio():
    assert parse.residency_ratio(100, 150, 1000, 1100) == pytest.approx(0.5)
    assert parse.residency_ratio(100, 100, 1000, 1100) == 0.0
    # counter reset (went backwards), no progress, inconsistent, missing
    assert parse.residency_ratio(100, 50, 1000, 1100) is None
    assert parse.residency_ratio(100, 150, 1000, 1000) is None
    assert parse.residency_ratio(100, 1000, 1000, 1100) is None
    assert parse.residency_ratio("N/A", 150, 1000, 1100) is None
    assert parse.residency_ratio(100, 150, 1000, 0xFFFFFFFFFFFFFFFF) is None


def test_xgmi_links():
    assert parse.xgmi_link_up("U") == 1.0
    assert parse.xgmi_link_up("D") == 0.0
    assert parse.xgmi_link_up("X") is None
    assert parse.xgmi_link_up("N/A") is None
    assert parse.xgmi_link_states(["U", "U", "D", "X"]) == {"up": 2, "down": 1, "disabled": 1}
    assert parse.xgmi_link_states(["U", "N/A"]) is None
    assert parse.xgmi_link_states("UUD") is None
    assert parse.xgmi_error_status(0) == 0.0
    assert parse.xgmi_error_status(2) == 2.0
    assert parse.xgmi_error_status(3) is None


def test_enabled_blocks():
    blocks = {"umc": 1, "sdma": 2, "gfx": 4, "xgmi_wafl": 128}
    assert parse.enabled_blocks(1 | 4, blocks) == {
        "umc": True,
        "sdma": False,
        "gfx": True,
        "xgmi_wafl": False,
    }
    assert parse.enabled_blocks("N/A", blocks) is None
    assert parse.enabled_blocks(0xFFFFFFFFFFFFFFFF, blocks) is None


def test_bad_pages_by_status():
    zero = {"reserved": 0, "pending": 0, "unreservable": 0}
    assert parse.bad_pages_by_status([]) == zero
    records = [
        {"value": 0, "page_address": 0x1000, "page_size": 4096, "status": 0},
        {"value": 1, "page_address": 0x2000, "page_size": 4096, "status": 0},
        {"value": 2, "page_address": 0x3000, "page_size": 4096, "status": 1},
        {"value": 3, "page_address": 0x4000, "page_size": 4096, "status": 2},
    ]
    assert parse.bad_pages_by_status(records) == {"reserved": 2, "pending": 1, "unreservable": 1}
    assert parse.bad_pages_by_status([{"status": 7}]) is None
    assert parse.bad_pages_by_status("N/A") is None


@pytest.mark.parametrize(
    ("names", "model"),
    [
        (("AMD Instinct MI300X", None), "MI300X"),
        (("N/A", "AMD Instinct MI325X OAM"), "MI325X"),
        (("AMD INSTINCT MI350X",), "MI350X"),
        (("Instinct mi355x",), "MI355X"),
        (("0x74a1", "N/A"), None),
        ((None, ""), None),
    ],
)
def test_normalise_model(names, model):
    assert parse.normalise_model(*names) == model


def test_identity_fields():
    assert parse.text("  N/A ") is None
    assert parse.text("") is None
    assert parse.text(" 692251001124 ") == "692251001124"
    assert parse.hive_id(0) is None
    assert parse.hive_id(0xFFFFFFFFFFFFFFFF) is None
    assert parse.hive_id(0x1A2B3C4D) == "0x1a2b3c4d"
    assert parse.index_value(3) == 3
    assert parse.index_value("N/A") is None
    assert parse.index_value(-1) is None


def test_process_memory_and_link_count():
    assert parse.process_memory([{"mem": 1024}, {"mem": 2048}]) == 3072.0
    assert parse.process_memory([]) == 0.0
    assert parse.process_memory([{"mem": "N/A"}]) is None
    assert parse.link_count(7, [{}] * 8) == 7
    assert parse.link_count(12, [{}] * 8) == 8
    assert parse.link_count("N/A", [{}] * 8) == 0


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_count_is_identity_or_missing_for_any_u64(raw):
    value = parse.count(raw)
    if raw in parse.SENTINELS:
        assert value is None
    else:
        assert value == float(raw)


@given(st.integers(min_value=0, max_value=100))
def test_percent_roundtrip(pct):
    assert parse.percent_to_ratio(pct) == pytest.approx(pct / 100)
