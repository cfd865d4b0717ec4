"""Scenarios: shipped files load, run instantly on a FakeClock, and bad files fail clearly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.errors import ConfigError
from fleetd.sim import (
    FAULT_NAMES,
    ScenarioRunner,
    SimulatedAmdSmi,
    build_node,
    load_scenario,
    parse_scenario,
    scenario_names,
    start_scenario,
)
from fleetd.sim.hardware import BDF_BUSES

REQUIRED = {
    "healthy",
    "demo",
    "thermal_runaway",
    "ecc_ce_storm",
    "ecc_uncorrectable",
    "ecc_deferred",
    "bad_pages",
    "pcie_downgrade",
    "pcie_replay_storm",
    "xgmi_link_down",
    "power_excursion",
    "hung_call",
    "unsupported_fields",
    "gpu_off_bus",
    "persistent_ecc",
}


def test_every_required_scenario_ships_and_validates() -> None:
    assert set(scenario_names()) >= REQUIRED
    injected: set[str] = set()
    for name in scenario_names():
        scenario = load_scenario(name)
        assert scenario.name == name and scenario.description
        injected |= {s.inject for s in scenario.steps if s.inject}
        injected |= {"gpu_off_bus" for s in scenario.steps if s.remove_gpu}
    assert injected == set(FAULT_NAMES)  # every fault class has a scenario


def run(name: str, step: float = 5.0) -> tuple[FakeClock, Any, ScenarioRunner, SimulatedAmdSmi]:
    clock = FakeClock()
    node, runner = start_scenario(name, clock)
    amdsmi = SimulatedAmdSmi(node)
    amdsmi.amdsmi_init()
    return clock, node, runner, amdsmi


def test_demo_shows_faults_one_after_another_and_a_reset_clears_gpu3() -> None:
    clock, node, runner, a = run("demo")
    h = a.amdsmi_get_processor_handles()
    seen: list[int] = []
    while clock.now() < runner.end:
        clock.advance(5)
        runner.advance()
        for fault in node.active_faults():
            if fault.gpu not in seen:
                seen.append(fault.gpu)
    assert runner.done
    assert seen == [3, 1, 5, 0, 4, 2, 7, 6]  # one after another, on different GPUs
    umc = a.AmdSmiGpuBlock.UMC
    assert a.amdsmi_get_gpu_ecc_count(h[3], umc)["uncorrectable_count"] == 1
    a.amdsmi_reset_gpu(h[3])
    assert node.reset_count() == 1
    assert a.amdsmi_get_gpu_ecc_count(h[3], umc)["uncorrectable_count"] == 0


def test_healthy_day_stays_healthy_and_load_varies() -> None:
    clock, node, runner, a = run("healthy")
    h = a.amdsmi_get_processor_handles()
    temp, metric = a.AmdSmiTemperatureType, a.AmdSmiTemperatureMetric
    powers = []
    while clock.now() < runner.end:
        clock.advance(3600)
        runner.advance()
        for x in h[::3]:
            assert a.amdsmi_get_gpu_total_ecc_count(x)["correctable_count"] == 0
            hot = a.amdsmi_get_temp_metric(x, temp.HOTSPOT, metric.CURRENT)
            assert hot < a.amdsmi_get_temp_metric(x, temp.HOTSPOT, metric.CRITICAL)
            power = a.amdsmi_get_power_info(x)["current_socket_power"]
            assert power < 1400
            powers.append(power)
            status = a.amdsmi_get_violation_status(x)
            assert not status["active_ppt_pwr"] and not status["active_socket_thrm"]
            assert a.amdsmi_get_gpu_xgmi_link_status(x)["status"].count("U") == 7
    assert runner.done and node.active_faults() == []
    assert max(powers) - min(powers) > 400  # day and night
    assert len(a.amdsmi_get_gpu_compute_process_info()) == 8


def test_steps_land_at_their_own_time_however_coarse_the_ticks() -> None:
    def energy(step: float) -> int:
        clock, _, runner, a = run("power_excursion")
        h = a.amdsmi_get_processor_handles()[6]
        while clock.now() < runner.end:
            clock.advance(step)
            runner.advance()
        return a.amdsmi_get_energy_count(h)["energy_accumulator"]

    assert energy(300.0) == pytest.approx(energy(1.0), rel=1e-9)


def test_persistent_ecc_scenario_returns_after_every_reset() -> None:
    clock, node, runner, a = run("persistent_ecc")
    h = a.amdsmi_get_processor_handles()
    clock.advance(60)
    runner.advance()
    for _ in range(2):
        a.amdsmi_reset_gpu(h[0])
        clock.advance(10)
        assert a.amdsmi_get_gpu_total_ecc_count(h[3])["uncorrectable_count"] == 1
    assert node.reset_count() == 2


def test_any_scenario_runs_on_an_mi300x_node_too() -> None:
    clock = FakeClock()
    node, runner = start_scenario("thermal_runaway", clock, model="MI300X", seed=3)
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    clock.advance(300)
    runner.advance()
    h = a.amdsmi_get_processor_handles()[1]
    assert a.amdsmi_get_gpu_asic_info(h)["market_name"] == "AMD Instinct MI300X"
    assert a.amdsmi_get_violation_status(h)["active_socket_thrm"] is True


def test_gpu_off_bus_scenario_removes_and_returns_the_gpu() -> None:
    clock, _, runner, a = run("gpu_off_bus")
    counts = []
    for t in (30, 90, 200):
        clock.set(runner.start + t)
        runner.advance()
        a.amdsmi_shut_down()  # the library enumerates at init
        a.amdsmi_init()
        counts.append(len(a.amdsmi_get_processor_handles()))
    assert counts == [8, 7, 8]


def test_scenario_steps_drive_processes_resets_and_clears(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        "model: MI300X\n"
        "steps:\n"
        "  - {at: 0s, gpu: 2, add_process: {pid: 55, name: vllm, vram_gb: 1}}\n"
        "  - {at: 1m, gpu: 2, inject: pcie_downgrade, params: {width: 4}}\n"
        "  - {at: 2m, gpu: 2, clear: all}\n"
        "  - {at: 3m, gpu: 1, inject: hung_call, params: {function: amdsmi_get_power_info}}\n"
        "  - {at: 4m, release_hangs: true}\n"
        "  - {at: 5m, gpu: 0, reset: true}\n"
        "  - {at: 6m, remove_process: 55}\n",
        encoding="utf-8",
    )
    clock = FakeClock()
    scenario = load_scenario(path)
    assert scenario.name == "mine" and scenario.end == 360
    node = build_node(scenario.model, seed=0, clock=clock)
    runner = ScenarioRunner(node, scenario, start=clock.now())
    a = SimulatedAmdSmi(node)
    a.amdsmi_init()
    h = a.amdsmi_get_processor_handles()[2]
    widths = []
    for t in (30, 90, 150):
        clock.set(runner.start + t)
        runner.advance()
        widths.append(a.amdsmi_get_pcie_info(h)["pcie_metric"]["pcie_width"])
    assert widths == [16, 4, 16]
    clock.set(runner.start + 250)
    runner.advance()
    hang = node.hang_for(1, "amdsmi_get_power_info")
    assert hang is not None and hang.release.is_set()  # released, still active
    clock.set(runner.start + 330)
    runner.advance()
    assert node.reset_count() == 1 and node.killed[0].pid == 55
    assert node.hang_for(1, "amdsmi_get_power_info") is None  # the reset cleared it
    assert runner.applied[-1] == "gpu 0 reset"


BAD = """\
description: broken on purpose
modle: MI300X
steps:
  - {at: 10s, gpu: 3, inject: ecc_uncorectable}
  - at: 20s
    gpu: 1
    inject: thermal_runaway
    params:
      delta_c: hot
      colour: red
  - {at: 30s, inject: pcie_downgrade}
  - {at: soon, load: 0.5}
  - {at: 40s, gpu: 9, load: 2}
  - {at: 50s, gpu: 1, load: 0.5, clear: all}
"""


def test_a_bad_scenario_reports_every_problem_with_file_line_and_key() -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(BAD, "bad.yaml")
    text = str(err.value)
    for expected in (
        "bad.yaml:2:1: modle: unknown key",
        "bad.yaml:4:23: steps[0].inject: unknown fault 'ecc_uncorectable'; known: thermal_",
        "bad.yaml:9:7: steps[1].params.delta_c: Input should be a valid number",
        "bad.yaml:10:7: steps[1].params.colour: unknown key",
        "bad.yaml:11:5: steps[2]: a step that does 'inject' needs a single 'gpu' index",
        "bad.yaml:12:6: steps[3].at: invalid duration 'soon'",
        "bad.yaml:13:15: steps[4].gpu: GPU index must be 0..7 or 'all'",
        "bad.yaml:13:23: steps[4].load: Input should be less than or equal to 1",
        "bad.yaml:14:5: steps[5]: a step needs exactly one action",
    ):
        assert expected in text, (expected, text)


def test_unknown_scenario_names_list_the_shipped_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_scenario("no_such_thing")
    assert "no such scenario; shipped:" in str(err.value) and "demo" in str(err.value)
    with pytest.raises(ConfigError) as missing:
        load_scenario("/nonexistent/file.yaml")
    assert "cannot read" in str(missing.value)


def test_fault_parameters_are_checked_in_python_too() -> None:
    node = build_node(seed=0, clock=FakeClock())
    with pytest.raises(ValueError, match="unknown fault"):
        node.inject(0, "meltdown")
    with pytest.raises(ValueError):
        node.inject(0, "hung_call", function="amdsmi_no_such_call")
    with pytest.raises(ValueError):
        node.inject(0, "unsupported_fields", fields=["amdsmi_get_power_info.no_field"])
    with pytest.raises(ValueError):
        node.inject(0, "xgmi_link_down", link=7)
    with pytest.raises(ValueError):
        node.inject(8, "pcie_downgrade")
    assert f"0000:{BDF_BUSES[0]:02x}:00.0" == "0000:05:00.0"
