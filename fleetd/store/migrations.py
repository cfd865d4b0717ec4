"""Schema migrations: ``STEPS[v]`` turns a version ``v - 1`` database into version ``v``.

Steps use plain DDL/DML on the connection they are given (inside one transaction), so they
run the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from fleetd.errors import StoreError

STEPS: dict[int, Callable[[Connection], None]] = {}


def apply(version: int, conn: Connection) -> None:
    """Run the step that produces ``version``."""
    step = STEPS.get(version)
    if step is None:
        raise StoreError(f"no migration to schema version {version}")
    step(conn)
