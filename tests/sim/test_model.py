"""The model: values move plausibly with load, with inertia, and deterministically."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fleetd.clock import FakeClock
from fleetd.sim import SimulatedAmdSmi, build_node
from fleetd.sim.physics import relax, relax_integral, time_above

from .snapshot import snapshot


def node_at(load: float, seconds: float, model: str = "MI355X", seed: int = 1) -> Any:
    clock = FakeClock()
    node = build_node(model, seed=seed, clock=clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    node.set_load(None, load)
    clock.advance(seconds)
    return clock, node, amdsmi, amdsmi.amdsmi_get_processor_handles()[0]


def hotspot(a: SimulatedAmdSmi, h: Any) -> int:
    t = a.AmdSmiTemperatureType.HOTSPOT
    return a.amdsmi_get_temp_metric(h, t, a.AmdSmiTemperatureMetric.CURRENT)


@pytest.mark.parametrize("model", ["MI355X", "MI300X"])
def test_load_drives_power_temperature_clocks_and_activity(model: str) -> None:
    _, _, idle, hi = node_at(0.0, 900, model)
    _, _, busy, hb = node_at(1.0, 900, model)
    cap_w = idle.amdsmi_get_power_cap_info(hi)["power_cap"] / 1e6
    p_idle = idle.amdsmi_get_power_info(hi)["current_socket_power"]
    p_busy = busy.amdsmi_get_power_info(hb)["current_socket_power"]
    assert 0.08 * cap_w < p_idle < 0.3 * cap_w
    assert 0.8 * cap_w < p_busy < cap_w
    assert hotspot(idle, hi) + 25 < hotspot(busy, hb)
    crit = busy.amdsmi_get_temp_metric(
        hb, busy.AmdSmiTemperatureType.HOTSPOT, busy.AmdSmiTemperatureMetric.CRITICAL
    )
    assert hotspot(busy, hb) < crit  # full load is hot but healthy
    gfx = busy.AmdSmiClkType.GFX
    assert idle.amdsmi_get_clock_info(hi, gfx)["clk_deep_sleep"] == 1
    busy_clock = busy.amdsmi_get_clock_info(hb, gfx)
    assert busy_clock["clk"] > 0.9 * busy_clock["max_clk"] and busy_clock["clk_deep_sleep"] == 0
    assert idle.amdsmi_get_gpu_activity(hi)["gfx_activity"] == 0
    assert busy.amdsmi_get_gpu_activity(hb)["gfx_activity"] >= 97
    assert busy.amdsmi_get_violation_status(hb)["active_ppt_pwr"] is False


def test_temperature_has_thermal_inertia() -> None:
    clock, node, a, h = node_at(0.0, 600)
    start = hotspot(a, h)
    node.set_load(None, 1.0)
    clock.advance(5)
    early = hotspot(a, h)
    clock.advance(600)
    final = hotspot(a, h)
    assert start < early < start + (final - start) / 2
    assert final - start > 30


def test_energy_accumulates_the_power_drawn() -> None:
    clock, _, a, h = node_at(0.7, 300)
    before = a.amdsmi_get_energy_count(h)
    power = a.amdsmi_get_power_info(h)["current_socket_power"]
    clock.advance(600)
    after = a.amdsmi_get_energy_count(h)
    ticks = after["energy_accumulator"] - before["energy_accumulator"]
    joules = ticks * after["counter_resolution"] / 1e6
    assert joules == pytest.approx(power * 600, rel=0.02)
    assert after["timestamp"] - before["timestamp"] == 600 * 10**9
    metrics = a.amdsmi_get_gpu_metrics_info(h)
    assert metrics["energy_accumulator"] == after["energy_accumulator"]


def test_xgmi_traffic_and_residency_counters_grow_only_when_they_should() -> None:
    clock, node, a, h = node_at(0.0, 60)
    links = a.amdsmi_get_link_metrics(h)["links"]
    clock.advance(60)
    assert a.amdsmi_get_link_metrics(h)["links"] == links  # idle: no traffic
    node.set_load(None, 0.5)
    clock.advance(60)
    grown = a.amdsmi_get_link_metrics(h)["links"]
    for new, old in zip(grown[:7], links[:7], strict=True):
        assert new["read"] > old["read"] and new["write"] > old["write"]
    m1 = a.amdsmi_get_gpu_metrics_info(h)
    clock.advance(10)
    m2 = a.amdsmi_get_gpu_metrics_info(h)
    assert m2["accumulation_counter"] - m1["accumulation_counter"] == 1000
    assert m2["firmware_timestamp"] > m1["firmware_timestamp"]
    assert m2["ppt_residency_acc"] == m1["ppt_residency_acc"] == 0
    deltas = [
        b - c
        for b, c in zip(m2["xgmi_read_data_acc"][:7], m1["xgmi_read_data_acc"][:7], strict=True)
    ]
    assert all(d > 0 for d in deltas) and m2["xgmi_read_data_acc"][7] == 0


def test_vram_used_follows_the_processes() -> None:
    _, node, a, h = node_at(0.0, 10)
    base = a.amdsmi_get_gpu_memory_usage(h, a.AmdSmiMemoryType.VRAM)
    node.add_process(0, 100, "vllm", 200 << 30)
    assert a.amdsmi_get_gpu_memory_usage(h, a.AmdSmiMemoryType.VRAM) == base + (200 << 30)
    assert a.amdsmi_get_gpu_vram_usage(h)["vram_used"] == (base + (200 << 30)) >> 20
    total = a.amdsmi_get_gpu_memory_total(h, a.AmdSmiMemoryType.VRAM)
    node.add_process(0, 101, "greedy", 400 << 30)
    assert a.amdsmi_get_gpu_memory_usage(h, a.AmdSmiMemoryType.VRAM) == total


def test_same_seed_same_readings_different_seed_different_node() -> None:
    def run(seed: int) -> dict[str, Any]:
        clock = FakeClock()
        node = build_node("MI300X", seed=seed, clock=clock)
        a = SimulatedAmdSmi(node)
        a.amdsmi_init()
        node.set_load(None, 0.4)
        clock.advance(37.5)
        node.set_load(3, 0.9)
        node.inject(5, "ecc_ce_storm", rate_per_s=3.3)
        clock.advance(400)
        return snapshot(a)

    first, second, other = run(9), run(9), run(10)
    assert first == second
    serial = "0000:05:00.0/amdsmi_get_gpu_asic_info/asic_serial"
    assert first[serial] != other[serial]


def test_readings_do_not_depend_on_how_often_they_are_read() -> None:
    def final(step: float) -> dict[str, Any]:
        clock = FakeClock()
        node = build_node(seed=2, clock=clock)
        a = SimulatedAmdSmi(node)
        a.amdsmi_init()
        node.set_load(None, 0.8)
        node.inject(1, "thermal_runaway")
        h = a.amdsmi_get_processor_handles()
        elapsed = 0.0
        while elapsed < 600:
            clock.advance(step)
            elapsed += step
            a.amdsmi_get_gpu_metrics_info(h[1])
        return a.amdsmi_get_gpu_metrics_info(h[1])

    coarse, fine = final(100.0), final(2.5)
    for key in ("energy_accumulator", "socket_thm_residency_acc", "xgmi_read_data_acc"):
        assert coarse[key] == pytest.approx(fine[key], rel=1e-6), key


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    value=st.floats(20, 120),
    target=st.floats(20, 150),
    tau=st.floats(1, 100),
    dt=st.floats(0.01, 500),
    threshold=st.floats(30, 130),
)
def test_closed_forms_match_numeric_integration(
    value: float, target: float, tau: float, dt: float, threshold: float
) -> None:
    assume(abs(target - threshold) > 1e-3 and abs(value - threshold) > 1e-3)  # not asymptotes
    steps = 1500
    h = dt / steps
    above = 0.0
    area = 0.0
    for i in range(steps):
        v = relax(value, target, tau, (i + 0.5) * h)
        above += h if v >= threshold else 0.0
        area += v * h
    assert time_above(value, target, tau, dt, threshold) == pytest.approx(above, abs=2 * h + 1e-9)
    assert relax_integral(value, target, tau, dt) == pytest.approx(area, rel=1e-4, abs=1e-6)
    assert math.isclose(relax(value, target, tau, 0.0), value)
