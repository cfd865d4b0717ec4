"""The event log: append-only, queryable by node, GPU, kind and time (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest
from store_helpers import T0

from fleetd.store.db import Database
from fleetd.store.events import EventKind, EventLog


@pytest.fixture
def log(any_db: Database) -> EventLog:
    events = EventLog(any_db)
    events.append("alert", now=T0, node="n1", gpu=3, message="GpuHot firing", data={"v": 97})
    events.append(EventKind.REMEDIATION, now=T0 + 10, node="n1", gpu=3, message="drain")
    events.append("reset", now=T0 + 20, node="n1", gpu=3, message="hive reset", actor="fleetd")
    events.append("config_reload", now=T0 + 30, node="n1", message="reloaded")
    events.append("operator_action", now=T0 + 40, node="n2", gpu=0, message="x", actor="sre")
    return events


def test_append_returns_increasing_ids(any_db: Database) -> None:
    events = EventLog(any_db)
    a = events.append("storage", now=T0, node="n", message="m")
    b = events.append("storage", now=T0, node="n", message="m")
    assert b > a


def test_query_filters(log: EventLog) -> None:
    assert [e.message for e in log.query(node="n1", gpu=3)] == [
        "GpuHot firing",
        "drain",
        "hive reset",
    ]
    assert [e.kind for e in log.query(kinds=["reset", "config_reload"])] == [
        "reset",
        "config_reload",
    ]
    assert [e.ts - T0 for e in log.query(since=T0 + 10, until=T0 + 30)] == [10, 20, 30]
    assert [e.node for e in log.query(node="n2")] == ["n2"]
    assert log.query(gpu=7) == []


def test_fields_round_trip(log: EventLog) -> None:
    [alert] = log.query(kinds=["alert"])
    assert (alert.node, alert.gpu, alert.data, alert.actor) == ("n1", 3, {"v": 97}, None)
    [reset] = log.query(kinds=["reset"])
    assert reset.actor == "fleetd" and reset.data == {}


def test_limit_and_order(log: EventLog) -> None:
    assert [e.ts - T0 for e in log.query(limit=2)] == [0, 10]
    assert [e.ts - T0 for e in log.query(limit=2, newest_first=True)] == [40, 30]


def test_kind_must_be_snake_case(log: EventLog) -> None:
    with pytest.raises(ValueError, match="snake_case"):
        log.append("Bad Kind", now=T0, node="n", message="m")


def test_prune_removes_only_old_events(log: EventLog) -> None:
    assert log.prune(before=T0 + 15) == 2
    assert [e.ts - T0 for e in log.query()] == [20, 30, 40]
