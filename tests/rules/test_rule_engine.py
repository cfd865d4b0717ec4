"""The engine over a real MemoryWindow: thresholds, hysteresis, rule health, reload, restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.model import AlertState, HealthState, Reading, identity_labels, make_labels
from fleetd.rules.engine import EngineSettings, RuleEngine
from fleetd.rules.loader import load_rule_set
from fleetd.rules.state_store import AlertStateStore
from fleetd.store.db import Database, sqlite_url
from fleetd.store.memory import MemoryWindow

T0 = 1_767_225_600.0
P, F, R = AlertState.PENDING, AlertState.FIRING, AlertState.RESOLVED

HOT = """
rules:
  - name: Hot
    expr: temp
    op: ">"
    threshold: {MI300X: 90, default: 95}
    clear: {MI300X: 85, default: 90}
    for: 20s
    severity: critical
    labels: {team: gpu}
    annotations: {summary: "GPU {{ $labels.gpu }} at {{ $value }}"}
    remediation: {plan: reset}
"""


class Node:
    """A fake 2-GPU node feeding one poll every 5 s into a real MemoryWindow."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.window = MemoryWindow(retention=86400)
        self.temps = {0: 70.0, 1: 70.0}
        self.present = {0: True, 1: True}

    def poll(self, seconds: float = 5.0) -> float:
        now = self.clock.advance(seconds)
        readings = []
        for gpu, model in ((0, "MI300X"), (1, "MI355X")):
            base = {"gpu": gpu, "uuid": f"U{gpu}"}
            readings.append(Reading("fleetd_gpu_up", make_labels(base), 1.0, now))
            readings.append(
                Reading("fleetd_gpu_info", make_labels({**base, "model": model}), 1.0, now)
            )
            if self.present[gpu]:
                readings.append(Reading("temp", make_labels(base), self.temps[gpu], now))
        self.window.append(readings)
        return now


@pytest.fixture
def node() -> Node:
    return Node(FakeClock(T0))


def engine_for(tmp_path: Path, text: str, **settings: float) -> RuleEngine:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    return RuleEngine(load_rule_set([path]), EngineSettings(**settings), node="n1")  # type: ignore[arg-type]


def run(engine: RuleEngine, node: Node, polls: int) -> list[tuple[str, AlertState, AlertState]]:
    out = []
    for _ in range(polls):
        now = node.poll()
        for t in engine.evaluate(node.window, now):
            out.append((dict(t.alert.key.labels)["gpu"], t.previous, t.current))
    return out


def states(engine: RuleEngine) -> dict[str, AlertState]:
    return {dict(a.key.labels)["gpu"]: a.state for a in engine.alerts()}


def test_per_product_thresholds_and_hysteresis(tmp_path: Path, node: Node) -> None:
    engine = engine_for(tmp_path, HOT)
    node.temps = {0: 92.0, 1: 92.0}  # above MI300X's 90, below the default 95
    assert run(engine, node, 5) == [("0", AlertState.INACTIVE, P), ("0", P, F)]
    node.temps[0] = 87.0  # below the threshold, above the clear level: keeps firing
    assert run(engine, node, 3) == []
    node.temps[0] = 84.0
    assert run(engine, node, 1) == [("0", F, R)]
    assert states(engine) == {"0": R}


def test_alerts_carry_full_labels_annotations_and_plan(tmp_path: Path, node: Node) -> None:
    engine = engine_for(tmp_path, HOT)
    node.temps[1] = 99.0
    run(engine, node, 5)
    (alert,) = engine.alerts()
    assert dict(alert.labels) == {
        "alertname": "Hot",
        "severity": "critical",
        "team": "gpu",
        "node": "n1",
        "gpu": "1",
        "uuid": "U1",
    }
    assert dict(alert.annotations) == {"summary": "GPU 1 at 99"}
    assert alert.remediation_plan == "reset" and alert.value == 99.0


def test_a_failing_rule_is_rule_health_never_a_page(tmp_path: Path, node: Node) -> None:
    broken = (
        "  - name: Broken\n"
        "    expr: temp - on(uuid) (fleetd_gpu_up or fleetd_gpu_info)\n"
        "    severity: critical\n"
    )
    engine = engine_for(tmp_path, HOT + broken)
    node.temps[0] = 99.0
    transitions = run(engine, node, 5)
    assert transitions == [("0", AlertState.INACTIVE, P), ("0", P, F)]  # Hot still works
    status = {s.rule: s for s in engine.rule_statuses()}
    assert status["Broken"].health == "err" and status["Broken"].failures_total == 5
    assert "many-to-many" in (status["Broken"].last_error or "")
    assert status["Hot"].health == "ok" and status["Hot"].failures_total == 0
    assert all(a.key.rule == "Hot" for a in engine.alerts())


def test_the_verdict_after_an_evaluation_reflects_what_fired_and_resolved_in_it(
    tmp_path: Path, node: Node
) -> None:
    """The verdict is made again only when a health rule's firing set changed in the
    evaluation: the poll an alert fires in, the GPU is unhealthy; the poll it resolves in,
    healthy again; polls between keep the same verdict, with its age moving on."""

    def gpu0_state() -> HealthState:
        report = engine.health()
        assert report is not None
        gpu0 = report.gpu(0)
        assert gpu0 is not None
        return gpu0.health.state

    engine = engine_for(tmp_path, HOT)
    run(engine, node, 1)
    assert gpu0_state() == HealthState.HEALTHY
    node.temps[0] = 99.0
    fired = []
    for _ in range(6):
        fired += run(engine, node, 1)
        assert gpu0_state() == (
            HealthState.UNHEALTHY if ("0", P, F) in fired else HealthState.HEALTHY
        )
    assert ("0", P, F) in fired
    at = engine.health().at  # type: ignore[union-attr]
    run(engine, node, 1)
    assert gpu0_state() == HealthState.UNHEALTHY and engine.health().at > at  # type: ignore[union-attr]
    node.temps[0] = 70.0
    assert run(engine, node, 1) == [("0", F, R)]
    assert gpu0_state() == HealthState.HEALTHY


def test_stale_data_makes_a_firing_alert_unknown_not_resolved(tmp_path: Path, node: Node) -> None:
    engine = engine_for(tmp_path, HOT, no_data_hold_s=120.0)
    node.temps[0] = 99.0
    run(engine, node, 5)
    node.present[0] = False  # temperature of GPU 0 goes missing; the GPU still answers
    assert run(engine, node, 6) == []  # held: no resolve sent
    (entry,) = engine.entries()
    assert entry.state == F and entry.no_data_since is not None
    report = engine.health()
    assert report is not None
    gpu0 = report.gpu(0)
    assert gpu0 is not None and gpu0.health.state == HealthState.UNKNOWN
    assert "Hot: no data for" in gpu0.health.reasons[0]
    # data returns below the clear level: resolved on evidence
    node.present[0] = True
    node.temps[0] = 70.0
    assert run(engine, node, 1) == [("0", F, R)]


def test_stale_data_held_too_long_resolves_with_a_reason(tmp_path: Path, node: Node) -> None:
    engine = engine_for(tmp_path, HOT, no_data_hold_s=60.0)
    node.temps[0] = 99.0
    run(engine, node, 5)
    node.present[0] = False
    transitions = run(engine, node, 20)
    assert transitions == [("0", F, R)]
    (alert,) = engine.alerts()
    assert dict(alert.annotations)["resolved_reason"].startswith("no data for 1m")


class TestReload:
    def test_unchanged_rules_keep_their_alerts(self, tmp_path: Path, node: Node) -> None:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        edited = tmp_path / "edited.yaml"
        edited.write_text(
            HOT.replace("for: 20s", "for: 1m")
            + "  - name: Other\n    expr: temp > 200\n    severity: info\n"
        )
        status = engine.try_reload(lambda: load_rule_set([edited]))
        assert status.last_ok and status.successes == 1
        assert run(engine, node, 3) == []  # still firing, no second page
        assert states(engine) == {"0": F}

    def test_a_removed_rule_resolves_its_alerts_instead_of_forgetting_them(
        self, tmp_path: Path, node: Node
    ) -> None:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        empty = tmp_path / "empty.yaml"
        empty.write_text("rules: []\n")
        engine.try_reload(lambda: load_rule_set([empty]))
        now = node.poll()
        (t,) = engine.evaluate(node.window, now)
        assert (t.previous, t.current) == (F, R)
        assert dict(t.alert.annotations)["resolved_reason"] == "rule removed or changed"
        assert engine.alerts() == []

    def test_a_bad_file_is_rejected_and_the_old_rules_keep_running(
        self, tmp_path: Path, node: Node
    ) -> None:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        bad = tmp_path / "bad.yaml"
        bad.write_text("rules:\n  - name: Hot\n    expr: temp >\n    severity: critical\n")
        status = engine.try_reload(lambda: load_rule_set([bad]))
        assert not status.last_ok and status.failures == 1
        assert status.last_problems == (f"{bad}:3:17: rules[0].expr: unexpected end of expression",)
        assert [r.name for r in engine.rules.rules] == ["Hot"]
        node.temps[0] = 70.0
        assert run(engine, node, 1) == [("0", F, R)]  # the old rule is still evaluated


class TestRestart:
    """State is saved as it changes and restored on start: no re-page, nothing forgotten."""

    def restart(
        self, tmp_path: Path, db: Database, node: Node, old: RuleEngine, **settings: float
    ) -> RuleEngine:
        AlertStateStore(db).save(old.take_changes())
        new = engine_for(tmp_path, HOT, **settings)
        entries, last = AlertStateStore(db).load()
        new.restore(entries, last_eval_at=last, now=node.clock.now())
        return new

    @pytest.fixture
    def db(self, tmp_path: Path) -> Database:
        return Database.open(sqlite_url(tmp_path / "state.db"))

    def test_restart_while_firing_neither_repages_nor_forgets(
        self, tmp_path: Path, node: Node, db: Database
    ) -> None:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        fired_at = engine.alerts()[0].fired_at
        node.clock.advance(120)  # the daemon is down for two minutes
        engine = self.restart(tmp_path, db, node, engine)
        assert run(engine, node, 3) == []  # no new INACTIVE→FIRING: nothing re-paged
        (alert,) = engine.alerts()
        assert alert.state == F and alert.fired_at == fired_at
        node.temps[0] = 70.0
        assert run(engine, node, 1) == [("0", F, R)]  # and it is not forgotten

    def test_restart_with_no_data_yet_keeps_a_firing_alert_firing(
        self, tmp_path: Path, node: Node, db: Database
    ) -> None:
        """The in-memory window is empty after a restart: that is not evidence of health."""
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        engine = self.restart(tmp_path, db, node, engine)
        empty = MemoryWindow(retention=60)
        assert engine.evaluate(empty, node.clock.advance(5)) == []
        assert [e.state for e in engine.entries()] == [F]
        report = engine.health()
        assert report is not None and report.node.state == HealthState.UNKNOWN

    def test_restart_while_pending_keeps_the_progress(
        self, tmp_path: Path, node: Node, db: Database
    ) -> None:
        engine = engine_for(tmp_path, HOT, for_grace_period_s=10.0)
        node.temps[0] = 99.0
        run(engine, node, 2)  # pending since the first poll: 5 s of the 20 s seen
        assert states(engine) == {"0": P}
        node.clock.advance(30)  # down for 30 s: that time does not count
        engine = self.restart(tmp_path, db, node, engine, for_grace_period_s=10.0)
        assert run(engine, node, 2) == []  # 5 + 10 s seen
        assert run(engine, node, 1) == [("0", P, F)]  # 20 s seen

    def test_a_restart_near_the_end_of_for_leaves_a_grace_period(
        self, tmp_path: Path, node: Node, db: Database
    ) -> None:
        engine = engine_for(tmp_path, HOT, for_grace_period_s=10.0)
        node.temps[0] = 99.0
        run(engine, node, 4)  # 15 of 20 s seen: 5 s to go, less than the 10 s grace
        engine = self.restart(tmp_path, db, node, engine, for_grace_period_s=10.0)
        assert run(engine, node, 1) == []
        assert run(engine, node, 1) == [("0", P, F)]  # 10 s after the restart

    def test_restart_after_a_long_outage_restarts_pending_alerts(
        self, tmp_path: Path, node: Node, db: Database
    ) -> None:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 2)
        node.clock.advance(2 * 3600)
        engine = self.restart(tmp_path, db, node, engine)
        assert engine.alerts() == []
        AlertStateStore(db).save(engine.take_changes())
        assert AlertStateStore(db).load()[0] == []  # the stale row is gone for good
        assert run(engine, node, 1) == [("0", AlertState.INACTIVE, P)]


@pytest.mark.postgres
def test_alert_state_round_trips_through_postgresql(
    tmp_path: Path, node: Node, pg_url: str
) -> None:
    db = Database.open(pg_url)
    try:
        engine = engine_for(tmp_path, HOT)
        node.temps[0] = 99.0
        run(engine, node, 5)
        store = AlertStateStore(db)
        store.save(engine.take_changes())
        entries, last = store.load()
        assert [e.alert for e in entries] == [e.alert for e in engine.entries()]
        assert last == engine.last_eval_at
        node.temps[0] = 70.0
        run(engine, node, 1)
        store.save(engine.take_changes())
        (entry,) = store.load()[0]
        assert entry.alert.state == R
    finally:
        db.dispose()


def test_the_api_can_read_while_the_tick_evaluates(tmp_path: Path, node: Node) -> None:
    """Readers take the engine's lock: no 'dictionary changed size' under concurrency."""
    import threading

    engine = engine_for(tmp_path, HOT)
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                engine.alerts()
                engine.health()
                engine.rule_statuses()
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(200):
            node.temps = {0: 99.0 if i % 7 else 70.0, 1: 99.0 if i % 5 else 70.0}
            run(engine, node, 1)
    finally:
        done.set()
        reader.join()
    assert errors == []


def test_an_empty_label_value_is_no_label_on_the_alert(tmp_path: Path) -> None:
    """As in Prometheus: a series' ``afid=""`` (the report had none) is not put on the page,
    nor is a label a rule sets to "", while the template still renders the series' labels and
    the alert keeps one identity."""
    clock = FakeClock(T0)
    window = MemoryWindow(retention=86400)
    engine = engine_for(
        tmp_path,
        """
rules:
  - name: Fault
    expr: incident
    op: "=="
    threshold: 1
    severity: critical
    labels: {source: "", team: gpu}
    annotations: {summary: "GPU {{ $labels.gpu }} AFID [{{ $labels.afid }}] {{ $labels.source }}"}
""",
    )
    labels = make_labels({"gpu": 3, "uuid": "U3", "afid": "", "action": "", "source": "kernel"})
    transitions = []
    for _ in range(2):
        now = clock.advance(5.0)
        window.append([Reading("incident", labels, 1.0, now)])
        transitions += engine.evaluate(window, now)
    [fired] = [t.alert for t in transitions if t.current == F]
    shown = dict(fired.labels)
    assert "afid" not in shown and "action" not in shown, shown
    assert "source" not in shown, shown  # the rule's `source: ""` removes it
    assert shown["team"] == "gpu" and shown["gpu"] == "3", shown
    assert dict(fired.annotations)["summary"] == "GPU 3 AFID [] kernel"  # templates see the series
    assert fired.key.labels == identity_labels(labels)  # one alert, whatever it shows
