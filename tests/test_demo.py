"""``fleetd demo``'s wiring driven on a fake clock: fault → alert → drain → reset → verify →
re-admit → resolved, through the real daemon, rules, dispatcher, remediation and HTTP API."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.demo_cmd import LineSink
from fleetd.clock import FakeClock
from fleetd.demo import Demo, build_demo
from fleetd.remedy import machine as m


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
        daemon.deliver()
        daemon.remediate()


def test_the_uncorrectable_error_is_remediated_end_to_end(
    demo: tuple[Demo, list[str]], clock: FakeClock
) -> None:
    built, lines = demo
    daemon = built.daemon
    run_for(built, clock, 60)
    text = "\n".join(lines)
    assert "FIRING   critical GpuEccUncorrectableError" in text and "gpu=3" in text
    assert daemon.sim is not None and daemon.sim.node.reset_count() == 1
    assert daemon.remediation is not None
    [run] = daemon.remediation.runs()
    assert run.state is m.RunState.DONE
    assert "remediation done" in text and "RESOLVED critical GpuEccUncorrectableError" in text
    # every step in order: drain the hive, reset once, verify, re-admit
    order = [
        "run_planned",
        "draining",
        "drained_gracefully",
        "stopping",
        "reset_intent",
        "verified",
        "readmitting",
        "done",
    ]
    positions = [text.index(f"remediation {step}") for step in order]
    assert positions == sorted(positions)
    assert all(w.in_rotation and w.state() == "active" for w in built.fleet.workers.values())
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
