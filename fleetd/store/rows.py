"""What the stores built on the database share to move rows: IN-list batches, compact JSON
columns, portable floats.

A domain store (the alert outbox, the run journal, the alert state, the RMA records, the
registry's tables) keeps its own tables and codecs; these are the pieces of row handling that
are the same in all of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import RowMapping, Select

from fleetd.store.db import Database

T = TypeVar("T")
Decode = Callable[[dict[str, Any]], T]


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size``: one ``IN (…)`` clause each, so a long list
    stays under the database's limit on bound parameters."""
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start : start + size]


def compact_json(value: Any) -> str:
    """A JSON column's text, without the spaces ``json.dumps`` puts after separators."""
    return json.dumps(value, separators=(",", ":"))


def read_rows(db: Database, query: Select[Any]) -> Sequence[RowMapping]:
    """The rows ``query`` selects, read on a connection of their own (no write transaction)."""
    with db.engine.connect() as conn:
        return conn.execute(query).mappings().all()


def json_rows(db: Database, query: Select[tuple[str]], decode: Decode[T]) -> list[T]:
    """The JSON column ``query`` selects, of each row, decoded (one read transaction)."""
    with db.read() as conn:
        rows = conn.execute(query).scalars().all()
    return [decode(json.loads(str(r))) for r in rows]


def json_row(db: Database, query: Select[tuple[str]], decode: Decode[T]) -> T | None:
    """The JSON column ``query`` selects, of the one row it finds, decoded; None if none."""
    with db.read() as conn:
        data = conn.execute(query).scalar_one_or_none()
    return None if data is None else decode(json.loads(str(data)))


def finite(value: float | None) -> float | None:
    """NaN and infinities are not portable across databases; they are stored as NULL."""
    return value if value is not None and math.isfinite(value) else None
