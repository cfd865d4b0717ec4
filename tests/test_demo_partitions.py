"""``fleetd demo --scenario cpx_uncorrectable`` on a fake clock: an 8×MI300X node in CPX
(64 logical devices, one stand-in worker per partition: 8 per physical GPU) gets a UE on
physical GPU 3; the hive is drained, reset once through partition 0, verified per physical
GPU, its partition modes checked, and every worker re-admitted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.demo_cmd import LineSink
from fleetd.clock import FakeClock
from fleetd.demo import Demo, build_demo
from fleetd.remedy import machine as m

pytestmark = pytest.mark.slow  # three whole remediation runs of a 64-device node


def run_for(demo: Demo, clock: FakeClock, seconds: int) -> None:
    """One daemon tick a second, with the jobs a scheduler would run (as tests/test_demo)."""
    daemon = demo.daemon
    for second in range(seconds):
        clock.advance(1)
        demo.keep_busy()
        daemon.tick()
        if second % 2 == 0:
            daemon.scrape_vllm()
        if daemon.events is not None:
            daemon.events.poll_cper()
        daemon.deliver()
        daemon.remediate()


@pytest.fixture
def cpx_demo(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Demo, list[str]]]:
    lines: list[str] = []
    built = build_demo(
        tmp_path,
        clock=clock,
        note=lines.append,
        console_stream=LineSink(lines.append),
        schedule_jobs=False,
        scenario="cpx_uncorrectable",
    )
    built.daemon.start()
    try:
        yield built, lines
    finally:
        built.close()


def test_a_cpx_node_s_uncorrectable_error_is_remediated_end_to_end(
    cpx_demo: tuple[Demo, list[str]], clock: FakeClock
) -> None:
    built, lines = cpx_demo
    daemon = built.daemon
    assert daemon.sim is not None and daemon.remediation is not None
    assert len(daemon.backend.gpus()) == 64 and len(built.fleet.workers) == 64
    run_for(built, clock, 70)
    text = "\n".join(lines)
    # the counters or the kernel line (whichever is read first) page for physical GPU 3's
    # partition 0, logical device 24
    fired = [line for line in lines if "FIRING   critical Gpu" in line and "Uncorrectable" in line]
    assert fired and all("gpu=24" in line for line in fired), text
    assert len(daemon.sim.node.resets) == 1, text
    [reset] = daemon.sim.node.resets
    assert reset.initiator == 3  # physical GPU 3, through its partition 0 (logical 24)
    [run] = daemon.remediation.runs()
    assert run.state is m.RunState.DONE, text
    assert len(run.gpu_indices) == 64
    assert "RESOLVED critical Gpu" in text
    assert all(w.in_rotation and w.state() == "active" for w in built.fleet.workers.values())
    assert daemon.last_snapshot is not None
    assert daemon.status_line(daemon.last_snapshot).startswith("64/64 GPUs healthy"), text


def _demo(tmp_path: Path, clock: FakeClock, scenario: str) -> tuple[Demo, list[str]]:
    lines: list[str] = []
    built = build_demo(
        tmp_path,
        clock=clock,
        note=lines.append,
        console_stream=LineSink(lines.append),
        schedule_jobs=False,
        scenario=scenario,
    )
    built.daemon.start()
    return built, lines


def test_a_mode_lost_in_the_reset_is_re_applied_before_re_admission(
    tmp_path: Path, clock: FakeClock
) -> None:
    built, lines = _demo(tmp_path, clock, "cpx_partition_lost")
    try:
        daemon = built.daemon
        assert daemon.sim is not None and daemon.remediation is not None
        daemon.sim.node.partition_set_status = 0  # the set calls work on this node
        run_for(built, clock, 70)
        [run] = daemon.remediation.runs()
        assert run.state is m.RunState.DONE, run.last_problems
        assert any("remediation done" in line for line in lines)
        assert daemon.sim.node.compute_partition == "CPX"
        assert len([g for g in daemon.backend.gpus() if daemon.backend.present(g.index)]) == 64
        assert all(w.in_rotation for w in built.fleet.workers.values())
    finally:
        built.close()


def test_a_mode_that_will_not_re_apply_quarantines_and_pages(
    tmp_path: Path, clock: FakeClock
) -> None:
    built, lines = _demo(tmp_path, clock, "cpx_partition_lost")
    try:
        daemon = built.daemon
        assert daemon.sim is not None and daemon.remediation is not None
        run_for(built, clock, 130)  # verification times out after 60 s
        text = "\n".join(lines)
        [run] = daemon.remediation.runs()
        assert run.state is m.RunState.QUARANTINED, text
        assert "partition mode lost in the reset" in (run.outcome or "") + text
        assert "will not re-apply" in text
        assert daemon.sim.node.compute_partition == "SPX"
        assert not any(w.in_rotation for w in built.fleet.workers.values())
    finally:
        built.close()
