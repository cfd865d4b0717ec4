"""The evidence bundle in the run machine: captured after the drain and before the reset,
again on quarantine; a failed capture is recorded and the reset goes ahead; a restart during
a capture takes it again into a new bundle, never into the same one."""

from __future__ import annotations

from dataclasses import replace

from fleetd.remedy import machine as m

from .machine_world import NOW, World, drive, kinds, new_run


def order(cmds: list[m.Command]) -> list[type]:
    return [type(c) for c in cmds]


def test_the_bundle_is_captured_after_the_drain_and_before_the_reset() -> None:
    run, cmds, _ = drive(World(), new_run(capture_evidence=True), NOW)
    assert run.state is m.RunState.DONE
    seq = order(cmds)
    capture = seq.index(m.CaptureEvidence)
    assert capture > max(i for i, t in enumerate(seq) if t is m.StopUnit)
    assert capture > seq.index(m.CheckProcesses) and capture > seq.index(m.CaptureBaseline)
    assert capture < seq.index(m.ResetGpu)
    assert [c for c in cmds if isinstance(c, m.CaptureEvidence)] == [
        m.CaptureEvidence("pre_reset", 1)
    ]
    path = f"/state/evidence/{run.run_id}.pre_reset.1.json.gz"
    assert run.bundles == (m.Bundle("pre_reset", path, "ab" * 32, 1234),)
    # the path and digest are journaled, and said in the reset's notification
    assert kinds(cmds).index("evidence_captured") < kinds(cmds).index("reset_intent")
    done = next(c for c in cmds if isinstance(c, m.Record) and c.kind == "reset_done")
    assert done.evidence == (f"evidence bundle (pre-reset): {path} sha256:{'ab' * 32}",)


def test_a_failed_capture_is_recorded_and_the_reset_still_happens() -> None:
    world = World(evidence_error="capture timed out after 5s")
    run, cmds, _ = drive(world, new_run(capture_evidence=True), NOW)
    assert run.state is m.RunState.DONE and run.reset_count == 1
    failed = next(c for c in cmds if isinstance(c, m.Record) and c.kind == "evidence_failed")
    assert failed.severity == "warning" and "timed out" in failed.message
    assert kinds(cmds).index("evidence_failed") < kinds(cmds).index("reset_intent")
    assert any("not captured: capture timed out" in line for line in run.evidence)
    assert run.bundles == ()


def test_without_the_setting_nothing_is_captured() -> None:
    run, cmds, _ = drive(World(), new_run(), NOW)
    assert run.state is m.RunState.DONE and m.CaptureEvidence not in order(cmds)


def test_a_quarantine_captures_a_bundle_after_its_page() -> None:
    world = World(reset_error="amdsmi_reset_gpu: AMDSMI_STATUS_BUSY")
    run, cmds, _ = drive(world, new_run(capture_evidence=True), NOW)
    assert run.state is m.RunState.QUARANTINED
    captures = [c for c in cmds if isinstance(c, m.CaptureEvidence)]
    assert captures == [m.CaptureEvidence("pre_reset", 1), m.CaptureEvidence("quarantine", 1)]
    assert [b.phase for b in run.bundles] == ["pre_reset", "quarantine"]
    page = next(c for c in cmds if isinstance(c, m.Record) and c.kind == "quarantined")
    assert any(line.startswith("evidence bundle (pre-reset)") for line in page.evidence)
    assert kinds(cmds)[-1] == "evidence_captured" and not run.capturing


class Killed(World):
    """The daemon dies inside the capture (of ``phase``): its outcome never comes back."""

    phase: str = "pre_reset"

    def answer(self, cmd: m.Command, run: m.Run, now: float) -> m.Event | None:
        if isinstance(cmd, m.CaptureEvidence) and cmd.phase == self.phase:
            return None
        return super().answer(cmd, run, now)


def to_capture() -> m.Run:
    """A run whose pre-reset capture was issued (and journaled) but never answered."""
    run, _, _ = drive(Killed(), new_run(capture_evidence=True), NOW, limit=100.0)
    assert run.state is m.RunState.RELEASE_CHECK and run.capturing == "pre_reset"
    assert run.capture_attempt == 1 and run.reset_count == 0
    return run


def test_a_restart_during_the_capture_takes_it_again_into_a_new_bundle() -> None:
    run = to_capture()
    run, cmds = m.step(run, m.Resumed(), NOW + 100)
    assert cmds[-1] == m.CaptureEvidence("pre_reset", 2)  # attempt 2: a new file
    assert kinds(cmds) == ["evidence_capture_resumed"] and run.reset_count == 0
    # a late answer of the interrupted attempt is not this capture's
    late = m.EvidenceResult("pre_reset", 1, "/old", "00" * 32, 1)
    assert m.step(run, late, NOW + 100) == (run, [])
    run, cmds = m.step(run, m.EvidenceResult("pre_reset", 2, "/new", "cd" * 32, 9), NOW + 100)
    assert run.bundles == (m.Bundle("pre_reset", "/new", "cd" * 32, 9),)
    assert order(cmds)[-1] is m.ResetGpu and run.reset_count == 1


def test_a_second_restart_during_the_capture_gives_up_and_resets() -> None:
    run = replace(to_capture(), capture_attempt=2)
    run, cmds = m.step(run, m.Resumed(), NOW + 100)
    assert "evidence_failed" in kinds(cmds) and m.CaptureEvidence not in order(cmds)
    assert order(cmds)[-1] is m.ResetGpu and not run.capturing


def test_a_tick_while_capturing_does_not_move_the_run() -> None:
    run = to_capture()
    assert m.step(run, m.Tick(), NOW + 10_000) == (run, [])


def test_a_failed_reset_that_escalates_captures_the_failure_before_the_reboot() -> None:
    world = World(reset_error="hang")
    run, cmds, _ = drive(
        world, new_run(capture_evidence=True, escalate_to_reboot=True), NOW, limit=100
    )
    assert run.state is m.RunState.REBOOTING
    seq = order(cmds)
    assert seq.index(m.CaptureEvidence, seq.index(m.ResetGpu)) < seq.index(m.RequestReboot)
    assert [b.phase for b in run.bundles] == ["pre_reset", "failure"] and not run.capturing


def test_a_reboot_during_the_failure_capture_is_not_captured_again() -> None:
    world = Killed(reset_error="hang")
    world.phase = "failure"
    run, _, _ = drive(
        world, new_run(capture_evidence=True, escalate_to_reboot=True), NOW, limit=100
    )
    assert run.state is m.RunState.REBOOTING and run.capturing == "failure"
    run, cmds = m.step(run, m.Resumed(), NOW + 200)
    assert run.state is m.RunState.VERIFYING and not run.capturing
    assert "evidence_failed" in kinds(cmds) and m.CaptureEvidence not in order(cmds)
