"""The daemon really killed with SIGKILL mid-run, then started again: the run completes once.

The daemon is a child process (daemon_child.py); the node — simulator, backend, poller,
stand-in vLLM workers and their systemctl — lives in this process and outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetd.clock import SystemClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.remedy import machine as m
from fleetd.remedy.journal import RunJournal
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.sim.vllm_worker import StandInFleet
from fleetd.store.db import Database, sqlite_url

from .remote import BackendServer
from .rig import NODE

CHILD = Path(__file__).with_name("daemon_child.py")


class Node:
    def __init__(self, tmp: Path) -> None:
        clock = SystemClock()
        self.tmp = tmp
        self.sim: SimNode = build_node("MI355X", seed=5, clock=clock)
        self.fleet = StandInFleet(tmp / "standin", clock=clock, processes=self.sim)
        self.fleet.add("gpu3", [3], model="m")
        self.backend = AmdSmiBackend(SimulatedAmdSmi(self.sim))
        self.poller = Poller(self.backend, default_collectors(), node=NODE, gpu_timeout=5.0)
        self.server = BackendServer(self.backend, self.poller)
        self.db_url = sqlite_url(tmp / "fleetd.db")
        out_url, in_url = self.fleet.rotation_urls()
        w = self.fleet.workers["gpu3"]
        self.config: dict[str, Any] = {
            "node": {"name": NODE},
            "state_dir": str(tmp),
            "vllm": {
                "workers": [
                    {"name": "gpu3", "url": w.url, "gpus": [3], "unit": w.unit, "model": "m"}
                ]
            },
            "remediation": {
                "mode": "on",
                "drain": {
                    "balancer_delay": "0.05s",
                    "poll_interval": "0.02s",
                    "release_poll_interval": "0.02s",
                },
                "verify": {"healthy_polls": 2, "poll_interval": "0.02s"},
                "readmit": {"poll_interval": "0.02s"},
                "workers": {
                    "systemctl": str(self.fleet.systemctl),
                    "rotation": {"http": {"out_url": out_url, "in_url": in_url}},
                },
            },
        }

    def daemon(self, *, fault: bool, crash: tuple[str, str] | None) -> int:
        spec = self.tmp / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "db_url": self.db_url,
                    "config": self.config,
                    "backend_url": self.server.url,
                    "fault": fault,
                    "crash": list(crash) if crash else None,
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": ""}
        done = subprocess.run([sys.executable, str(CHILD), str(spec)], env=env, timeout=180)
        return done.returncode

    def close(self) -> None:
        self.server.close()
        self.poller.close()
        self.backend.close()
        self.fleet.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash",
    [("StopUnit", "after"), ("ResetGpu", "before"), ("ResetGpu", "after"), ("StartUnit", "after")],
    ids=lambda c: "-".join(c),
)
def test_sigkill_mid_run_then_restart_completes_once(node: Node, crash: tuple[str, str]) -> None:
    node.sim.inject(3, "ecc_uncorrectable")
    assert node.daemon(fault=True, crash=crash) == -signal.SIGKILL
    assert node.daemon(fault=False, crash=None) == 0

    db = Database.open(node.db_url)
    try:
        journal = RunJournal(db)
        [run] = journal.runs(NODE)
        events = journal.events(run_id=run.run_id)
        assert journal.undelivered(NODE) == []  # every journaled event was handed out
    finally:
        db.dispose()
    assert run.resumed == 1
    assert [e.kind for e in events].count("reset_intent") == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    worker = node.fleet.workers["gpu3"]
    if crash == ("ResetGpu", "before"):
        # killed with the intent journaled and the call never made: the fault is still
        # counted, so the run ends out of service, never "done" (and never a second reset)
        assert node.sim.reset_count() == 0
        assert run.state is m.RunState.QUARANTINED, run.outcome
        assert not worker.in_rotation
        return
    assert run.state is m.RunState.DONE, run.outcome
    assert node.sim.reset_count() == 1
    assert worker.state() == "active" and worker.in_rotation


@pytest.mark.slow
def test_killed_inside_a_slow_reset_the_restarted_run_finds_the_reset_happened(
    node: Node,
) -> None:
    """The reset call blocks for 3 s and the daemon dies 1 s into it. The hive was reset
    (amdgpu's recovery does not stop with its caller); the restarted daemon must neither
    reset again nor take it on trust: the unit's RAS counters, zeroed against the baseline
    journaled before the call, show it happened, and the GPUs verify clean."""
    node.sim.reset_call_s = 3.0
    node.sim.inject(3, "ecc_uncorrectable")
    assert node.daemon(fault=True, crash=("ResetGpu", "during")) == -signal.SIGKILL
    node.sim.reset_call_s = 0.0
    assert node.daemon(fault=False, crash=None) == 0
    db = Database.open(node.db_url)
    try:
        [run] = RunJournal(db).runs(NODE)
    finally:
        db.dispose()
    assert run.state is m.RunState.DONE, run.outcome
    assert node.sim.reset_count() == 1
    assert any("counters after the reset: zeroed" in line for line in run.evidence)
    assert node.fleet.workers["gpu3"].in_rotation


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_during_the_evidence_capture_never_captures_twice_into_one_bundle(
    node: Node, when: str
) -> None:
    """Killed with the capture journaled: before it wrote anything, or after its bundle was
    in place but before its outcome was journaled. The restarted run captures again as
    attempt 2 into a new file, names that one, and resets once."""
    node.sim.inject(3, "ecc_uncorrectable")
    assert node.daemon(fault=True, crash=("CaptureEvidence", when)) == -signal.SIGKILL
    assert node.daemon(fault=False, crash=None) == 0
    db = Database.open(node.db_url)
    try:
        journal = RunJournal(db)
        [run] = journal.runs(NODE)
        kinds = [e.kind for e in journal.events(run_id=run.run_id)]
    finally:
        db.dispose()
    assert run.state is m.RunState.DONE, run.outcome
    assert node.sim.reset_count() == 1 and kinds.count("reset_intent") == 1
    assert kinds.count("evidence_capture_resumed") == 1
    [bundle] = run.bundles
    assert Path(bundle.path).name == f"{run.run_id}.pre_reset.2.json.gz"
    on_disk = sorted(p.name for p in (node.tmp / "evidence").iterdir())
    first = [f"{run.run_id}.pre_reset.1.json.gz"] if when == "after" else []
    assert on_disk == [*first, f"{run.run_id}.pre_reset.2.json.gz"]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "during", "after"])
def test_sigkill_during_validation_resumes_and_never_skips_the_validator(
    node: Node, when: str
) -> None:
    """Killed with the validator journaled: before it started, while it ran (it outlives the
    daemon in its own process group), or after it answered but before its verdict was
    journaled. The restarted run runs it again as attempt 2 and takes that verdict: the
    validator is never skipped, and the unit is reset once."""
    fixture = Path(__file__).with_name("fixtures") / "validators" / "rvs_gst_pass.txt"
    calls = node.tmp / "rvs.calls"
    tool = node.tmp / "rvs"
    tool.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nsleep 2\ncat {fixture}\n')
    tool.chmod(0o755)
    node.config["remediation"]["validation"] = {
        "validators": [
            {"name": "rvs", "kind": "rvs", "command": [str(tool), "{gpus}"], "timeout": "30s"}
        ],
        "plans": {"reset": ["rvs"]},
    }
    node.sim.inject(3, "ecc_uncorrectable")
    assert node.daemon(fault=True, crash=("RunValidator", when)) == -signal.SIGKILL
    assert node.daemon(fault=False, crash=None) == 0
    db = Database.open(node.db_url)
    try:
        journal = RunJournal(db)
        [run] = journal.runs(NODE)
        kinds = [e.kind for e in journal.events(run_id=run.run_id)]
    finally:
        db.dispose()
    assert run.state is m.RunState.DONE, run.outcome
    assert node.sim.reset_count() == 1 and kinds.count("reset_intent") == 1
    assert kinds.count("validator_resumed") == 1
    [verdict] = run.validation
    assert verdict.name == "rvs" and verdict.ok and verdict.attempt == 2
    started = calls.read_text().splitlines()
    assert len(started) == (1 if when == "before" else 2)  # run again, never skipped
    assert node.fleet.workers["gpu3"].in_rotation
