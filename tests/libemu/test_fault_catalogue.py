"""Every fault class of the simulator, and every shipped scenario, through both faces.

The real amdsmi package over the emulated library and the stand-in read one node; their
whole surfaces must agree — values, types, "N/A"s, raw sentinels, exceptions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.sim import FAULT_NAMES, SimNode, SimulatedAmdSmi, build_node, start_scenario
from fleetd.sim.faults import UnsupportedFields
from fleetd.sim.libemu import EmulatedLibrary, SimProvider
from fleetd.sim.scenario import scenario_names

from .conftest import Faces
from .surface import differences, read_surface

# One parameter set per fault kind (defaults where they make a visible difference).
FAULT_CASES: dict[str, dict[str, Any]] = {
    "thermal_runaway": {},
    "ecc_ce_storm": {"rate_per_s": 30.0, "block": "UMC"},
    "ecc_uncorrectable": {"count": 2},
    "ecc_deferred": {"count": 3, "block": "GFX"},
    "bad_pages": {"rate_per_s": 2.0, "count": 6, "status": "pending"},
    "pcie_downgrade": {"width": 4, "speed_mts": 8000},
    "pcie_replay_storm": {"rate_per_s": 800.0},
    "xgmi_link_down": {"link": 3},
    "power_excursion": {"demand_w": 1700.0},
    "hung_call": {"function": "amdsmi_get_gpu_metrics_info"},
    "unsupported_fields": {
        "fields": [
            "amdsmi_get_power_info.current_socket_power",
            "amdsmi_get_power_info.socket_power",
            "amdsmi_get_gpu_metrics_info.temperature_hotspot",
            "amdsmi_get_gpu_metrics_info.throttle_status",
            "amdsmi_get_gpu_metrics_info.xcp_stats.gfx_busy_inst",
            "amdsmi_get_pcie_info.pcie_metric.pcie_replay_count",
            "amdsmi_get_violation_status.active_ppt_pwr",
            "amdsmi_get_gpu_process_list.cu_occupancy",
            "amdsmi_get_gpu_asic_info.subsystem_id",
            "amdsmi_get_clock_info.clk_locked",
        ],
        "calls": ["amdsmi_get_temp_metric:VRAM", "amdsmi_get_gpu_ecc_count:UMC"],
    },
    "gpu_off_bus": {},
    "ring_timeout": {"ring": "gfx_0.0.0", "pid": 5005},
    "vm_fault": {"pid": 5005, "process": "vllm-worker-5"},
    "firmware_failure": {},
}
STATUSES = UnsupportedFields.model_fields["status"].annotation.__args__  # type: ignore[union-attr]


def assert_agree(faces: Faces, stale: dict[str, Any] | None = None) -> None:
    pids = [p.pid for p in faces.node.processes()] + [31337]
    real_stale = {bdf: h for bdf, (_, h) in (stale or {}).items()}
    sim_stale = {bdf: h for bdf, (h, _) in (stale or {}).items()}
    stand_in = read_surface(faces.sim, pids, sim_stale)
    real = read_surface(faces.real, pids, real_stale)
    assert differences(stand_in, real) == []


def test_the_fault_cases_cover_the_whole_catalogue() -> None:
    assert set(FAULT_CASES) == set(FAULT_NAMES)


@pytest.mark.parametrize("kind", sorted(FAULT_CASES))
def test_every_fault_reads_the_same_through_both_faces(faces: Faces, kind: str) -> None:
    node, gpu = faces.node, 5
    node.add_process(gpu, pid=5005, name="vllm-worker-5", vram_bytes=120 << 30)
    stale = {
        faces.sim.amdsmi_get_gpu_device_bdf(s): (s, r)
        for s, r in zip(
            faces.sim.amdsmi_get_processor_handles(),
            faces.real.amdsmi_get_processor_handles(),
            strict=True,
        )
    }
    node.inject(gpu, kind, **FAULT_CASES[kind])
    faces.clock.advance(45)
    if kind == "hung_call":
        node.release_hangs()  # the blocking itself: test_a_hung_call_blocks_only_its_caller
    assert_agree(faces, stale)


@pytest.mark.parametrize("status", STATUSES)
def test_every_call_status_surfaces_the_same(faces: Faces, status: str) -> None:
    faces.node.inject(
        1,
        "unsupported_fields",
        status=status,
        calls=[
            "amdsmi_get_power_info",
            "amdsmi_get_gpu_metrics_info",
            "amdsmi_get_gpu_cper_entries",
            "amdsmi_get_clock_info:GFX",
            "amdsmi_get_gpu_process_list",
        ],
    )
    assert_agree(faces)


def test_u16_sentinels_surface_the_same(faces: Faces) -> None:
    faces.node.inject(
        3,
        "unsupported_fields",
        sentinel="u16_max",
        fields=[
            "amdsmi_get_power_info.power_limit",
            "amdsmi_get_gpu_activity.gfx_activity",
            "amdsmi_get_pcie_info.pcie_static.max_pcie_width",
        ],
    )
    assert_agree(faces)


def test_a_node_without_root_reads_the_same(
    clock: FakeClock, attach: Callable[[SimNode], SimProvider], real_amdsmi: Any
) -> None:
    node = build_node("MI300X", seed=4, clock=clock, root=False)
    faces = Faces(clock, node, SimulatedAmdSmi(node), real_amdsmi, attach(node))
    faces.sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    node.set_load(None, 0.3)
    clock.advance(30)
    assert_agree(faces)
    with pytest.raises(real_amdsmi.AmdSmiLibraryException) as info:
        real_amdsmi.amdsmi_reset_gpu(real_amdsmi.amdsmi_get_processor_handles()[0])
    assert info.value.get_error_code() == 10  # NO_PERM


@pytest.mark.parametrize("name", scenario_names())
def test_every_shipped_scenario_reads_the_same(
    name: str,
    clock: FakeClock,
    emulated_library: EmulatedLibrary,
    real_amdsmi: Any,
    attach: Callable[[SimNode], SimProvider],
) -> None:
    node, runner = start_scenario(name, clock)
    provider = attach(node)
    faces = Faces(clock, node, SimulatedAmdSmi(node), real_amdsmi, provider)
    faces.sim.amdsmi_init()
    real_amdsmi.amdsmi_init()
    last_step = max(step.at for step in runner.scenario.steps)
    checkpoints = {runner.start + last_step + 15.0, runner.end}
    for at in sorted(c for c in checkpoints if c <= runner.end):
        clock.advance(at - clock.now())
        runner.advance()
        node.release_hangs()
        assert_agree(faces)


def test_a_hung_call_blocks_only_its_caller(
    faces: Faces, emulated_library: EmulatedLibrary
) -> None:
    """A hang inside the provider blocks that C call; other calls keep flowing meanwhile."""

    class Spy:
        def __init__(self, inner: SimProvider) -> None:
            self.inner = inner
            self.entered = threading.Event()

        def call(self, symbol: str, raw: Any) -> int:
            if symbol == "amdsmi_get_gpu_metrics_info":
                self.entered.set()
            return self.inner.call(symbol, raw)

    spy = Spy(faces.provider)
    emulated_library.install(spy)
    amdsmi = faces.real
    handles = amdsmi.amdsmi_get_processor_handles()
    fault = faces.node.inject(4, "hung_call", function="amdsmi_get_gpu_metrics_info")
    result: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: result.update(m=amdsmi.amdsmi_get_gpu_metrics_info(handles[4]))
    )
    worker.start()
    assert spy.entered.wait(10)
    assert worker.is_alive()  # it cannot return before the hang is released
    assert amdsmi.amdsmi_get_gpu_metrics_info(handles[3])["temperature_hotspot"] != "N/A"
    assert amdsmi.amdsmi_get_power_info(handles[4])["current_socket_power"] > 0
    faces.node.clear(fault)
    worker.join(10)
    assert not worker.is_alive()
    expected = faces.sim.amdsmi_get_gpu_metrics_info(faces.sim.amdsmi_get_processor_handles()[4])
    assert result["m"] == expected


def test_processes_are_answered_from_the_same_model(faces: Faces) -> None:
    for gpu in range(8):
        faces.node.add_process(gpu, pid=7000 + gpu, name=f"vllm-worker-{gpu}", vram_bytes=90 << 30)
    faces.node.add_process(0, pid=7000, name="vllm-worker-0", vram_bytes=10 << 30)
    faces.clock.advance(20)
    real = faces.real.amdsmi_get_gpu_process_list(faces.real.amdsmi_get_processor_handles()[0])
    assert [p["pid"] for p in real] == [7000]
    assert real[0]["name"] == "vllm-worker-0" and real[0]["mem"] == 10 << 30
    assert sorted(p["process_id"] for p in faces.real.amdsmi_get_gpu_compute_process_info()) == [
        7000 + g for g in range(8)
    ]
    assert_agree(faces)
