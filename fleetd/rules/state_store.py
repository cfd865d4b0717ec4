"""The table that keeps alert state across restarts, and the engine's last evaluation time.

Only alerts that are pending, firing or recently resolved have a row; a row changes when the
alert's state or timestamps change (not on every evaluation). ``save_changes`` takes the
caller's connection, so alert state can share a transaction with other writes to the same
database. The daemon writes the outbox first and the alert state after it, in two ordered
transactions (``Daemon.tick``): after a crash in between, the restored engine repeats the
transition and the dispatcher, which already holds it, does not send it twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    delete,
    select,
    update,
)

from fleetd.model import Alert, AlertKey, AlertState, Labels, Severity, identity_labels
from fleetd.rules.state import AlertEntry, StateChanges
from fleetd.store.db import Database
from fleetd.store.rows import batches, finite
from fleetd.store.schema import METADATA
from fleetd.store.upsert import upsert, upsert_rows

alert_state_table = Table(
    "fleetd_alert_state",
    METADATA,
    Column("fingerprint", String(16), primary_key=True),
    Column("rule", String(128), nullable=False),
    Column("key_labels", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("labels", Text, nullable=False),
    Column("annotations", Text, nullable=False),
    Column("value", Float, nullable=True),
    Column("active_at", Float, nullable=True),
    Column("fired_at", Float, nullable=True),
    Column("resolved_at", Float, nullable=True),
    Column("keep_firing_since", Float, nullable=True),
    Column("last_eval_at", Float, nullable=True),
    Column("no_data_since", Float, nullable=True),
    Column("remediation_plan", String(64), nullable=True),
)

rule_engine_table = Table(
    "fleetd_rule_engine",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("last_eval_at", Float, nullable=False),
)


# built once: written after every poll (an upsert built anew costs five times as much)
_SET_EVAL_TIME = (
    update(rule_engine_table)
    .where(rule_engine_table.c.id == 1)
    .values(last_eval_at=bindparam("at"))
)


def save_changes(conn: Connection, changes: StateChanges) -> None:
    """Write ``changes`` (from ``RuleEngine.take_changes``) inside the caller's transaction."""
    gone = [key.fingerprint() for key in changes.deletes]
    for chunk in batches(gone, 500):
        conn.execute(delete(alert_state_table).where(alert_state_table.c.fingerprint.in_(chunk)))
    upsert_rows(conn, alert_state_table, ["fingerprint"], [_row(e) for e in changes.upserts])
    if changes.last_eval_at is not None:
        at = changes.last_eval_at
        if conn.execute(_SET_EVAL_TIME, {"at": at}).rowcount == 0:  # the first save ever
            upsert(conn, rule_engine_table, {"id": 1}, {"last_eval_at": at})


def load_state(conn: Connection) -> tuple[list[AlertEntry], float | None]:
    """Every saved alert and when the engine last evaluated (None: never)."""
    entries = [_entry(row) for row in conn.execute(select(alert_state_table)).mappings()]
    last = conn.execute(
        select(rule_engine_table.c.last_eval_at).where(rule_engine_table.c.id == 1)
    ).scalar()
    return entries, None if last is None else float(last)


class AlertStateStore:
    """``save_changes``/``load_state`` with their own transactions, for simple wiring."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, changes: StateChanges) -> None:
        with self.db.begin() as conn:
            save_changes(conn, changes)

    def load(self) -> tuple[list[AlertEntry], float | None]:
        with self.db.begin() as conn:
            return load_state(conn)


def _row(entry: AlertEntry) -> dict[str, object]:
    alert = entry.alert
    return {
        "fingerprint": alert.key.fingerprint(),
        "rule": alert.key.rule,
        "key_labels": _dump(alert.key.labels),
        "state": alert.state.value,
        "severity": alert.severity.value,
        "labels": _dump(alert.labels),
        "annotations": _dump(alert.annotations),
        "value": finite(alert.value),
        "active_at": alert.active_at,
        "fired_at": alert.fired_at,
        "resolved_at": alert.resolved_at,
        "keep_firing_since": alert.keep_firing_since,
        "last_eval_at": alert.last_eval_at,
        "no_data_since": entry.no_data_since,
        "remediation_plan": alert.remediation_plan,
    }


def _entry(row: Mapping[Any, Any]) -> AlertEntry:
    get = row.__getitem__
    alert = Alert(
        key=AlertKey(str(get("rule")), identity_labels(_load(get("key_labels")))),
        state=AlertState(get("state")),
        severity=Severity(get("severity")),
        labels=_load(get("labels")),
        annotations=_load(get("annotations")),
        value=_float(get("value")),
        active_at=_float(get("active_at")),
        fired_at=_float(get("fired_at")),
        resolved_at=_float(get("resolved_at")),
        keep_firing_since=_float(get("keep_firing_since")),
        last_eval_at=_float(get("last_eval_at")),
        remediation_plan=get("remediation_plan"),
    )
    return AlertEntry(alert, _float(get("no_data_since")))


def _dump(labels: Labels) -> str:
    return json.dumps([list(pair) for pair in labels], ensure_ascii=False)


def _load(text: object) -> Labels:
    pairs = json.loads(str(text))
    return tuple((str(k), str(v)) for k, v in pairs)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
