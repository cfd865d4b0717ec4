"""``fleetd demo``'s wiring driven on a fake clock: fault → alert → drain → reset → verify →
re-admit → resolved, through the real daemon, rules, dispatcher, remediation and HTTP API."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.demo_cmd import LineSink, node_summary
from fleetd.clock import FakeClock
from fleetd.demo import Demo, build_demo, demo_config
from fleetd.model import GpuIdentity
from fleetd.remedy import machine as m
from fleetd.sim.model import ResetRecord, SimNode


@pytest.fixture
def demo(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Demo, list[str]]]:
    lines: list[str] = []
    built = build_demo(
        tmp_path,
        clock=clock,
        note=lines.append,
        console_stream=LineSink(lines.append),
        schedule_jobs=False,
    )
    built.daemon.start()
    try:
        yield built, lines
    finally:
        built.close()


def run_for(demo: Demo, clock: FakeClock, seconds: int) -> None:
    daemon = demo.daemon
    for second in range(seconds):
        clock.advance(1)
        demo.keep_busy()
        daemon.tick()
        if second % 2 == 0:
            daemon.scrape_vllm()
        if daemon.events is not None:
            daemon.events.poll_cper()  # the cper job's work (no job scheduler here)
        daemon.deliver()
        daemon.remediate()


def test_the_uncorrectable_error_is_remediated_end_to_end(
    demo: tuple[Demo, list[str]], clock: FakeClock
) -> None:
    built, lines = demo
    daemon = built.daemon
    run_for(built, clock, 60)
    text = "\n".join(lines)
    # the first report's alert: the counters' or (the simulated kernel log is followed in
    # real time, so a slow machine may see it first) the kernel line's
    reports = ("GpuEccUncorrectableError", "GpuKernelUncorrectableError")
    fired = [rule for rule in reports if f"FIRING   critical {rule}" in text]
    assert fired and "gpu=3" in text, text
    assert daemon.sim is not None and daemon.sim.node.reset_count() == 1
    assert daemon.remediation is not None
    [run] = daemon.remediation.runs()
    assert run.state is m.RunState.DONE
    assert "remediation done" in text and f"RESOLVED critical {fired[0]}" in text
    # every step in order: drain the hive, reset once, verify, re-admit
    order = [
        "run_planned",
        "draining",
        "drained_gracefully",
        "stopping",
        "reset_intent",
        "verified",
        "validating",
        "validator_passed",
        "readmitting",
        "done",
    ]
    positions = [text.index(f"remediation {step}") for step in order]
    assert positions == sorted(positions)
    # the ladder's verdict is in the run, and the GPU has its RMA record (by serial)
    assert [(o.name, o.ok) for o in run.validation] == [("rvs_gst", True)]
    [record] = daemon.remediation.rma_records()
    assert record.gpu == 3 and not record.physical_action_needed
    assert [v.name for v in record.validations] == ["rvs_gst"]
    assert all(w.in_rotation and w.state() == "active" for w in built.fleet.workers.values())
    assert daemon.last_snapshot is not None
    assert daemon.status_line(daemon.last_snapshot).startswith("8/8 GPUs healthy")
    # the report scores the repair as a fault found (the trigger proved it), not as a reset
    # of healthy GPUs (precision 0 %)
    assert daemon.http is not None
    url = f"http://{daemon.http.address}/api/v1/report"
    with urllib.request.urlopen(url, timeout=5) as response:
        report = json.load(response)
    [verdict] = [r["verdict"] for r in report["runs"]]
    assert verdict == "fault_found"
    [rule] = [r for r in report["rules"] if r["rule"] == fired[0]]
    assert (rule["runs"], rule["fault_found"], rule["nothing_found"]) == (1, 1, 0)
    assert rule["precision"] == 1.0


def test_a_driver_that_keeps_its_counts_across_the_reset_still_readmits_the_hive(
    demo: tuple[Demo, list[str]], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """amdgpu may keep its RAS counts across a reset. Then GpuEccUncorrectableError's
    10-minute ``increase`` still sees the pre-reset error for ten minutes after the reset the
    hive needed, longer than the demo's 60 s verification: the counts compared with the
    pre-reset baseline judge it (kept, no new error), so the repaired hive is re-admitted
    instead of quarantined (verification failed: … GpuEccUncorrectableError … holds). The
    rule stands down for its window after the reset closed the fault's incident, so the alert
    resolves once the run is done instead of ten minutes later, the GPUs healthy."""
    built, lines = demo
    daemon = built.daemon
    assert daemon.sim is not None
    for gpu in daemon.sim.node.gpus:  # a few correctable errors, as on any GPU run a while
        gpu.ecc[next(iter(gpu.ecc))][0] = 5.0
    reset_hive = SimNode.reset_hive

    def keeping_counts(node: SimNode, gpu: int, *, at: float | None = None) -> ResetRecord:
        kept = {g.index: {block: list(c) for block, c in g.ecc.items()} for g in node.gpus}
        done = reset_hive(node, gpu, at=at)
        for g in node.gpus:
            g.ecc = kept[g.index]
        return done

    monkeypatch.setattr(SimNode, "reset_hive", keeping_counts)
    run_for(built, clock, 100)  # past the 60 s verification timeout
    assert daemon.sim.node.reset_count() == 1
    assert daemon.remediation is not None
    [run] = daemon.remediation.runs()
    assert run.reset_effect == "kept", run.evidence
    assert run.state is m.RunState.DONE, run.outcome
    text = "\n".join(lines)
    # the first report's alert pages (the kernel line's when the real-time log is read first)
    reports = ("GpuEccUncorrectableError", "GpuKernelUncorrectableError")
    fired = [rule for rule in reports if f"FIRING   critical {rule}" in text]
    assert len(fired) == 1 and f"RESOLVED critical {fired[0]}" in text, text
    assert "further_trigger" not in text
    assert daemon.last_snapshot is not None
    assert daemon.status_line(daemon.last_snapshot).startswith("8/8 GPUs healthy")


def test_metrics_and_api_are_served(demo: tuple[Demo, list[str]], clock: FakeClock) -> None:
    built, _ = demo
    run_for(built, clock, 3)
    assert built.daemon.http is not None
    base = f"http://{built.daemon.http.address}"
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert 'fleetd_gpu_up{gpu="3"' in metrics and "fleetd_gpu_health{" in metrics
    assert "fleetd_alert_outbox_pending" in metrics and "fleetd_store_degraded 0.0" in metrics
    with urllib.request.urlopen(f"{base}/api/v1/status", timeout=5) as response:
        status = json.load(response)
    assert status["node"] == "demo-mi355x" and len(status["gpus"]) == 8
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
        assert json.load(response)["status"] == "ok"


def test_a_physical_class_fault_quarantines_one_gpu_without_a_reset(
    demo: tuple[Demo, list[str]], clock: FakeClock
) -> None:
    """The demo's GPU 6 fault (AFID 20, fatal HBM on-die ECC: replace the OAM), injected at
    once: the ECC counters report it first and plan a hive reset; the fault's CPER record
    joins the incident within the settle time and its physical class replaces the plan."""
    built, lines = demo
    daemon = built.daemon
    assert daemon.sim is not None and daemon.remediation is not None
    run_for(built, clock, 3)
    daemon.sim.node.inject(6, "ecc_uncorrectable", fatal=True, afid=20)
    run_for(built, clock, 40)
    text = "\n".join(lines)
    # the demo's own GPU 3 fault (at 30 s) is reset; GPU 6's never triggers one
    assert [r.initiator for r in daemon.sim.node.resets] in ([], [3]), text
    runs = [r for r in daemon.remediation.runs() if r.trigger.gpu == 6]
    assert [r.state for r in runs] == [m.RunState.QUARANTINED], text
    assert runs[0].gpu_indices == (6,) and runs[0].plan is m.Plan.QUARANTINE
    assert "AFID 20" in (runs[0].outcome or "") and "OAM" in (runs[0].outcome or "")
    assert "remediation replanned" in text and "remediation quarantined" in text
    # GPU 6's RMA record: physical action from the AFID, with its class and one ticket
    serial = {g.index: g.serial for g in daemon.remediation.executor._backend.gpus()}[6]
    record = daemon.remediation.rma_record(str(serial))
    assert record is not None and record.physical_action_needed
    decision = record.open_decision
    assert decision is not None and decision.source == "afid" and 20 in decision.afids
    assert decision.fault_class == "HBM Errors"
    assert [e.kind for e in daemon.remediation.events(runs[0].run_id)].count("rma_ticket") == 1
    # one page for the fault: the first report's alert (the kernel line or the counters,
    # whichever came first), never a second from the other reports
    faults = ("GpuEccUncorrectableError", "GpuKernelUncorrectableError", "GpuCperFatalError")
    pages = [
        line for line in lines
        if "FIRING   critical" in line and "gpu=6 " in line and any(f in line for f in faults)
    ]  # fmt: skip
    assert len(pages) == 1, pages
    assert "FIRING   critical GpuRemediationHeld" in text and "replace the OAM" in text
    assert not built.fleet.workers["gpu6"].in_rotation  # held for a person


def test_a_physical_class_fault_during_probation_still_opens_its_rma_decision(
    demo: tuple[Demo, list[str]], clock: FakeClock
) -> None:
    """The demo's own timeline: GPU 3's hive reset puts every GPU of the hive on probation,
    so GPU 6's fatal HBM fault minutes later is quarantined for faulting during probation
    at once; its CPER record's physical class (AFID 20: replace the OAM) must still reach the
    run's reason and open GPU 6's RMA decision, not be dropped as "no further plan"."""
    built, lines = demo
    daemon = built.daemon
    assert daemon.sim is not None and daemon.remediation is not None
    run_for(built, clock, 60)
    [hive_reset] = daemon.remediation.runs()
    assert hive_reset.state is m.RunState.DONE and 6 in hive_reset.gpu_indices
    daemon.sim.node.inject(6, "ecc_uncorrectable", fatal=True, afid=20)
    run_for(built, clock, 40)
    text = "\n".join(lines)
    runs = [r for r in daemon.remediation.runs() if r.trigger.gpu == 6]
    assert [r.state for r in runs] == [m.RunState.QUARANTINED], text
    outcome = runs[0].outcome or ""
    assert "faulted again within its probation" in outcome, outcome
    assert "AFID 20 calls for physical" in outcome, outcome
    serial = {g.index: g.serial for g in daemon.remediation.executor._backend.gpus()}[6]
    record = daemon.remediation.rma_record(str(serial))
    assert record is not None and record.physical_action_needed, text
    decision = record.open_decision
    assert decision is not None and decision.source == "afid" and 20 in decision.afids
    assert decision.fault_class == "HBM Errors"
    assert [e.kind for e in daemon.remediation.events(runs[0].run_id)].count("rma_ticket") == 1
    assert [r.initiator for r in daemon.sim.node.resets] == [3]  # GPU 6's fault resets nothing


def test_an_unknown_scenario_is_one_clear_line_and_exit_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleetd", "demo", "--scenario", "nosuch", "--port", "0", "--plain"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nosuch: no such scenario; shipped:" in lines[0], done.stderr


@pytest.mark.parametrize("duration", ["-5", "0"])
def test_a_duration_that_is_not_positive_is_a_usage_error(duration: str) -> None:
    """It used to run and stop at once, as if the demo had nothing to show."""
    from click.testing import CliRunner

    from fleetd.cli.demo_cmd import demo as demo_command

    result = CliRunner().invoke(demo_command, ["--duration", duration, "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "--duration" in result.output and "not in the range x>0" in result.output


def test_the_banner_names_the_node_the_scenario_built() -> None:
    def gpu(i: int, model: str, partition: str, hive: str = "0x1") -> GpuIdentity:
        return GpuIdentity(i, f"u{i}", f"0000:0{i}:00.0", model=model, hive_id=hive,
                           compute_partition=partition)  # fmt: skip

    assert node_summary([gpu(i, "MI355X", "SPX") for i in range(8)]) == (
        "MI355X node, 8 GPUs in one XGMI hive"
    )
    assert node_summary([gpu(i, "MI300X", "CPX") for i in range(64)]) == (
        "MI300X node, 64 GPUs (CPX partitions) in one XGMI hive"
    )
    assert node_summary([gpu(0, "MI300X", "SPX", "0x1"), gpu(1, "MI300X", "SPX", "0x2")]) == (
        "MI300X node, 2 GPUs in 2 XGMI hives"
    )


def test_staleness_is_counted_in_real_time_at_the_demos_speed(tmp_path: Path) -> None:
    """At 4× a poll is due every quarter of a real second: a second of lag on a shared machine
    must not make all eight GPUs stale at once."""
    assert demo_config(tmp_path, port=0).rules.stale_polls == 3
    assert demo_config(tmp_path, port=0, time_scale=4).rules.stale_polls == 12
