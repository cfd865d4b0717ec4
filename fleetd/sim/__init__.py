"""fleetd.sim — a faithful stand-in for the amdsmi 7.0.2 Python package, over a simulated node.

Public API::

    from fleetd.sim import build_node, SimulatedAmdSmi, load_scenario, ScenarioRunner, FAULT_NAMES

    node = build_node("MI355X", seed=0, clock=clock)   # or "MI300X"; 8 GPUs, one XGMI hive
    amdsmi = SimulatedAmdSmi(node)                      # use wherever the amdsmi module goes
    node.set_load(None, 0.7)                            # all GPUs (or one index)
    fault_id = node.inject(3, "ecc_uncorrectable", persistent=False)
    node.clear(fault_id); node.clear_faults(gpu=3)
    node.add_process(0, pid=4242, name="vllm", vram_bytes=200 << 30, on_kill=callback)
    node.reset_count()                                  # hive resets so far
    runner = ScenarioRunner(node, load_scenario("demo"), start=clock.now())
    runner.advance()                                    # apply every step due by clock.now()
    node, runner = start_scenario("demo", clock)        # the scenario's own model and seed
    scenario_names()                                    # shipped scenarios

The model never reads real time: it advances to ``clock.now()`` on every call. Faults are
listed in ``FAULT_NAMES`` (parameters in fleetd.sim.faults). ``RawLibrary`` (fleetd.sim.raw)
is the C-level layer an emulated libamd_smi.so can drive from the same model.
"""

from fleetd.sim.face import SimulatedAmdSmi
from fleetd.sim.faults import FAULT_NAMES, FAULT_PARAMS
from fleetd.sim.hardware import SPECS, GpuSpec
from fleetd.sim.model import KilledProcess, ResetRecord, SimNode, build_node
from fleetd.sim.raw import RawLibrary, SmiStatusError
from fleetd.sim.scenario import (
    Scenario,
    ScenarioRunner,
    load_scenario,
    parse_scenario,
    scenario_names,
    start_scenario,
)

__all__ = [
    "FAULT_NAMES",
    "FAULT_PARAMS",
    "SPECS",
    "GpuSpec",
    "KilledProcess",
    "RawLibrary",
    "ResetRecord",
    "Scenario",
    "ScenarioRunner",
    "SimNode",
    "SimulatedAmdSmi",
    "SmiStatusError",
    "build_node",
    "load_scenario",
    "parse_scenario",
    "scenario_names",
    "start_scenario",
]
