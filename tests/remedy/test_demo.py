"""The demo's remediation on the shipped demo scenario: the UE on GPU 3 is drained, reset,
verified and re-admitted while the stand-in workers serve.

The scenario is followed up to the UE (60 s) only: its later faults (a PCIe downgrade on GPU 4
at 80 s, an XGMI link down at 100 s, …) land inside the hive's verification window, and then
quarantine — not re-admission — is the right outcome (see test_e2e for that path)."""

from __future__ import annotations

from pathlib import Path

from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.remedy import machine as m
from fleetd.remedy.demo import start_demo_remediation
from fleetd.sim import ScenarioRunner, SimulatedAmdSmi, build_node, load_scenario
from fleetd.store.db import Database, sqlite_url

from .rig import ue_transition


def test_demo_scenario_fault_is_remediated_live(tmp_path: Path, clock: FakeClock) -> None:
    scenario = load_scenario("demo")
    node = build_node(scenario.model, seed=scenario.seed, clock=clock)
    runner = ScenarioRunner(node, scenario, start=clock.now())
    runner.advance()
    backend = AmdSmiBackend(SimulatedAmdSmi(node))
    poller = Poller(
        backend, default_collectors(), node="demo", gpu_timeout=5.0, timer=clock.monotonic
    )
    db = Database.open(sqlite_url(tmp_path / "fleetd.db"))
    demo = start_demo_remediation(
        FleetdConfig(),
        node=node,
        backend=backend,
        poller=poller,
        db=db,
        clock=clock,
        directory=tmp_path / "standin",
    )
    try:
        assert all(p.name == "python3 -m vllm serve" for p in node.processes())  # placeholders gone
        run_id = None
        for _ in range(400):
            clock.advance(1)
            if clock.now() <= runner.start + 65:
                runner.advance()
            demo.keep_busy()
            if run_id is None and clock.now() >= runner.start + 62:  # the rules engine's alert
                [run_id] = demo.remediation.handle([ue_transition(3, clock.now())], clock.now())
            demo.remediation.tick(clock.now())
            if run_id is not None and not demo.remediation.executor.active():
                break
        assert run_id is not None
        run = demo.remediation.run(run_id)
        assert run is not None and run.state is m.RunState.DONE, run and run.outcome
        assert node.reset_count() == 1
        assert all(w.aborted == 0 and w.in_rotation for w in demo.fleet.workers.values())
        lines = demo.timeline.lines()
        assert (
            lines[-1].startswith(" +")
            and "done: GPUs 0, 1, 2, 3, 4, 5, 6, 7 back in service" in lines[-1]
        )
    finally:
        demo.close()
        poller.close()
        backend.close()
        db.dispose()
