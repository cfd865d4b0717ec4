"""End to end on the simulator with validator commands written by the test: a unit that
fails a validator after its reset is quarantined with the validator's output in the evidence
bundle and the page, its GPU's RMA record says physical action is needed, and exactly one
ticket is queued — across a restart too; a unit that passes every rung is re-admitted with
the verdicts in the run and the RMA record."""

from __future__ import annotations

import gzip
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetd.clock import FakeClock
from fleetd.remedy import machine as m
from fleetd.vllm.config import BenchmarkConfig

from .rig import Rig, make_rig, path_with, remediation_config

FIXTURES = Path(__file__).with_name("fixtures") / "validators"


def tool(tmp: Path, name: str, fixture: str, *, exit_code: int = 0) -> str:
    """A stand-in for an AMD tool: prints a fixture in the tool's format, records its
    arguments (the GPUs it was given) and exits with ``exit_code``."""
    path = tmp / name
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp / (name + ".calls")}\n'
        f"cat {FIXTURES / fixture}\n"
        f"exit {exit_code}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def ladder_rig(
    tmp: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, validation: dict[str, Any]
) -> Rig:
    named = [{"name": k, **v} for k, v in validation["validators"].items()]
    section = remediation_config(validation={**validation, "validators": named})
    r = make_rig(tmp, clock, workers_on=(2, 3), remediation=section)
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    return r


@pytest.fixture
def failing(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    validation = {
        "validators": {
            "rvs_gst": {
                "kind": "rvs",
                "command": [tool(bin_dir, "rvs", "rvs_gst_gpu5_below_target.txt"), "{gpus}"],
                "timeout": "30s",
            },
            "a2a": {
                "kind": "transferbench",
                "command": [tool(bin_dir, "TransferBench", "transferbench_a2a_pass.txt"), "a2a"],
                "min_rtotal_gbps": 320,
            },
        },
        "plans": {"reset": ["rvs_gst", "a2a"]},
    }
    r = ladder_rig(tmp_path, clock, monkeypatch, validation)
    try:
        yield r
    finally:
        r.close()


def bundle(path: str) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


def test_a_failed_validator_quarantines_with_its_output_and_one_rma_ticket(failing: Rig) -> None:
    rig = failing
    serial = {g.index: g.serial for g in rig.backend.gpus()}[3]
    rig.sim.inject(3, "ecc_uncorrectable", count=2)
    [run_id] = rig.fault(3)
    rig.run_until_settled()

    run = rig.run(run_id)
    assert run.state is m.RunState.QUARANTINED and rig.sim.reset_count() == 1
    assert (run.outcome or "").startswith("validator rvs_gst failed: 1 failed result(s)")
    assert [o.name for o in run.validation] == ["rvs_gst"]  # a2a never ran
    calls = (rig.tmp / "tools" / "rvs.calls").read_text().split()
    assert calls == ["0,1,2,3,4,5,6,7"]  # the whole hive it reset
    assert not (rig.tmp / "tools" / "TransferBench.calls").exists()
    assert not any(w.in_rotation for w in rig.fleet.workers.values())
    # the page names the validator and quotes its output
    page = rig.sink.alerts()[-1]
    assert page.kind == "quarantined" and page.severity == "critical"
    assert any("met: FALSE" in line for line in page.evidence)
    # the quarantine bundle holds the whole output
    [quarantine] = [b for b in run.bundles if b.phase == "quarantine"]
    data = bundle(quarantine.path)
    [verdict] = data["validation"]
    assert verdict["name"] == "rvs_gst" and not verdict["ok"]
    assert "GFLOPS 702113.918 Target GFLOPS: 1215000.000 met: FALSE" in verdict["output"]
    assert verdict["output"].count("[RESULT]") == 10  # all of it, not a summary
    # the RMA record of GPU 3's serial: physical action needed, from the ladder
    rec = rig.remediation.rma_record(serial)
    assert rec is not None and rec.physical_action_needed and rec.gpu == 3
    decision = rec.open_decision
    assert decision is not None and decision.source == "ladder"
    assert decision.fault_class == "validation:rvs_gst"
    assert decision.bundle_path == quarantine.path and decision.bundle_sha256 == quarantine.sha256
    assert [v.name for v in rec.validations] == ["rvs_gst"] and not rec.validations[0].ok
    assert [r.run_id for r in rec.runs] == [run_id] and rec.faults[0].rule == "GpuUncorrectableEcc"
    assert [r.serial for r in rig.remediation.rma_records(physical_only=True)] == [serial]
    # exactly one ticket, with the documented fields
    [ticket] = [e for e in rig.sink.events if e.kind == "rma_ticket"]
    fields = dict(ticket.details)
    assert fields["serial"] == serial and fields["gpu"] == "3"
    assert fields["bundle_sha256"] == quarantine.sha256 and fields["fault_class"]
    assert "Validator rvs_gst (rvs) failed" in fields["operator_message"]
    assert ticket.run_id == run_id and decision.ticket == fields["ticket_id"]
    # a restart finds the run concluded and recorded: no second ticket
    rig.restart_daemon()
    rig.remediation.tick(rig.clock.now())
    journaled = [e for e in rig.remediation.events(run_id) if e.kind == "rma_ticket"]
    assert len(journaled) == 1
    # a fault again on the held GPU adds no decision and no ticket
    rig.fault(3)
    rig.run_until_settled()
    after = rig.remediation.rma_record(serial)
    assert after is not None and len(after.decisions) == 1
    assert [e.kind for e in rig.remediation.events()].count("rma_ticket") == 1


def test_all_validators_pass_and_the_unit_is_readmitted_with_the_verdicts(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    validation = {
        "validators": {
            "rvs_gst": {
                "kind": "rvs",
                "command": [tool(bin_dir, "rvs", "rvs_gst_pass.txt")],
                "timeout": "30s",
            },
            "a2a": {
                "kind": "transferbench",
                "command": [tool(bin_dir, "TransferBench", "transferbench_a2a_pass.txt"), "a2a"],
                "min_rtotal_gbps": 320,
                "min_average_gbps": 40,
            },
            "agfhc": {
                "kind": "agfhc",
                "command": [tool(bin_dir, "agfhc", "agfhc_all_lvl1_pass.json"), "-r", "all_lvl1"],
            },
        },
        "plans": {"reset": ["rvs_gst", "a2a", "agfhc", "inference"]},
    }
    rig = ladder_rig(tmp_path, clock, monkeypatch, validation)
    try:
        # the probe's verdict is recorded whatever it says; a loose tolerance keeps the
        # stand-in's throughput on a loaded 2-core machine from deciding this test
        bench = BenchmarkConfig(
            requests=3, max_tokens=10, warmup=0, tolerance=0.05, latency_factor=None, timeout=5.0
        )
        rig.config = rig.config.model_copy(
            update={"vllm": rig.config.vllm.model_copy(update={"benchmark": bench})}
        )
        rig.restart_daemon()
        gate = rig.remediation.benchmark
        assert gate is not None
        gate.capture(rig.config.vllm.workers, rig.clock.now())  # on the healthy hive
        serial = {g.index: g.serial for g in rig.backend.gpus()}[3]
        rig.sim.inject(3, "ecc_uncorrectable", count=2)
        [run_id] = rig.fault(3)
        rig.run_until_settled()

        run = rig.run(run_id)
        assert run.state is m.RunState.DONE, run.outcome
        assert all(w.in_rotation for w in rig.fleet.workers.values())
        assert run.settings.validators == ("rvs_gst", "a2a", "agfhc", "inference")
        names = [(o.name, o.target) for o in run.validation]
        assert names[:3] == [("rvs_gst", ""), ("a2a", ""), ("agfhc", "")]
        assert sorted(names[3:]) == [("inference", "gpu2"), ("inference", "gpu3")]
        assert all(o.ok for o in run.validation), run.validation
        assert "average 48." in run.validation[1].summary
        kinds = [e.kind for e in rig.sink.events if e.run_id == run_id]
        assert kinds.index("validating") > kinds.index("verified")
        assert kinds.index("readmitting") > max(
            i for i, k in enumerate(kinds) if k == "validator_passed"
        )
        rec = rig.remediation.rma_record(serial)
        assert rec is not None and not rec.physical_action_needed
        assert [(v.name, v.ok) for v in rec.validations][:3] == [
            ("rvs_gst", True),
            ("a2a", True),
            ("agfhc", True),
        ]
        assert rec.runs[0].state == "done"
        assert "rma_ticket" not in [e.kind for e in rig.sink.events]
    finally:
        rig.close()


def test_a_hung_validator_is_killed_and_quarantines(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\necho '[RESULT] [ 1.0] Module name :gst'\nexec sleep 300\n")
    hang.chmod(0o755)
    validation = {
        "validators": {"rvs": {"kind": "rvs", "command": [str(hang)], "timeout": "1s"}},
        "plans": {"reset": ["rvs"]},
    }
    rig = ladder_rig(tmp_path, clock, monkeypatch, validation)
    try:
        rig.sim.inject(3, "ecc_uncorrectable", count=2)
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        run = rig.run(run_id)
        assert run.state is m.RunState.QUARANTINED
        [verdict] = run.validation
        assert verdict.timed_out and "timed out after 1s" in verdict.summary
        assert "Module name :gst" in verdict.output
    finally:
        rig.close()
