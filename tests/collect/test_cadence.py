"""Cadence tiers: slow readings every N polls with their own read time, the ECC guard, and
the calls a poll saves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleetd.clock import FakeClock
from fleetd.collect.cadence import SLOW_METRICS, metric_cadence

from .conftest import Rig, by_key, find, make_rig

SLOW_EVERY = 4


@pytest.fixture
def slow_rig(clock: FakeClock) -> Iterator[Rig]:
    r = make_rig(clock, slow_every=SLOW_EVERY)
    try:
        yield r
    finally:
        r.close()


def calls(rig: Rig) -> int:
    return sum(count for count, _ in rig.backend.meter.totals().values())


def test_slow_readings_keep_the_time_they_were_read(slow_rig: Rig) -> None:
    first = slow_rig.poll()
    read_at = first.ts
    for _ in range(SLOW_EVERY - 1):
        snap = slow_rig.poll()
        cap = find(snap, "fleetd_gpu_power_cap_watts", 0)
        assert cap.ts == read_at and cap.value is not None  # still published, honestly aged
        assert find(snap, "fleetd_gpu_power_watts", 0).ts == snap.ts  # fast: every poll
        assert find(snap, "fleetd_gpu_clock_hertz", 0, domain="gfx").ts == read_at
    snap = slow_rig.poll()  # the N-th poll reads them again
    assert find(snap, "fleetd_gpu_power_cap_watts", 0).ts == snap.ts
    assert find(snap, "fleetd_gpu_retired_pages", 0, status="pending").ts == snap.ts
    # every series of the poll is still there: nothing vanishes between slow reads
    assert set(by_key(first)) == set(by_key(snap))


def test_a_moved_ecc_total_reads_the_blocks_in_the_same_poll(slow_rig: Rig) -> None:
    slow_rig.poll()
    slow_rig.poll()
    slow_rig.node.inject(3, "ecc_uncorrectable", count=2, block="UMC")
    snap = slow_rig.poll()  # not a slow poll, but GPU 3's total moved
    block = find(snap, "fleetd_gpu_ecc_block_errors_total", 3, block="umc", type="uncorrectable")
    assert block.ts == snap.ts and block.value == 2
    pending = find(snap, "fleetd_gpu_retired_pages", 3, status="pending")
    assert pending.ts == snap.ts and pending.value == 1
    quiet = find(snap, "fleetd_gpu_ecc_block_errors_total", 2, block="umc", type="uncorrectable")
    assert quiet.ts < snap.ts  # the other GPUs wait for their slow poll


def test_the_slow_tier_saves_calls(clock: FakeClock) -> None:
    every, slow = make_rig(clock, slow_every=1), make_rig(FakeClock(), slow_every=SLOW_EVERY)
    try:
        for rig in (every, slow):
            rig.poll()  # discovery and the first (full) poll
        before = calls(every), calls(slow)
        for _ in range(SLOW_EVERY * 3):
            every.poll()
            slow.poll()
        per_poll_every = (calls(every) - before[0]) / (SLOW_EVERY * 3) / 8
        per_poll_slow = (calls(slow) - before[1]) / (SLOW_EVERY * 3) / 8
        assert per_poll_every > 20
        assert per_poll_slow < per_poll_every - 9  # 13 slow calls per GPU, 1 in 4 polls
    finally:
        every.close()
        slow.close()


def test_metric_cadence_names_the_slow_metrics_for_the_rules() -> None:
    assert metric_cadence(1) == ()
    cadence = dict(metric_cadence(12))
    assert set(cadence) == SLOW_METRICS and set(cadence.values()) == {12}
    assert "fleetd_gpu_ecc_errors_total" not in cadence  # the guard is read every poll


def test_the_metrics_table_gives_the_same_readings_for_fewer_calls(clock: FakeClock) -> None:
    """Temperatures, power, energy and activity from gpu_metrics equal what their own calls
    give (the simulator computes both from one state), and a poll makes five calls fewer per
    GPU; the edge sensor, N/A in the MI3xx table, is missing, never zero."""
    calls_rig = make_rig(clock, model="MI300X")
    table_rig = make_rig(FakeClock(), model="MI300X", metrics_table=True)
    try:
        snaps = [calls_rig.poll(), table_rig.poll()]
        before = calls(calls_rig), calls(table_rig)
        snaps = [calls_rig.poll(), table_rig.poll()]
        spent = calls(calls_rig) - before[0], calls(table_rig) - before[1]
        assert spent[0] - spent[1] == 8 * 5  # hotspot, HBM, power, energy, activity
        for metric, labels in (
            ("fleetd_gpu_temperature_celsius", {"sensor": "hotspot"}),
            ("fleetd_gpu_temperature_celsius", {"sensor": "hbm"}),
            ("fleetd_gpu_power_watts", {}),
            ("fleetd_gpu_energy_joules_total", {}),
            ("fleetd_gpu_utilization_ratio", {"engine": "gfx"}),
            ("fleetd_gpu_utilization_ratio", {"engine": "memory"}),
        ):
            for gpu in (0, 5):
                a = find(snaps[0], metric, gpu, **labels)
                b = find(snaps[1], metric, gpu, **labels)
                assert a.value is not None and a.value == b.value, (metric, labels, a, b)
        edge = find(snaps[1], "fleetd_gpu_temperature_celsius", 0, sensor="edge")
        assert edge.value is None and edge.reason == "na"
    finally:
        calls_rig.close()
        table_rig.close()
