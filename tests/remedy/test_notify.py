"""Remediation events through the real alert dispatcher: change events and alerts."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.notification import ChangeEvent
from fleetd.clock import FakeClock
from fleetd.model import AlertKey, Transition, make_labels
from fleetd.remedy import machine as m
from fleetd.remedy.notify import HELD_ALERT, DispatcherSink, EventLogSink, change_event
from fleetd.store.db import Database, sqlite_url
from fleetd.store.events import EventLog

from .rig import Rig, make_rig, path_with, ue_transition


@pytest.fixture
def wired(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Rig, Dispatcher, io.StringIO]]:
    rig = make_rig(tmp_path, clock, workers_on=(2, 3))
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    stream = io.StringIO()
    db = Database.open(sqlite_url(tmp_path / "alerts.db"))
    dispatcher = Dispatcher(
        AlertingConfig(), db, node=rig.node_name, now=clock.now(), stream=stream
    )
    rig.remediation.executor._sink = DispatcherSink(dispatcher)
    try:
        yield rig, dispatcher, stream
    finally:
        dispatcher.close()
        db.dispose()
        rig.close()


def test_a_run_in_progress_mutes_follow_on_alerts_and_a_quarantine_pages(
    wired: tuple[Rig, Dispatcher, io.StringIO],
) -> None:
    rig, dispatcher, stream = wired
    rig.sim.inject(5, "pcie_downgrade", persistent=True)  # the reset will not fix this
    [run_id] = rig.fault(3)
    rig.clock.advance(1)
    rig.remediation.tick(rig.clock.now())
    now = rig.clock.now()
    # a consequence of the reset on GPU 3 while the run holds it: inhibited by the in-progress
    # alert; the alert that started the run (named in caused_by) never is
    trigger = ue_transition(3, now)
    follow = replace(
        trigger,
        alert=replace(
            trigger.alert,
            key=AlertKey("GpuMissing", trigger.alert.key.labels),
            labels=make_labels({**dict(trigger.alert.labels), "alertname": "GpuMissing"}),
            remediation_plan=None,
        ),
    )
    dispatcher.submit([trigger, follow], now)
    dispatcher.tick(now)
    states = {a.alert.fingerprint: a for a in dispatcher.alerts(now)}
    assert states[follow.alert.key.fingerprint()].inhibited_by
    progress = [
        a for a in dispatcher.alerts(now) if a.alert.alertname == "GpuRemediationInProgress"
    ]
    assert len(progress) == 8
    assert {a.alert.annotation("caused_by") for a in progress} == {trigger.alert.key.fingerprint()}
    rig.run_until_settled()
    assert rig.run(run_id).state is m.RunState.QUARANTINED
    now = rig.clock.now()
    dispatcher.tick(now + 60)
    held = [a for a in dispatcher.alerts(now) if a.alert.alertname == HELD_ALERT]
    # one incident for the unit, naming the GPU that faulted and listing the unit once
    assert len(held) == 1
    labels = dict(held[0].alert.labels)
    assert labels["severity"] == "critical" and labels["gpu"] == "3"
    assert labels["gpus"] == "0,1,2,3,4,5,6,7"
    text = stream.getvalue()
    assert "GPU 3 reset once" in text and HELD_ALERT in text
    # a person brings the hive back: the held alert resolves, nothing stays "in progress"
    rig.remediation.undrain(3, who="oncall", why="replaced riser", now=rig.clock.now())
    rig.run_until_settled()
    later = rig.clock.now() + 1
    dispatcher.tick(later)
    by_name: dict[str, set[object]] = {}
    for a in dispatcher.alerts(later):
        by_name.setdefault(a.alert.alertname, set()).add(a.alert.status)
    assert by_name == {
        "GpuUncorrectableEcc": {"firing"},  # the rules engine's own alerts, submitted above
        "GpuMissing": {"firing"},
        HELD_ALERT: {"resolved"},
        "GpuRemediationInProgress": {"resolved"},
    }
    assert dispatcher.status(later)["alerts"] == {"firing": 2, "resolved": 9}


def missing_transition(gpu: int, at: float) -> Transition:
    """The rules engine's GpuMissing alert: a consequence of the reset, not a fault of its own."""
    ue = ue_transition(gpu, at, plan=None)
    alert = replace(
        ue.alert,
        key=AlertKey("GpuMissing", ue.alert.key.labels),
        labels=make_labels({**dict(ue.alert.labels), "alertname": "GpuMissing"}),
    )
    return replace(ue, alert=alert)


def test_change_event_carries_the_trigger_and_evidence(
    wired: tuple[Rig, Dispatcher, io.StringIO],
) -> None:
    rig, _, _ = wired
    [run_id] = rig.fault(3)
    rig.run_until_settled()
    event = rig.remediation.events(run_id)[0]
    change = change_event(event)
    assert change.id == event.event_id
    assert (
        dict(change.labels)["run_id"] == run_id and dict(change.labels)["gpus"] == "0,1,2,3,4,5,6,7"
    )
    assert change.details["trigger"] == "alert GpuUncorrectableEcc on GPU 3 (value 1)"


def test_event_log_rows_name_the_gpu_and_the_person(
    wired: tuple[Rig, Dispatcher, io.StringIO],
) -> None:
    rig, _, _ = wired
    log = EventLog(rig.db)  # the store's event log, in the node's database
    rig.remediation.executor._event_sink = EventLogSink(log.append)
    [run_id] = rig.fault(3)
    rig.run_until_settled()
    rig.remediation.drain(2, who="carol", why="reseat", now=rig.clock.now())
    rig.run_until_settled()
    rig.remediation.pause(who="dave", why="rollout", now=rig.clock.now())
    rows = log.query(node=rig.node_name)
    kinds = [(r.kind, r.gpu, r.actor) for r in rows]
    assert kinds.count(("reset", 3, "fleetd")) == 1
    assert ("operator_action", 2, "carol") in kinds  # the drain request
    assert ("operator_action", None, "dave") in kinds
    first = min(rows, key=lambda r: r.id)
    assert first.kind == "remediation" and first.data["run_id"] == run_id
    assert len(rows) == len(rig.remediation.events())  # every step, once
    assert [r.message for r in log.query(node=rig.node_name, gpu=3)]  # queryable by GPU


class Recorder:
    """The two dispatcher inputs remediation uses, recorded."""

    def __init__(self) -> None:
        self.changes: list[ChangeEvent] = []
        self.transitions: list[Transition] = []

    def submit(self, transitions: Sequence[Transition], now: float) -> None:
        self.transitions += transitions

    def submit_change(self, event: ChangeEvent, now: float) -> int:
        self.changes.append(event)
        return 1


def test_a_run_speaks_once_per_milestone_with_worker_detail_inside(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(tmp_path, clock)  # eight workers, one per GPU
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    recorder = Recorder()
    rig.remediation.executor._sink = DispatcherSink(recorder)
    try:
        [run_id] = rig.fault(3)
        rig.run_until_settled()
        assert rig.run(run_id).state is m.RunState.DONE
    finally:
        rig.close()
    kinds = [dict(c.labels)["kind"] for c in recorder.changes]
    assert kinds == ["run_planned", "reset_done", "done"]
    assert {c.thread for c in recorder.changes} == {run_id}
    planned, reset, done = (c.summary for c in recorder.changes)
    assert "reset of GPUs 0-7 planned for alert GpuUncorrectableEcc on GPU 3" in planned
    assert "workers to drain: gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7" in planned
    assert "GPU 3 reset once; the reset reached GPUs 0-7 (workers stopped: gpu0," in reset
    assert "back in service after the reset and 3 healthy polls" in done
    assert all(c.summary.count(rig.node_name) == 1 for c in recorder.changes)
    # the journal keeps every step; only the milestones were notified
    assert len(rig.remediation.events(run_id)) > 40


def test_a_dry_run_says_so_once(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = make_rig(tmp_path, clock, workers_on=(3,), remediation={"mode": "dry-run"})
    monkeypatch.setenv("PATH", path_with(rig.fleet.bin_dir))
    recorder = Recorder()
    rig.remediation.executor._sink = DispatcherSink(recorder)
    try:
        rig.fault(3)
        rig.run_until_settled()
    finally:
        rig.close()
    assert [c.summary.count("dry-run") for c in recorder.changes] == [1, 1, 1]
    assert recorder.changes[0].summary.startswith(f"[dry-run] {rig.node_name}: reset of GPUs")
    assert recorder.transitions == []  # a dry run raises no alert
