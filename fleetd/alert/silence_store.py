"""Silences and acknowledgements, stored so they survive restarts and are shared by the API.

A silence mutes every alert its matchers all accept between ``starts_at`` and ``ends_at``
(Alertmanager's model: state pending → active → expired; expiring one sets ``ends_at`` to now).
An acknowledgement says a person is on one firing alert: it stops repeat notifications for
that firing episode and is forgotten when the alert resolves.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    Column,
    Float,
    RowMapping,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)

from fleetd.alert.matchers import format_matcher, parse_matcher
from fleetd.model import Labels
from fleetd.query import Matcher, matches_all
from fleetd.store.db import Database
from fleetd.store.rows import read_rows
from fleetd.store.schema import METADATA
from fleetd.store.upsert import upsert

SilenceState = Literal["pending", "active", "expired"]

silences_table = Table(
    "alert_silences",
    METADATA,
    Column("id", String(36), primary_key=True),
    Column("matchers", Text, nullable=False),
    Column("starts_at", Float, nullable=False),
    Column("ends_at", Float, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

acks_table = Table(
    "alert_acks",
    METADATA,
    Column("fingerprint", String(32), primary_key=True),
    Column("starts_at", Float, nullable=False),  # the firing episode acknowledged
    Column("author", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)


_ALERTMANAGER_NAMES = {
    "id": "id",
    "matchers": "matchers",
    "starts_at": "startsAt",
    "ends_at": "endsAt",
    "created_by": "createdBy",
    "comment": "comment",
    "updated_at": "updatedAt",
}
"""``silence_json``'s fields that Alertmanager's silence shows, and its name for each."""


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float
    updated_at: float

    def state(self, now: float) -> SilenceState:
        if now >= self.ends_at:
            return "expired"
        return "active" if now >= self.starts_at else "pending"

    def mutes(self, labels: Labels, now: float) -> bool:
        return self.state(now) == "active" and matches_all(labels, self.matchers)

    def to_dict(self, now: float) -> dict[str, object]:
        """The API view: ``silence_json`` under Alertmanager's field names."""
        data = silence_json(self)
        view = {name: data[field] for field, name in _ALERTMANAGER_NAMES.items()}
        return {**view, "status": {"state": self.state(now)}}


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    fingerprint: str
    starts_at: float
    author: str
    comment: str
    created_at: float


class SilenceStore:
    """Create, list and expire silences; record and list acknowledgements."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def create(
        self,
        matchers: tuple[Matcher, ...],
        *,
        starts_at: float,
        ends_at: float,
        created_by: str,
        comment: str,
        now: float,
    ) -> Silence:
        """Store a new silence; ValueError if it could never mute anything."""
        _check(matchers, starts_at, ends_at, created_by, now)
        silence = Silence(
            id=str(uuid.uuid4()),
            matchers=matchers,
            starts_at=starts_at,
            ends_at=ends_at,
            created_by=created_by,
            comment=comment,
            created_at=now,
            updated_at=now,
        )
        with self.db.begin() as conn:
            conn.execute(insert(silences_table).values(**silence_row(silence)))
        return silence

    def get(self, silence_id: str) -> Silence | None:
        t = silences_table
        rows = read_rows(self.db, select(t).where(t.c.id == silence_id))
        return silence_from_row(rows[0]) if rows else None

    def all(self, now: float | None = None, state: SilenceState | None = None) -> list[Silence]:
        """Every silence, newest first; with ``state`` only those in that state at ``now``."""
        t = silences_table
        rows = read_rows(self.db, select(t).order_by(t.c.created_at.desc(), t.c.id))
        found = [silence_from_row(r) for r in rows]
        if state is None:
            return found
        if now is None:
            raise ValueError("a state filter needs now")
        return [s for s in found if s.state(now) == state]

    def not_expired(self, now: float) -> list[Silence]:
        t = silences_table
        return [silence_from_row(r) for r in read_rows(self.db, select(t).where(t.c.ends_at > now))]

    def expire(self, silence_id: str, now: float) -> Silence:
        """End a silence now (a pending one ends before it began); KeyError if unknown."""
        current = self.get(silence_id)
        if current is None:
            raise KeyError(silence_id)
        if current.state(now) == "expired":
            return current
        starts = min(current.starts_at, now)
        t = silences_table
        with self.db.begin() as conn:
            conn.execute(
                update(t)
                .where(t.c.id == silence_id)
                .values(starts_at=starts, ends_at=now, updated_at=now)
            )
        expired = self.get(silence_id)
        assert expired is not None
        return expired

    def purge(self, now: float, retention: float) -> int:
        """Forget silences that expired more than ``retention`` ago."""
        t = silences_table
        with self.db.begin() as conn:
            return int(conn.execute(delete(t).where(t.c.ends_at < now - retention)).rowcount or 0)

    # --------------------------------------------------------------------- acknowledgements
    def acknowledge(
        self, fingerprint: str, starts_at: float, author: str, comment: str, now: float
    ) -> Acknowledgement:
        if not author.strip():
            raise ValueError("an acknowledgement needs an author")
        ack = Acknowledgement(fingerprint, starts_at, author, comment, now)
        t = acks_table
        with self.db.begin() as conn:
            upsert(
                conn,
                t,
                {"fingerprint": fingerprint},
                {"starts_at": starts_at, "author": author, "comment": comment, "created_at": now},
            )
        return ack

    def acknowledgements(self) -> list[Acknowledgement]:
        rows = read_rows(self.db, select(acks_table).order_by(acks_table.c.created_at))
        return [Acknowledgement(**r) for r in rows]

    def forget_acknowledgements(self, fingerprints: list[str]) -> None:
        if not fingerprints:
            return
        t = acks_table
        with self.db.begin() as conn:
            conn.execute(delete(t).where(t.c.fingerprint.in_(fingerprints)))


def _check(
    matchers: tuple[Matcher, ...], starts_at: float, ends_at: float, created_by: str, now: float
) -> None:
    if not matchers:
        raise ValueError("a silence needs at least one matcher")
    if all(m.matches(()) for m in matchers):
        raise ValueError("a silence's matchers must not all match an empty label set")
    check_window(starts_at, ends_at, now)
    if not created_by.strip():
        raise ValueError("a silence needs an author (created_by)")


def check_window(starts_at: float, ends_at: float, now: float) -> None:
    """ValueError when a silence (a node's or the fleet's) ends before it starts or has ended."""
    if ends_at <= starts_at:
        raise ValueError("a silence must end after it starts")
    if ends_at <= now:
        raise ValueError("a silence must end in the future")


def silence_json(silence: Silence) -> dict[str, Any]:
    """A silence as plain JSON, its matchers as text (the API view, the fleet cache)."""
    return {
        "id": silence.id,
        "matchers": [format_matcher(m) for m in silence.matchers],
        "starts_at": silence.starts_at,
        "ends_at": silence.ends_at,
        "created_by": silence.created_by,
        "comment": silence.comment,
        "created_at": silence.created_at,
        "updated_at": silence.updated_at,
    }


def silence_from_json(data: Mapping[str, Any]) -> Silence:
    """``silence_json``'s inverse (KeyError, ValueError or TypeError on a malformed one)."""
    return Silence(
        id=str(data["id"]),
        matchers=tuple(parse_matcher(m) for m in data["matchers"]),
        starts_at=float(data["starts_at"]),
        ends_at=float(data["ends_at"]),
        created_by=str(data["created_by"]),
        comment=str(data["comment"]),
        created_at=float(data["created_at"]),
        updated_at=float(data["updated_at"]),
    )


def silence_row(silence: Silence) -> dict[str, object]:
    """A silence as a table row (the fleet silences' table shares these columns)."""
    data = silence_json(silence)
    return {**data, "matchers": json.dumps(data["matchers"])}


def silence_from_row(row: RowMapping) -> Silence:
    return silence_from_json({**row, "matchers": json.loads(row["matchers"])})
