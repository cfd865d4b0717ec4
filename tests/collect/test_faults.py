"""Each simulated fault class changes exactly the readings it should, and nothing else.

Two identical simulated nodes (same model, seed, load and clock) are polled side by side;
one gets the fault. Every reading of the two snapshots is compared: the expected readings
must change in the expected way, and every other reading — other metrics of the faulty GPU
and every reading of the other GPUs — must be identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from fleetd.clock import FakeClock

from .conftest import Key, Rig, by_key, find, gpu_of, make_rig

FAULTY = 3
PEER_OF_LINK0 = 0  # GPU 3's XGMI link 0 leads to GPU 0 (its link 2); ports are per GPU index


@dataclass
class Twins:
    clock: FakeClock
    base: Rig
    faulty: Rig

    def run(self, kind: str, advance: float, **params: object):
        self.base.poller.poll(self.clock.now())
        self.faulty.poller.poll(self.clock.now())
        self.faulty.node.inject(FAULTY, kind, **params)
        self.clock.advance(advance)
        now = self.clock.now()
        return self.base.poller.poll(now), self.faulty.poller.poll(now)


@pytest.fixture
def twins(clock: FakeClock) -> Iterator[Twins]:
    pair = Twins(clock, make_rig(clock), make_rig(clock))
    try:
        yield pair
    finally:
        pair.base.close()
        pair.faulty.close()


def changed(base, faulty) -> set[Key]:
    a, b = by_key(base), by_key(faulty)
    assert a.keys() == b.keys(), "a fault must never add or drop a series"
    return {k for k in a if (a[k].value, a[k].reason) != (b[k].value, b[k].reason)}


def only(gpus: set[int], metrics: set[str]) -> Callable[[Key], bool]:
    return lambda k: gpu_of(k) in gpus and k[0] in metrics


def v(snapshot, metric: str, gpu: int = FAULTY, **labels: str) -> float | None:
    return find(snapshot, metric, gpu, **labels).value


def test_thermal_runaway_heats_and_throttles_only_that_gpu(twins: Twins):
    base, faulty = twins.run("thermal_runaway", 180.0, delta_c=70.0)
    allowed = only(
        {FAULTY},
        {
            "fleetd_gpu_temperature_celsius",
            "fleetd_gpu_throttle_residency_total",
            "fleetd_gpu_throttle_ratio",
            "fleetd_gpu_clock_hertz",
            "fleetd_gpu_power_watts",
            "fleetd_gpu_energy_joules_total",
        },
    )
    diff = changed(base, faulty)
    assert all(allowed(k) for k in diff), sorted(k for k in diff if not allowed(k))
    for sensor in ("hotspot", "hbm", "vr"):
        m = "fleetd_gpu_temperature_celsius"
        assert v(faulty, m, sensor=sensor) > v(base, m, sensor=sensor)
    critical = v(faulty, "fleetd_gpu_temperature_limit_celsius", sensor="hotspot", limit="critical")
    assert v(faulty, "fleetd_gpu_temperature_celsius", sensor="hotspot") >= critical - 5
    assert v(faulty, "fleetd_gpu_throttle_ratio", reason="socket_thermal") > 0
    assert v(base, "fleetd_gpu_throttle_ratio", reason="socket_thermal") == 0
    assert v(faulty, "fleetd_gpu_clock_hertz", domain="gfx") < v(
        base, "fleetd_gpu_clock_hertz", domain="gfx"
    )


@pytest.mark.parametrize(
    ("kind", "type_", "amount"),
    [("ecc_ce_storm", "correctable", 600.0), ("ecc_deferred", "deferred", 3.0)],
)
def test_ecc_errors_count_in_total_and_block(twins: Twins, kind: str, type_: str, amount: float):
    base, faulty = twins.run(kind, 30.0)
    assert changed(base, faulty) == {
        ("fleetd_gpu_ecc_errors_total", (("gpu", "3"), ("type", type_))),
        ("fleetd_gpu_ecc_block_errors_total", (("block", "umc"), ("gpu", "3"), ("type", type_))),
    }
    assert v(faulty, "fleetd_gpu_ecc_errors_total", type=type_) == amount
    assert v(faulty, "fleetd_gpu_ecc_block_errors_total", block="umc", type=type_) == amount


@pytest.mark.parametrize(("block", "retires_page"), [("UMC", True), ("XGMI_WAFL", False)])
def test_uncorrectable_error_counts_and_hbm_errors_leave_a_pending_page(
    twins: Twins, block: str, retires_page: bool
):
    base, faulty = twins.run("ecc_uncorrectable", 10.0, block=block)
    expected = {
        ("fleetd_gpu_ecc_errors_total", (("gpu", "3"), ("type", "uncorrectable"))),
        (
            "fleetd_gpu_ecc_block_errors_total",
            (("block", block.lower()), ("gpu", "3"), ("type", "uncorrectable")),
        ),
    }
    if retires_page:
        expected.add(("fleetd_gpu_retired_pages", (("gpu", "3"), ("status", "pending"))))
    assert changed(base, faulty) == expected
    assert v(faulty, "fleetd_gpu_ecc_errors_total", type="uncorrectable") == 1
    assert v(faulty, "fleetd_gpu_retired_pages", status="pending") == (1 if retires_page else 0)


def test_bad_pages_retire_towards_the_threshold(twins: Twins):
    base, faulty = twins.run("bad_pages", 60.0, rate_per_s=2.0, count=50)
    assert changed(base, faulty) == {
        ("fleetd_gpu_retired_pages", (("gpu", "3"), ("status", "reserved")))
    }
    assert v(faulty, "fleetd_gpu_retired_pages", status="reserved") == 50
    assert v(faulty, "fleetd_gpu_retired_pages_threshold") == 612  # MI355X driver threshold


def test_pcie_downgrade_shows_current_below_max(twins: Twins):
    base, faulty = twins.run("pcie_downgrade", 5.0)
    assert changed(base, faulty) == {
        ("fleetd_gpu_pcie_link_width_lanes", (("gpu", "3"),)),
        ("fleetd_gpu_pcie_link_speed_gigatransfers_per_second", (("gpu", "3"),)),
    }
    assert v(faulty, "fleetd_gpu_pcie_link_width_lanes") == 8
    assert v(faulty, "fleetd_gpu_pcie_link_max_width_lanes") == 16
    assert v(faulty, "fleetd_gpu_pcie_link_speed_gigatransfers_per_second") == 16
    assert v(faulty, "fleetd_gpu_pcie_link_max_speed_gigatransfers_per_second") == 32


def test_pcie_replay_storm_moves_only_link_error_counters(twins: Twins):
    base, faulty = twins.run("pcie_replay_storm", 30.0)
    counters = {
        "fleetd_gpu_pcie_replays_total",
        "fleetd_gpu_pcie_replay_rollovers_total",
        "fleetd_gpu_pcie_l0_recoveries_total",
        "fleetd_gpu_pcie_naks_sent_total",
        "fleetd_gpu_pcie_naks_received_total",
    }
    assert changed(base, faulty) == {(m, (("gpu", "3"),)) for m in counters}
    assert v(faulty, "fleetd_gpu_pcie_replays_total") == 15000
    assert v(base, "fleetd_gpu_pcie_replays_total") == 0


def test_xgmi_link_down_on_both_ends(twins: Twins):
    base, faulty = twins.run("xgmi_link_down", 5.0, link=0)
    # link status is per port (port j leads to GPU j); traffic per amdsmi_get_link_metrics
    # entry, in peer order (GPU 3's entry 0 is GPU 0, GPU 0's entry 2 is GPU 3)
    per_port = {"fleetd_gpu_xgmi_link_up"}
    per_link = {"fleetd_gpu_xgmi_read_bytes_total", "fleetd_gpu_xgmi_write_bytes_total"}
    link_ends = {(FAULTY, "0"), (PEER_OF_LINK0, "2")}
    # MI355X (gfx950): the fault shows as XGMI_WAFL RAS counts, the error status is unreadable
    per_gpu = {
        "fleetd_gpu_xgmi_links",
        "fleetd_gpu_ecc_errors_total",
        "fleetd_gpu_ecc_block_errors_total",
    }
    ends = {(FAULTY, str(PEER_OF_LINK0)), (PEER_OF_LINK0, str(FAULTY))}  # the port to the peer
    for k in changed(base, faulty):
        link = dict(k[1]).get("link")
        block = dict(k[1]).get("block", "xgmi_wafl")
        assert (
            (k[0] in per_port and (gpu_of(k), link) in ends)
            or (k[0] in per_link and (gpu_of(k), link) in link_ends)
            or (k[0] in per_gpu and gpu_of(k) in {FAULTY, PEER_OF_LINK0} and block == "xgmi_wafl")
        ), k
    for gpu, link in ends:
        assert v(faulty, "fleetd_gpu_xgmi_link_up", gpu, link=link) == 0
        assert v(base, "fleetd_gpu_xgmi_link_up", gpu, link=link) == 1
        assert v(faulty, "fleetd_gpu_xgmi_links", gpu, state="down") == 2  # + its own port
        assert v(faulty, "fleetd_gpu_xgmi_links", gpu, state="up") == 6
        wafl = {"block": "xgmi_wafl"}
        assert v(faulty, "fleetd_gpu_ecc_block_errors_total", gpu, **wafl, type="correctable") == 4
        assert (
            v(faulty, "fleetd_gpu_ecc_block_errors_total", gpu, **wafl, type="uncorrectable") == 1
        )
    assert not [r for r in faulty.readings if r.metric == "fleetd_gpu_xgmi_error_status"]
    assert v(faulty, "fleetd_gpu_xgmi_link_up", FAULTY, link="1") == 1


def test_power_excursion_pins_power_at_cap_and_throttles_ppt(twins: Twins):
    base, faulty = twins.run("power_excursion", 30.0)
    allowed = only(
        {FAULTY},
        {
            "fleetd_gpu_power_watts",
            "fleetd_gpu_energy_joules_total",
            "fleetd_gpu_temperature_celsius",
            "fleetd_gpu_throttle_residency_total",
            "fleetd_gpu_throttle_ratio",
            "fleetd_gpu_clock_hertz",
        },
    )
    diff = changed(base, faulty)
    assert all(allowed(k) for k in diff), sorted(k for k in diff if not allowed(k))
    assert v(faulty, "fleetd_gpu_power_watts") == v(faulty, "fleetd_gpu_power_cap_watts") == 1400
    assert v(faulty, "fleetd_gpu_throttle_ratio", reason="ppt") == pytest.approx(1.0)
    assert v(faulty, "fleetd_gpu_energy_joules_total") > v(base, "fleetd_gpu_energy_joules_total")


def test_unsupported_fields_and_calls_go_missing_alone(twins: Twins):
    base, faulty = twins.run(
        "unsupported_fields",
        5.0,
        fields=[
            "amdsmi_get_power_info.current_socket_power",
            "amdsmi_get_pcie_info.pcie_metric.pcie_width",
        ],
        calls=["amdsmi_get_gpu_total_ecc_count", "amdsmi_get_temp_metric:VRAM"],
    )
    missing = {
        ("fleetd_gpu_power_watts", (("gpu", "3"),)): "sentinel",
        ("fleetd_gpu_pcie_link_width_lanes", (("gpu", "3"),)): "na",
        ("fleetd_gpu_temperature_celsius", (("gpu", "3"), ("sensor", "hbm"))): "not_supported",
    }
    for type_ in ("correctable", "uncorrectable", "deferred"):
        missing[("fleetd_gpu_ecc_errors_total", (("gpu", "3"), ("type", type_)))] = "not_supported"
    counts = {
        ("fleetd_gpu_readings_missing", (("collector", c), ("gpu", "3")))
        for c in ("power", "pcie", "ecc", "temperature")
    }
    assert changed(base, faulty) == set(missing) | counts
    got = by_key(faulty)
    for k, reason in missing.items():
        assert got[k].value is None and got[k].reason == reason, k
    assert got[("fleetd_gpu_readings_missing", (("collector", "ecc"), ("gpu", "3")))].value == 3
    # limits were cached before the fault: the HBM limits stay known
    assert v(faulty, "fleetd_gpu_temperature_limit_celsius", sensor="hbm", limit="critical") == 100


@pytest.mark.parametrize(("status", "reason"), [("NO_PERM", "no_perm"), ("BUSY", "busy")])
def test_failing_call_status_becomes_the_reason(twins: Twins, status: str, reason: str):
    base, faulty = twins.run(
        "unsupported_fields", 5.0, calls=["amdsmi_get_gpu_metrics_info"], status=status
    )
    got = by_key(faulty)
    for k in changed(base, faulty):
        if k[0] == "fleetd_gpu_readings_missing":
            continue
        assert gpu_of(k) == FAULTY
        assert got[k].value is None and got[k].reason == reason, k
    # gpu_metrics feeds the VR temperature and every throttle reading, nothing else
    assert v(faulty, "fleetd_gpu_temperature_celsius", sensor="vr") is None
    assert v(faulty, "fleetd_gpu_throttle_ratio", reason="ppt") is None
    assert v(faulty, "fleetd_gpu_temperature_celsius", sensor="hotspot") is not None
