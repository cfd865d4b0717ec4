"""Schema migrations: ``STEPS[v]`` turns a version ``v - 1`` database into version ``v``.

Steps use plain DDL/DML on the connection they are given (inside one transaction, together
with the version bump), so they run the same on SQLite and PostgreSQL. A step declares the
tables it creates *as they were at that version* (its own MetaData), never the current
definitions, so a chain of steps stays correct when tables change again later.

History:

1. ``fleetd_series``, ``fleetd_samples`` (one row per sample, float seconds),
   ``fleetd_events`` (without ``actor``).
2. Compact storage: raw samples move to ``fleetd_samples_head`` (one row per poll, integer
   milliseconds) and compressed ``fleetd_sample_chunks``; rollup chunks and store
   watermarks appear; events gain ``actor``.
3. ``alert_outbox`` gains ``priority`` (pages before change events); its queue index
   becomes (status, integration, priority, id). Pending change events and chat edits already
   queued get the informational priority.
4. The fleet lease tables ``remedy_fleet_leases`` and ``remedy_fleet_failures`` gain
   ``labels`` (the node's labels as JSON: fleet caps and breakers per label group). Rows
   already there keep NULL: a lease of unknown group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    UniqueConstraint,
    inspect,
    text,
)

from fleetd.errors import StoreError
from fleetd.store import headrows


def _v2_tables() -> MetaData:
    meta = MetaData()
    Table(
        "fleetd_samples_head",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("ts", BigInteger, nullable=False),
        Column("sids", LargeBinary, nullable=False),
        Column("vals", LargeBinary, nullable=False),
        Index("ix_fleetd_samples_head_ts", "ts"),
    )
    Table(
        "fleetd_sample_chunks",
        meta,
        *_v2_chunk_columns(),
        UniqueConstraint("series_id", "start_ts", name="uq_fleetd_sample_chunks_key"),
        Index("ix_fleetd_sample_chunks_last_ts", "last_ts"),
    )
    Table(
        "fleetd_rollup_chunks",
        meta,
        *_v2_chunk_columns(Column("tier", SmallInteger, nullable=False)),
        UniqueConstraint("tier", "series_id", "start_ts", name="uq_fleetd_rollup_chunks_key"),
        Index("ix_fleetd_rollup_chunks_last_ts", "tier", "last_ts"),
    )
    Table(
        "fleetd_store_state",
        meta,
        Column("key", String(64), primary_key=True),
        Column("value", BigInteger, nullable=False),
    )
    return meta


def _v2_chunk_columns(*after_id: Column[Any]) -> list[Column[Any]]:
    """The columns raw and rollup chunk rows share at v2 (a rollup's ``tier`` follows ``id``)."""
    return [
        Column("id", Integer, primary_key=True, autoincrement=True),
        *after_id,
        Column("series_id", Integer, nullable=False),
        Column("start_ts", BigInteger, nullable=False),
        Column("first_ts", BigInteger, nullable=False),
        Column("last_ts", BigInteger, nullable=False),
        Column("count", Integer, nullable=False),
        Column("data", LargeBinary, nullable=False),
    ]


def _to_v2(conn: Connection) -> None:
    """Per-sample rows → per-poll head rows in milliseconds (compaction chunks them later);
    events gain ``actor``."""
    conn.execute(text("ALTER TABLE fleetd_events ADD COLUMN actor VARCHAR(200)"))
    meta = _v2_tables()
    meta.create_all(conn)
    head = meta.tables["fleetd_samples_head"]
    rows = conn.execution_options(yield_per=_MIGRATION_BATCH).execute(
        text("SELECT ts, series_id, value FROM fleetd_samples ORDER BY ts, series_id")
    )
    batch: list[dict[str, object]] = []
    current: int | None = None
    poll: dict[int, float] = {}
    for ts, sid, value in rows:
        ms = round(float(ts) * 1000.0)
        if ms != current:
            if poll and current is not None:
                batch.append(_poll_row(current, poll))
            current, poll = ms, {}
            if len(batch) >= _MIGRATION_BATCH // 100:
                conn.execute(head.insert(), batch)
                batch = []
        poll[int(sid)] = float(value)
    if poll and current is not None:
        batch.append(_poll_row(current, poll))
    if batch:
        conn.execute(head.insert(), batch)
    conn.execute(text("DROP TABLE fleetd_samples"))


def _poll_row(ms: int, poll: dict[int, float]) -> dict[str, object]:
    return {
        "ts": ms,
        "sids": headrows.pack_ids(list(poll)),
        "vals": headrows.pack_values(list(poll.values())),
    }


_MIGRATION_BATCH = 10_000


def _to_v3(conn: Connection) -> None:
    """The outbox's priority column. A database from before the alert tables existed has no
    outbox yet: ``create_all`` makes it, already current, after the steps."""
    if not inspect(conn).has_table("alert_outbox"):
        return
    conn.execute(text("ALTER TABLE alert_outbox ADD COLUMN priority SMALLINT DEFAULT 0 NOT NULL"))
    conn.execute(text("UPDATE alert_outbox SET priority = 1 WHERE action IN ('change', 'update')"))
    conn.execute(text("DROP INDEX IF EXISTS ix_alert_outbox_queue"))
    conn.execute(
        text(
            "CREATE INDEX ix_alert_outbox_queue ON alert_outbox (status, integration, priority, id)"
        )
    )


def lease_labels(conn: Connection) -> None:
    """Step 4: the lease tables' ``labels``. Also run by ``fleetd.remedy.lease`` on the shared
    registry's copies of these tables (which carry no schema version), where several agents
    may run it at once: PostgreSQL's ``IF NOT EXISTS`` makes that safe."""
    guard = "IF NOT EXISTS " if conn.dialect.name == "postgresql" else ""
    for table in ("remedy_fleet_leases", "remedy_fleet_failures"):
        if not inspect(conn).has_table(table):
            continue
        if "labels" in {c["name"] for c in inspect(conn).get_columns(table)}:
            continue
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {guard}labels TEXT"))


STEPS: dict[int, Callable[[Connection], None]] = {2: _to_v2, 3: _to_v3, 4: lease_labels}


def apply(version: int, conn: Connection) -> None:
    """Run the step that produces ``version``."""
    step = STEPS.get(version)
    if step is None:
        raise StoreError(f"no migration to schema version {version}")
    step(conn)
