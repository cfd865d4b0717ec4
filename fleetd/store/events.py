"""The append-only event log: alerts, remediation steps, resets, config reloads, operator
actions and storage incidents, in the same database as the telemetry.

It answers "what happened to GPU 3 last night" next to the data that shows why. Rows are
never updated; ``prune`` only removes events older than the configured retention.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import Column, Float, Index, Integer, String, Table, Text, delete, select

from fleetd.store.db import Database
from fleetd.store.schema import METADATA

events_table = Table(
    "fleetd_events",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("ts", Float(precision=53), nullable=False),
    Column("node", String(200), nullable=False),
    Column("gpu", Integer, nullable=True),
    Column("kind", String(64), nullable=False),
    Column("message", Text, nullable=False),
    Column("data", Text, nullable=False),  # JSON object
    Column("actor", String(200), nullable=True),  # who acted: an operator, a rule, fleetd
    Index("ix_fleetd_events_ts", "ts"),
    Index("ix_fleetd_events_node_gpu_ts", "node", "gpu", "ts"),
    Index("ix_fleetd_events_kind_ts", "kind", "ts"),
)


class EventKind(StrEnum):
    """The kinds fleetd itself writes; other snake_case kinds are accepted too."""

    ALERT = "alert"
    REMEDIATION = "remediation"
    RESET = "reset"
    CONFIG_RELOAD = "config_reload"
    OPERATOR_ACTION = "operator_action"
    STORAGE = "storage"


_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
DEFAULT_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    ts: float
    node: str
    gpu: int | None
    kind: str
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)
    actor: str | None = None


def _check_kind(kind: str) -> str:
    kind = str(kind)
    if not _KIND.match(kind):
        raise ValueError(f"event kind {kind!r} must be snake_case (e.g. {EventKind.ALERT.value})")
    return kind


class EventLog:
    """Append and query events; every call is one short transaction."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def append(
        self,
        kind: str,
        *,
        now: float,
        node: str,
        gpu: int | None = None,
        message: str,
        data: Mapping[str, Any] | None = None,
        actor: str | None = None,
    ) -> int:
        """Record one event and return its id."""
        row = {
            "ts": float(now),
            "node": node,
            "gpu": gpu,
            "kind": _check_kind(kind),
            "message": message,
            "data": json.dumps(dict(data or {}), sort_keys=True, default=str),
            "actor": actor,
        }
        with self._db.begin() as conn:
            result = conn.execute(events_table.insert().values(**row))
            key = result.inserted_primary_key
        assert key is not None
        return int(key[0])

    def query(
        self,
        *,
        node: str | None = None,
        gpu: int | None = None,
        kinds: Iterable[str] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        newest_first: bool = False,
    ) -> list[Event]:
        """Events matching every given filter; ``since`` ≤ ts ≤ ``until``.

        Oldest first by default (``limit`` keeps the oldest); ``newest_first`` returns, and
        limits to, the most recent ones.
        """
        t = events_table
        stmt = select(t)
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        if gpu is not None:
            stmt = stmt.where(t.c.gpu == gpu)
        if kinds is not None:
            stmt = stmt.where(t.c.kind.in_([_check_kind(k) for k in kinds]))
        if since is not None:
            stmt = stmt.where(t.c.ts >= since)
        if until is not None:
            stmt = stmt.where(t.c.ts <= until)
        order = (t.c.ts.desc(), t.c.id.desc()) if newest_first else (t.c.ts, t.c.id)
        stmt = stmt.order_by(*order).limit(max(0, int(limit)))
        with self._db.read() as conn:
            rows = conn.execute(stmt).all()
        return [
            Event(
                id=int(r.id),
                ts=float(r.ts),
                node=r.node,
                gpu=None if r.gpu is None else int(r.gpu),
                kind=r.kind,
                message=r.message,
                data=json.loads(r.data),
                actor=r.actor,
            )
            for r in rows
        ]

    def prune(self, *, before: float, limit: int = 10_000) -> int:
        """Delete up to ``limit`` events older than ``before`` (retention); returns how many."""
        t = events_table
        with self._db.begin() as conn:
            ids = conn.execute(
                select(t.c.id).where(t.c.ts < before).order_by(t.c.id).limit(limit)
            ).scalars()
            chosen = list(ids)
            if chosen:
                conn.execute(delete(t).where(t.c.id.in_(chosen)))
        return len(chosen)
