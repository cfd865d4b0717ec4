"""One upsert for every keyed table: insert a row, or update the row with the same key.

``upsert(conn, table, key, values)`` is the dialect's ``INSERT … ON CONFLICT (key) DO UPDATE``
(SQLite 3.24+ and PostgreSQL both have it), run on the caller's connection so it joins the
caller's transaction. ``key`` names the columns of the table's primary key or of one of its
unique constraints, with their values; ``values`` are the other columns. A database written
by the update-then-insert code this replaces holds the same rows. ``upsert_rows`` is the same
statement executed once for many rows (no two of them with the same key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    same ``key`` columns; every row has the same columns."""
    if not rows:
        return
    dialect = conn.dialect.name
    columns = [name for name in rows[0] if name not in key]
    if not columns:
        raise ValueError("upsert needs at least one column to update")
    stmt: sqlite.Insert | postgresql.Insert
    if dialect == "sqlite":
        stmt = sqlite.insert(table)
    elif dialect == "postgresql":
        # imported here: a node on SQLite never loads the PostgreSQL dialect (2.6 MB RSS)
        from sqlalchemy.dialects import postgresql

        stmt = postgresql.insert(table)
    else:  # pragma: no cover - fleetd opens only SQLite and PostgreSQL (db.check_url)
        raise ValueError(f"no upsert for the {dialect} dialect")
    set_ = {name: stmt.excluded[name] for name in columns}
    conn.execute(stmt.on_conflict_do_update(index_elements=list(key), set_=set_), list(rows))
