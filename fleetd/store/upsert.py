"""One upsert for every keyed table: insert a row, or update the row with the same key.

``upsert(conn, table, key, values)`` is the dialect's ``INSERT … ON CONFLICT (key) DO UPDATE``
(SQLite 3.24+ and PostgreSQL both have it), run on the caller's connection so it joins the
caller's transaction. ``key`` names the columns of the table's primary key or of one of its
unique constraints, with their values; ``values`` are the other columns. A database written
by the update-then-insert code this replaces holds the same rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import sqlite

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql


def upsert(
    conn: Connection, table: Table, key: Mapping[str, Any], values: Mapping[str, Any]
) -> None:
    """Insert ``key | values`` into ``table``, or set ``values`` on the row with ``key``."""
    dialect = conn.dialect.name
    if not values:
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
    stmt = stmt.values({**key, **values})
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=list(key), set_={name: stmt.excluded[name] for name in values}
        )
    )
