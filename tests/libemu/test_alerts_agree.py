"""The shipped rules on both faces: identical alert transitions, poll by poll.

The rule scenarios of tests/rules (one per default rule's fault) run once; every poll feeds
each face's snapshot to its own MemoryWindow and RuleEngine. The two engines must emit the
same transitions (rule, labels, states, values, times) and end with the same health report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.model import AlertState
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import RuleSet, load_rule_set
from fleetd.sim import start_scenario
from fleetd.store.memory import MemoryWindow

from .pollers import GPU_TIMEOUT, HUNG_GPU_TIMEOUT, Pair

RULE_SCENARIOS = Path(__file__).resolve().parents[1] / "rules" / "scenarios"
NEEDS_VLLM = {"vllm"}  # needs stand-in vLLM workers; its GPU part is another scenario's
SHORT_SCENARIO_S = 240.0  # scenarios this short are polled every 10 s, longer ones every 30 s


def _scenarios() -> list[str]:
    return sorted(p.stem for p in RULE_SCENARIOS.glob("*.yaml") if p.stem not in NEEDS_VLLM)


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rule_set([shipped_rules_dir()])


@pytest.mark.parametrize("name", _scenarios())
def test_each_rule_scenario_raises_the_same_alerts_on_both_faces(
    name: str, clock: FakeClock, polled: Callable[..., Pair], rules: RuleSet, tmp_path: Path
) -> None:
    node, runner = start_scenario(RULE_SCENARIOS / f"{name}.yaml", clock)
    # the short timeout only where a call hangs: elsewhere a loaded machine must not time
    # out a healthy GPU on one face only
    timeout = HUNG_GPU_TIMEOUT if name == "hung_call" else GPU_TIMEOUT
    pair = polled(node, gpu_timeout=timeout, sysfs=tmp_path)  # as on a node: /sys
    poll_s = 10.0 if runner.scenario.end <= SHORT_SCENARIO_S else 30.0
    settings = EngineSettings(poll_interval_s=poll_s)
    engines = [RuleEngine(rules, settings, node="emulated", timer=clock.monotonic) for _ in "ab"]
    windows = [MemoryWindow(retention=3 * 3600.0) for _ in "ab"]
    fired: set[str] = set()
    while True:
        now = clock.advance(poll_s)
        runner.advance()
        snapshots = pair.poll()
        assert snapshots[0] == snapshots[1]
        transitions = []
        for engine, window, snapshot in zip(engines, windows, snapshots, strict=True):
            window.append(snapshot.readings)
            window.prune(now)
            transitions.append(engine.evaluate(window, now))
        assert transitions[0] == transitions[1]
        fired |= {t.alert.key.rule for t in transitions[1] if t.current == AlertState.FIRING}
        if now >= runner.end:
            break
    assert fired, "the scenario raised no alert: the comparison proved nothing"
    assert engines[0].health() == engines[1].health()
