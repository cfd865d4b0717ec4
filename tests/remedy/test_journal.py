"""The run journal on SQLite and PostgreSQL: runs, events, delivery flags, the pause switch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from fleetd.remedy import machine as m
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.journal import PauseState, RunJournal
from fleetd.store.db import Database, sqlite_url

from .machine_world import NOW, new_run


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "j.db")
    else:
        url = request.getfixturevalue("pg_url")
    database = Database.open(url)
    try:
        yield database
    finally:
        database.dispose()


def event(run: m.Run, seq: int, kind: str = "x") -> RemediationEvent:
    return RemediationEvent(
        event_id=f"{run.run_id}:{seq}",
        node=run.node,
        kind=kind,
        message=f"step {seq}",
        at=NOW + seq,
        run_id=run.run_id,
        seq=seq,
        state=run.state.value,
        trigger=run.trigger,
        gpus=run.gpu_indices,
        evidence=("a", "b"),
    )


def test_runs_and_events_round_trip(db: Database) -> None:
    journal = RunJournal(db)
    run, _ = new_run()
    journal.save(run, [event(run, 1, "run_planned"), event(run, 2, "policy")])
    assert journal.get(run.run_id) == run
    assert journal.last_seq(run.run_id) == 2
    assert journal.active("node-a") == [run] and journal.active("node-b") == []
    later = replace(run, state=m.RunState.QUARANTINED, holding=True, entered_at=NOW + 9)
    journal.save(later, [event(later, 3, "quarantined")])
    assert journal.active("node-a") == [] and journal.holding("node-a") == [later]
    got = journal.events(run_id=run.run_id)
    assert [e.kind for e in got] == ["run_planned", "policy", "quarantined"]
    assert got[0] == event(run, 1, "run_planned")  # every field survives
    assert journal.runs("node-a", since=NOW - 1) == [later]
    assert journal.runs("node-a", since=NOW + 1) == []


def test_delivery_flags(db: Database) -> None:
    journal = RunJournal(db)
    run, _ = new_run()
    journal.save(run, [event(run, i) for i in (1, 2, 3)])
    assert [e.seq for e in journal.undelivered("node-a")] == [1, 2, 3]
    journal.mark_delivered([f"{run.run_id}:1", f"{run.run_id}:2"])
    assert [e.seq for e in journal.undelivered("node-a")] == [3]
    journal.append_events([event(run, 4, "further_trigger")])
    assert journal.last_seq(run.run_id) == 4


def test_an_event_id_is_written_once(db: Database) -> None:
    journal = RunJournal(db)
    run, _ = new_run()
    journal.save(run, [event(run, 1)])
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        journal.save(run, [event(run, 1)])
    assert len(journal.events(run_id=run.run_id)) == 1  # the failed write left nothing


def test_pause_switch(db: Database) -> None:
    journal = RunJournal(db)
    assert journal.pause_state("n") == PauseState(False)
    journal.set_paused("n", PauseState(True, "alice", "rollout", NOW))
    assert journal.pause_state("n") == PauseState(True, "alice", "rollout", NOW)
    journal.set_paused("n", PauseState(False, "alice", "done", NOW + 1))
    assert not journal.pause_state("n").paused
    assert not journal.pause_state("other").paused


def test_what_every_evaluation_reads_follows_each_write_and_a_failed_one(
    db: Database, monkeypatch: pytest.MonkeyPatch, count_reads: Callable[[Database], list[str]]
) -> None:
    """``holding`` and ``pause_state`` are kept between the journal's own writes: each write,
    committed or not, is seen by the next read, and reads in between do not query."""
    journal = RunJournal(db)
    run, _ = new_run()
    assert journal.holding("node-a") == [] and not journal.pause_state("node-a").paused
    held = replace(run, state=m.RunState.QUARANTINED, holding=True, entered_at=NOW + 9)
    journal.save(held)
    assert journal.holding("node-a") == [held]
    journal.set_paused("node-a", PauseState(True, "ops", "maintenance", NOW))
    assert journal.pause_state("node-a") == PauseState(True, "ops", "maintenance", NOW)
    assert journal.holding("node-a") == [held]  # read again after the pause was written
    queries = count_reads(db)
    for _ in range(3):
        assert journal.holding("node-a") == [held] and journal.pause_state("node-a").paused
    assert queries == []
    released = replace(held, holding=False, entered_at=NOW + 20)
    real_begin = db.begin

    def failing_begin(*args: object, **kwargs: object) -> object:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(db, "begin", failing_begin)
    with pytest.raises(RuntimeError):
        journal.save(released)
    assert journal.holding("node-a") == [held] and queries == ["read"]  # read again: unchanged
    monkeypatch.setattr(db, "begin", real_begin)
    journal.save(released)
    assert journal.holding("node-a") == [] and journal.holding("node-b") == []


def test_counts_follow_each_save_by_any_journal_over_the_database(
    db: Database, count_reads: Callable[[Database], list[str]]
) -> None:
    """``counts`` (every /metrics scrape) is kept between writes, and the write counter is
    the database's: the reliability report's journal, a second object over the same
    database that never writes, sees a run the remediation's journal concluded."""
    writer, reader = RunJournal(db), RunJournal(db)
    run, _ = new_run()
    writer.save(run)
    assert reader.counts("node-a") == ({}, 0)
    assert reader.holding("node-a") == []
    queries = count_reads(db)
    assert reader.counts("node-a") == ({}, 0) and queries == []  # kept: no write since
    done = replace(
        run, state=m.RunState.QUARANTINED, holding=True, reset_count=1, entered_at=NOW + 9
    )
    writer.save(done)
    assert reader.counts("node-a") == ({("reset", "quarantined"): 1}, 1)
    assert reader.holding("node-a") == [done]
    counted, _ = reader.counts("node-a")
    counted[("reset", "quarantined")] = 99  # a caller's copy: the kept value is not changed
    assert reader.counts("node-a") == ({("reset", "quarantined"): 1}, 1)
