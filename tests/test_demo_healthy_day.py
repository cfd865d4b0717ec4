"""The false-positive check of the serving rules, through the whole daemon: a simulated 24 h
of healthy serving — eight stand-in vLLM workers on the simulated MI355X node, traffic that
rises and falls with the day and differs a little from worker to worker, the annotated SLO
example (docs/examples/vllm-slo.yaml) loaded as site rules — and no gray-failure, stall or SLO
alert fires, while the peer comparison did compare all day."""

from __future__ import annotations

import math
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.cli.demo_cmd import LineSink
from fleetd.clock import FakeClock
from fleetd.demo import Demo, build_demo
from fleetd.model import AlertState

DOCS = Path(__file__).resolve().parents[1] / "docs"
TICK_S = 60.0  # a poll, a scrape and an evaluation a minute
STEP_S = 10.0  # traffic arrives in between: 0.2-0.6 requests/s per worker (the SLO guards)
DAY_S = 86_400.0
REQUESTS = "fleetd_vllm_e2e_request_latency_seconds_count"


@pytest.fixture
def demo(tmp_path: Path, clock: FakeClock) -> Iterator[Demo]:
    rules = tmp_path / "rules.d"
    rules.mkdir()
    shutil.copy(DOCS / "examples" / "vllm-slo.yaml", rules / "vllm-slo.yaml")
    built = build_demo(
        tmp_path,
        clock=clock,
        note=lambda _line: None,
        console_stream=LineSink(lambda _line: None),
        schedule_jobs=False,
        scenario="healthy",
        local_rules=rules,
    )
    built.daemon.start()
    try:
        yield built
    finally:
        built.close()


def _serve(demo: Demo, rng: random.Random, elapsed: float) -> None:
    """The day's traffic: 2-6 requests in flight per worker following the hour, each worker a
    little off its peers, the GPUs as busy as their workers."""
    day = 0.5 + 0.4 * math.sin(2 * math.pi * elapsed / DAY_S)
    assert demo.view is not None
    for worker in demo.fleet.workers.values():
        if not (worker.in_rotation and worker.state() == "active"):
            continue
        wanted = max(1, round(2 + 4 * day + rng.uniform(-0.6, 0.6)))
        running, waiting = worker.load()
        if running + waiting < wanted:
            worker.add_requests(wanted - running - waiting, duration_s=STEP_S * 0.8)
        for gpu in worker.gpus:
            demo.view.set_load(gpu, min(1.0, 0.25 + 0.6 * day + rng.uniform(-0.05, 0.05)))


@pytest.mark.slow
def test_a_healthy_day_of_serving_raises_no_serving_alert(demo: Demo, clock: FakeClock) -> None:
    daemon = demo.daemon
    assert {r.name for r in daemon.engine.rules.rules} >= {
        "VllmGrayFailure",
        "VllmWorkerStalled",
        "VllmTimeToFirstTokenSlo",
        "VllmInterTokenLatencySlo",
    }
    rng = random.Random(7)
    start = clock.now()
    fired: set[str] = set()
    compared = guarded = 0
    while clock.now() - start < DAY_S:
        for _ in range(int(TICK_S / STEP_S)):
            _serve(demo, rng, clock.now() - start)
            clock.advance(STEP_S)
        daemon.scrape_vllm()
        daemon.tick()
        for alert in daemon.engine.alerts():
            if alert.state == AlertState.FIRING:
                fired.add(dict(alert.labels)["alertname"])
        assert daemon.query is not None
        found = daemon.query.latest("fleetd_vllm_peer_compared", now=clock.now(), max_age=TICK_S)
        compared += sum(1 for sample in found.values() if sample.value == 1.0)
        rates = daemon.query.window("rate", REQUESTS, window=300.0, now=clock.now())
        guarded += sum(1 for rate in rates.values() if rate > 0.1)  # the SLO rules' own guard
    assert fired == set()
    ticks = int(DAY_S / TICK_S)
    assert compared >= 0.9 * 8 * ticks  # every worker was judged against its peers, all day
    assert guarded >= 0.9 * 8 * ticks  # ...and carried enough traffic for its SLOs to count
