"""One upsert for every keyed table: insert a row, or update the row with the same key.

``upsert(conn, table, key, values)`` is the dialect's ``INSERT … ON CONFLICT (key) DO UPDATE``
(SQLite 3.24+ and PostgreSQL both have it), run on the caller's connection so it joins the
caller's transaction. ``key`` names the columns of the table's primary key or of one of its
unique constraints, with their values; ``values`` are the other columns. A database written
by the update-then-insert code this replaces holds the same rows. ``upsert_rows`` is the same
statement for many rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import sqlite

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql


def upsert(
    conn: Connection, table: Table, key: Mapping[str, Any], values: Mapping[str, Any]
) -> None:
    """Insert ``key | values`` into ``table``, or set ``values`` on the row with ``key``."""
    upsert_rows(conn, table, list(key), [{**key, **values}])


def upsert_rows(
    conn: Connection, table: Table, key: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert each of ``rows`` into ``table``, or set its other columns on the row with the
    same ``key`` columns. Every row has the same columns (ValueError otherwise); of rows with
    the same key the last wins, as when they are written one after another. (Made unique
    first: a driver that sends the rows as one multi-row statement — SQLAlchemy 2.0 on
    PostgreSQL — would be refused a key twice. Executed as ``executemany``: a multi-row
    ``VALUES`` was 20x slower on SQLite for 500 rows, all in SQLAlchemy's compiling.)"""
    if not rows:
        return
    columns = [name for name in rows[0] if name not in key]
    if not columns:
        raise ValueError("upsert needs at least one column to update")
    last: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        if row.keys() != rows[0].keys():
            raise ValueError(
                f"upsert rows differ in their columns: {sorted(row)} vs {sorted(rows[0])}"
            )
        last[tuple(row[name] for name in key)] = row
    stmt = _insert_for(conn.dialect.name)(table)
    set_ = {name: stmt.excluded[name] for name in columns}
    conn.execute(
        stmt.on_conflict_do_update(index_elements=list(key), set_=set_), list(last.values())
    )


def _insert_for(dialect: str) -> Callable[[Table], sqlite.Insert | postgresql.Insert]:
    if dialect == "sqlite":
        return sqlite.insert
    if dialect == "postgresql":
        # imported here: a node on SQLite never loads the PostgreSQL dialect (2.6 MB RSS)
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    # fleetd opens only SQLite and PostgreSQL (db.check_url)
    raise ValueError(f"no upsert for the {dialect} dialect")  # pragma: no cover
