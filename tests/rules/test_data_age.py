"""``fleetd_gpu_health_data_age_seconds`` is the age of the GPU's last successful reading.

The poller writes ``fleetd_gpu_up`` every poll (0 while the GPU cannot be read) with every
other series of that GPU missing; the data age must grow from the last poll that read the
GPU, not stay 0 because the poller itself keeps reporting."""

from __future__ import annotations

from pathlib import Path

from fleetd.clock import FakeClock
from fleetd.model import Reading, make_labels
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.rules.metrics import health_readings
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
RULES = """
rules:
  - name: Hot
    expr: temp
    op: ">"
    threshold: 95
    for: 20s
    severity: critical
"""


def poll(window: MemoryWindow, now: float, readable: dict[int, bool]) -> None:
    readings = []
    for gpu, ok in readable.items():
        labels = make_labels({"gpu": gpu, "uuid": f"U{gpu}"})
        readings.append(Reading("fleetd_gpu_up", labels, 1.0 if ok else 0.0, now))
        readings.append(
            Reading("temp", labels, 60.0 if ok else None, now, None if ok else "timeout")
        )
    window.append(readings)


def ages(engine: RuleEngine, now: float) -> dict[str, float]:
    return {
        dict(r.labels)["gpu"]: float(r.value or 0.0)
        for r in health_readings(engine.health(), now)
        if r.metric == "fleetd_gpu_health_data_age_seconds"
    }


def test_data_age_grows_while_a_gpus_readings_are_missing(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    engine = RuleEngine(load_rule_set([tmp_path / "rules.yaml"]), EngineSettings(), node="n1")
    clock = FakeClock(T0)
    window = MemoryWindow(retention=86400)
    now = T0
    for _ in range(3):  # both GPUs read fine
        now = clock.advance(5.0)
        poll(window, now, {0: True, 1: True})
        engine.evaluate(window, now)
    last_good = now
    assert ages(engine, now) == {"0": 0.0, "1": 0.0}
    for _ in range(18):  # GPU 1 cannot be read for 90 s; the poller still reports it
        now = clock.advance(5.0)
        poll(window, now, {0: True, 1: False})
        engine.evaluate(window, now)
    seen = ages(engine, now)
    assert seen["0"] == 0.0
    assert seen["1"] == now - last_good == 90.0
    report = engine.health()
    assert report is not None and report.node.data_age_s == 90.0
    now = clock.advance(5.0)  # readable again: fresh at once
    poll(window, now, {0: True, 1: True})
    engine.evaluate(window, now)
    assert ages(engine, now) == {"0": 0.0, "1": 0.0}


def test_a_gpu_never_read_ages_from_when_it_was_first_seen(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES)
    engine = RuleEngine(load_rule_set([tmp_path / "rules.yaml"]), EngineSettings(), node="n1")
    window = MemoryWindow(retention=86400)
    for step in range(1, 5):
        now = T0 + 5.0 * step
        poll(window, now, {0: False})
        engine.evaluate(window, now)
    assert ages(engine, T0 + 20.0) == {"0": 15.0}
