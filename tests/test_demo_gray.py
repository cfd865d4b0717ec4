"""Gray failure through the whole daemon: ``fleetd demo --scenario gray_failure`` on a fake
clock — eight stand-in vLLM workers on the simulated node, one GPU's clocks pulled down by PPT
throttling, one slow engine, one worker with eight times longer prompts — and
``VllmGrayFailure`` fires for each of the three with the right attribution, and for no one
else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.demo_cmd import LineSink
from fleetd.clock import FakeClock
from fleetd.demo import Demo, build_demo
from fleetd.model import AlertState

RULE = "VllmGrayFailure"


@pytest.fixture
def demo(tmp_path: Path, clock: FakeClock) -> Iterator[Demo]:
    built = build_demo(
        tmp_path,
        clock=clock,
        note=lambda _line: None,
        console_stream=LineSink(lambda _line: None),
        schedule_jobs=False,
        scenario="gray_failure",
    )
    built.daemon.start()
    try:
        yield built
    finally:
        built.close()


@pytest.mark.slow
def test_three_gray_failures_are_found_and_attributed(demo: Demo, clock: FakeClock) -> None:
    daemon = demo.daemon
    for _ in range(13 * 60 // 5):  # 13 minutes, a scrape and an evaluation every 5 s
        clock.advance(5)
        demo.keep_busy()
        daemon.scrape_vllm()
        daemon.tick()
    firing = set()
    for alert in daemon.engine.alerts():
        labels = dict(alert.labels)
        if labels.get("alertname") == RULE and alert.state == AlertState.FIRING:
            firing.add((labels["worker"], labels["attribution"]))
    assert firing == {("gpu5", "hardware"), ("gpu2", "engine"), ("gpu6", "workload")}
