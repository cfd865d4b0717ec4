"""How far each tier is complete, persisted in ``fleetd_store_state``.

* ``rollup_60_until`` / ``rollup_3600_until``: every bucket ending at or before this time
  (ms) has been rolled up into that tier.
* ``raw_deleted_until`` / ``rollup_60_deleted_until`` / ``rollup_3600_deleted_until``: data
  of that tier at or before this time may have been deleted (retention or disk budget);
  everything after it is still there.

Queries use them to pick, for each part of a time range, a tier that holds it completely.
Updates happen inside the transaction that does the work they describe.
"""

from __future__ import annotations

from sqlalchemy import Connection, select, update

from fleetd.store.db import Database
from fleetd.store.tables import state_table

ROLLUP_UNTIL = {60: "rollup_60_until", 3600: "rollup_3600_until"}
DELETED_UNTIL = {
    0: "raw_deleted_until",
    60: "rollup_60_deleted_until",
    3600: "rollup_3600_deleted_until",
}
KEYS = (*ROLLUP_UNTIL.values(), *DELETED_UNTIL.values())


class Watermarks:
    """An in-memory copy of the state rows; ``set`` writes through a caller's transaction."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._values: dict[str, int] = dict.fromkeys(KEYS, 0)
        self.reload()

    def reload(self) -> None:
        with self._db.read() as conn:
            for key, value in conn.execute(select(state_table.c.key, state_table.c.value)):
                self._values[key] = int(value)

    def get(self, key: str) -> int:
        return self._values[key]

    def rolled_until(self, tier: int) -> int:
        return self._values[ROLLUP_UNTIL[tier]]

    def deleted_until(self, tier: int) -> int:
        """``tier`` 0 is raw samples."""
        return self._values[DELETED_UNTIL[tier]]

    def set(self, conn: Connection, key: str, value: int) -> None:
        """Record ``value`` within ``conn``'s transaction (cached at once: callers set marks
        last in their transaction, and a failed commit reloads them)."""
        t = state_table
        done = conn.execute(update(t).where(t.c.key == key).values(value=int(value))).rowcount
        if not done:
            conn.execute(t.insert().values(key=key, value=int(value)))
        self._values[key] = int(value)

    def raise_to(self, conn: Connection, key: str, value: int) -> None:
        if value > self._values[key]:
            self.set(conn, key, value)
