"""The remediation run journal: runs, their step events, the pause switch, fleet leases.

A run's new state and the events of the step that produced it are written in one
transaction *before* the executor acts on the commands that state allows, so a daemon
killed at any point finds in here everything it needs to resume or conclude the run.
Events carry a ``delivered`` flag: the notifiers get each at least once, even across a crash.

The fleet tables (leases, failures, breaker) live in the local database for per-node limits
and are created alone in the shared PostgreSQL registry for fleet-wide ones
(``fleetd.remedy.lease``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    Select,
    String,
    Table,
    Text,
    func,
    select,
    update,
)

from fleetd.remedy.codec import event_from_dict, event_to_dict, run_from_dict, run_to_dict
from fleetd.remedy.events import RemediationEvent
from fleetd.remedy.run import Run
from fleetd.store.db import Database
from fleetd.store.rows import batches, compact_json, json_row, json_rows
from fleetd.store.schema import METADATA
from fleetd.store.upsert import upsert
from fleetd.store.writes import writes_on

runs_table = Table(
    "remedy_runs",
    METADATA,
    Column("run_id", String(64), primary_key=True),
    Column("node", String(255), nullable=False),
    Column("plan", String(16), nullable=False),
    Column("state", String(24), nullable=False),
    Column("active", Boolean, nullable=False),
    Column("holding", Boolean, nullable=False),
    Column("dry_run", Boolean, nullable=False),
    Column("trigger_gpu", Integer, nullable=True),
    Column("reset_count", Integer, nullable=False),
    Column("last_seq", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_remedy_runs_node_active", "node", "active"),
    Index("ix_remedy_runs_node_created", "node", "created_at"),
)

events_table = Table(
    "remedy_events",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False, unique=True),
    Column("node", String(255), nullable=False),
    Column("run_id", String(64), nullable=True),
    Column("seq", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("kind", String(48), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("delivered", Boolean, nullable=False, default=False),
    Column("data", Text, nullable=False),
    Index("ix_remedy_events_run", "run_id", "seq"),
    Index("ix_remedy_events_pending", "delivered", "id"),
)

control_table = Table(
    "remedy_control",
    METADATA,
    Column("node", String(255), primary_key=True),
    Column("paused", Boolean, nullable=False),
    Column("by", String(255), nullable=True),
    Column("reason", Text, nullable=True),
    Column("at", Float, nullable=True),
)

leases_table = Table(
    "remedy_fleet_leases",
    METADATA,
    Column("run_id", String(64), primary_key=True),
    Column("node", String(255), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("gpu_list", String(255), nullable=False),
    Column("manual", Boolean, nullable=False),
    Column("acquired_at", Float, nullable=False),
    # schema 4 (fleet caps per label group): the node's labels as JSON; NULL in a lease an
    # older fleetd wrote, which then counts against every group (fleetd.remedy.caps)
    Column("labels", Text, nullable=True),
)

failures_table = Table(
    "remedy_fleet_failures",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("node", String(255), nullable=False),
    Column("gpu", Integer, nullable=True),
    Column("run_id", String(64), nullable=True),
    Column("at", Float, nullable=False),
    Column("labels", Text, nullable=True),  # schema 4: the node's labels (group breakers)
    Index("ix_remedy_fleet_failures_at", "at"),
)

breaker_table = Table(
    "remedy_fleet_breaker",
    METADATA,
    Column("scope", String(255), primary_key=True),
    Column("tripped", Boolean, nullable=False),
    Column("tripped_at", Float, nullable=True),
    Column("reason", Text, nullable=True),
    Column("reset_by", String(255), nullable=True),
    Column("reset_at", Float, nullable=True),
)

FLEET_TABLES = (leases_table, failures_table, breaker_table)

_Counts = tuple[tuple[tuple[tuple[str, str], int], ...], int]  # ((plan, state), n)…, resets


@dataclass(frozen=True, slots=True)
class PauseState:
    paused: bool
    by: str | None = None
    reason: str | None = None
    at: float | None = None


class RunJournal:
    """Runs and their events in the node's database; one writer (this node's daemon).

    Being the only writer, it keeps what every evaluation asks (the runs holding GPUs, the
    pause switch, the counts /metrics shows) in memory between writes: each write moves the
    database's write count on after it ends (``fleetd.store.writes``, shared with the other
    journal over the same database), and a read made while a write ran is not kept."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._writes = writes_on(db)
        self._holding: dict[str, tuple[int, tuple[Run, ...]]] = {}
        self._pause: dict[str, tuple[int, PauseState]] = {}
        self._counts: dict[str, tuple[int, _Counts]] = {}

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction; when it ends (committed or not) what was kept is read afresh."""
        try:
            with self._db.begin() as conn:
                yield conn
        finally:
            self._writes.ended()

    # ---- writes ------------------------------------------------------------------------
    def save(
        self,
        run: Run,
        events: Sequence[RemediationEvent] = (),
        *,
        also: Callable[[Connection], None] | None = None,
    ) -> None:
        """Upsert ``run`` and append ``events`` in one transaction; ``also`` writes what must
        change with them (the RMA records of a concluded run, ``fleetd.remedy.rma``)."""
        row = {
            "node": run.node,
            "plan": run.plan.value,
            "state": run.state.value,
            "active": not run.terminal,
            "holding": run.holding,
            "dry_run": run.dry_run,
            "trigger_gpu": run.trigger.gpu,
            "reset_count": run.reset_count,
            "created_at": run.created_at,
            "updated_at": run.entered_at,
            "data": compact_json(run_to_dict(run)),
        }
        with self._writing() as conn:
            last = conn.execute(
                select(runs_table.c.last_seq).where(runs_table.c.run_id == run.run_id)
            ).scalar_one_or_none()
            seq = max([last or 0, *(e.seq for e in events)])
            upsert(conn, runs_table, {"run_id": run.run_id}, {"last_seq": seq, **row})
            self._insert_events(conn, events)
            if also is not None:
                also(conn)

    def append_events(self, events: Sequence[RemediationEvent]) -> None:
        """Append events that change no run (node-level, or a note on a finished run)."""
        if not events:
            return
        with self._db.begin() as conn:
            for event in events:
                if event.run_id is not None and event.seq:
                    conn.execute(
                        update(runs_table)
                        .where(runs_table.c.run_id == event.run_id)
                        .where(runs_table.c.last_seq < event.seq)
                        .values(last_seq=event.seq)
                    )
            self._insert_events(conn, events)

    @staticmethod
    def _insert_events(conn: Connection, events: Sequence[RemediationEvent]) -> None:
        if not events:
            return
        rows = [
            {
                "event_id": e.event_id,
                "node": e.node,
                "run_id": e.run_id,
                "seq": e.seq,
                "at": e.at,
                "kind": e.kind,
                "severity": e.severity,
                "delivered": False,
                "data": compact_json(event_to_dict(e)),
            }
            for e in events
        ]
        conn.execute(events_table.insert(), rows)

    def mark_delivered(self, event_ids: Iterable[str]) -> None:
        ids = list(event_ids)
        if not ids:
            return
        with self._db.begin() as conn:
            conn.execute(
                update(events_table).where(events_table.c.event_id.in_(ids)).values(delivered=True)
            )

    # ---- reads -------------------------------------------------------------------------
    def get(self, run_id: str) -> Run | None:
        query = select(runs_table.c.data).where(runs_table.c.run_id == run_id)
        return json_row(self._db, query, run_from_dict)

    def last_seq(self, run_id: str) -> int:
        with self._db.read() as conn:
            seq = conn.execute(
                select(runs_table.c.last_seq).where(runs_table.c.run_id == run_id)
            ).scalar_one_or_none()
        return int(seq or 0)

    def active(self, node: str) -> list[Run]:
        """Unfinished runs of ``node``, oldest first."""
        return self._runs(
            select(runs_table.c.data)
            .where(runs_table.c.node == node, runs_table.c.active.is_(True))
            .order_by(runs_table.c.created_at, runs_table.c.run_id)
        )

    def holding(self, node: str) -> list[Run]:
        """Finished runs that still hold GPUs out of service (quarantined, drained, …); read
        every evaluation, so kept between this journal's writes (the query is built only
        when it is read: building it costs more than the rest of a kept read)."""
        held = self._writes.kept(self._holding, node, lambda: self._read_holding(node))
        return list(held)

    def _read_holding(self, node: str) -> tuple[Run, ...]:
        query = (
            select(runs_table.c.data)
            .where(runs_table.c.node == node, runs_table.c.holding.is_(True))
            .order_by(runs_table.c.created_at, runs_table.c.run_id)
        )
        return tuple(self._runs(query))

    def runs(self, node: str, *, since: float | None = None, limit: int = 200) -> list[Run]:
        """Runs of ``node`` created at or after ``since``, newest first."""
        query = select(runs_table.c.data).where(runs_table.c.node == node)
        if since is not None:
            query = query.where(runs_table.c.created_at >= since)
        query = query.order_by(runs_table.c.created_at.desc(), runs_table.c.run_id.desc())
        return self._runs(query.limit(limit))

    def _runs(self, query: Select[tuple[str]]) -> list[Run]:
        return json_rows(self._db, query, run_from_dict)

    def _events(self, query: Select[tuple[str]]) -> list[RemediationEvent]:
        return json_rows(self._db, query, event_from_dict)

    def counts(self, node: str) -> tuple[dict[tuple[str, str], int], int]:
        """Concluded runs by (plan, state), and the resets issued (dry runs excluded); every
        /metrics scrape asks (twice: remediation and reliability), so kept between writes
        on the database as ``holding`` is (only ``save`` changes what it counts)."""
        counted = self._writes.kept(self._counts, node, lambda: self._read_counts(node))
        return dict(counted[0]), counted[1]

    def _read_counts(self, node: str) -> _Counts:
        with self._db.read() as conn:
            rows = conn.execute(
                select(runs_table.c.plan, runs_table.c.state, func.count())
                .where(
                    runs_table.c.node == node,
                    runs_table.c.active.is_(False),
                    runs_table.c.dry_run.is_(False),
                )
                .group_by(runs_table.c.plan, runs_table.c.state)
            ).all()
            resets = conn.execute(
                select(func.count()).where(
                    runs_table.c.node == node,
                    runs_table.c.dry_run.is_(False),
                    runs_table.c.reset_count > 0,
                )
            ).scalar_one()
        return tuple(((str(p), str(s)), int(n)) for p, s, n in rows), int(resets)

    def events(
        self, *, run_id: str | None = None, node: str | None = None, limit: int = 1000
    ) -> list[RemediationEvent]:
        """Events in the order they were written."""
        query = select(events_table.c.data)
        if run_id is not None:
            query = query.where(events_table.c.run_id == run_id)
        if node is not None:
            query = query.where(events_table.c.node == node)
        return self._events(query.order_by(events_table.c.id).limit(limit))

    def events_of(self, run_ids: Iterable[str]) -> dict[str, list[RemediationEvent]]:
        """The events of each of ``run_ids``, in the order written (one query per 500 runs:
        the reliability KPIs read a window of runs at once)."""
        ids = sorted(set(run_ids))
        out: dict[str, list[RemediationEvent]] = {i: [] for i in ids}
        for chunk in batches(ids, 500):
            query = (
                select(events_table.c.data)
                .where(events_table.c.run_id.in_(chunk))
                .order_by(events_table.c.id)
            )
            for event in self._events(query):
                if event.run_id is not None:
                    out[event.run_id].append(event)
        return out

    def undelivered(self, node: str, limit: int = 500) -> list[RemediationEvent]:
        query = (
            select(events_table.c.data)
            .where(events_table.c.node == node, events_table.c.delivered.is_(False))
            .order_by(events_table.c.id)
            .limit(limit)
        )
        return self._events(query)

    # ---- pause switch --------------------------------------------------------------------
    def pause_state(self, node: str) -> PauseState:
        """The pause switch of ``node`` (kept between this journal's writes, as ``holding``)."""
        return self._writes.kept(self._pause, node, lambda: self._read_pause(node))

    def _read_pause(self, node: str) -> PauseState:
        with self._db.read() as conn:
            row = (
                conn.execute(select(control_table).where(control_table.c.node == node))
                .mappings()
                .first()
            )
        if row is None:
            return PauseState(False)
        return PauseState(bool(row["paused"]), row["by"], row["reason"], row["at"])

    def set_paused(self, node: str, state: PauseState) -> None:
        values = {"paused": state.paused, "by": state.by, "reason": state.reason, "at": state.at}
        with self._writing() as conn:
            upsert(conn, control_table, {"node": node}, values)
