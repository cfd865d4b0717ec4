"""Remediation events through the real alert dispatcher: change events and alerts."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.clock import FakeClock
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
    # a follow-on alert for GPU 3 while the run holds it: inhibited by the in-progress alert
    follow = ue_transition(3, rig.clock.now(), plan=None)
    dispatcher.submit([follow], rig.clock.now())
    dispatcher.tick(rig.clock.now())
    states = {a["fingerprint"]: a for a in dispatcher.alerts(rig.clock.now())}
    mine = states[follow.alert.key.fingerprint()]
    assert mine.get("inhibitedBy"), mine
    rig.run_until_settled()
    assert rig.run(run_id).state is m.RunState.QUARANTINED
    now = rig.clock.now()
    dispatcher.tick(now + 60)
    held = [a for a in dispatcher.alerts(now) if dict(a["labels"]).get("alertname") == HELD_ALERT]  # type: ignore[arg-type]
    assert len(held) == 8 and {dict(a["labels"])["severity"] for a in held} == {"critical"}  # type: ignore[arg-type]
    text = stream.getvalue()
    assert "resetting GPU 3 once" in text and HELD_ALERT in text
    # a person brings the hive back: the held alerts resolve, nothing stays "in progress"
    rig.remediation.undrain(3, who="oncall", why="replaced riser", now=rig.clock.now())
    rig.run_until_settled()
    later = rig.clock.now() + 1
    dispatcher.tick(later)
    by_name: dict[str, set[object]] = {}
    for a in dispatcher.alerts(later):
        by_name.setdefault(dict(a["labels"])["alertname"], set()).add(a["status"])  # type: ignore[arg-type]
    assert by_name == {
        "GpuUncorrectableEcc": {"firing"},  # the rules engine's own alert, submitted above
        HELD_ALERT: {"resolved"},
        "GpuRemediationInProgress": {"resolved"},
    }
    assert dispatcher.status(later)["alerts"] == {"firing": 1, "resolved": 16}


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
