"""Fleet-wide silences in the registry: added once by fleetctl, applied by every agent it names.

A fleet silence has two sets of matchers: ``node_matchers`` select nodes by their labels
(``node.labels`` — cluster, rack, … — plus ``node``, the node's name) and ``matchers`` select
alerts on those nodes, exactly like a node's own silence. fleetctl writes the row and an audit
row in one transaction; each agent's heartbeat reads the silences not yet ended
(``FleetSilenceBook.current``) and hands the ones for its node to its dispatcher. Expiring
sets ``ends_at`` to now, so agents drop it at their next heartbeat; an agent that cannot reach
the registry keeps what it last read, each silence ending when it said it would.

The tables live on the registry's MetaData, beside ``fleet_nodes``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import (
    RowMapping,
    insert,
    select,
    update,
)

from fleetd.alert.matchers import (
    format_matcher,
    matchers_column,
    matchers_from_column,
    parse_matcher,
)
from fleetd.alert.silence_store import Silence, check_window, silence_from_row, silence_row
from fleetd.model import Labels
from fleetd.query import Matcher, matches_all
from fleetd.registry.book import RegistryBook, audit, selects_node
from fleetd.registry.store import (
    acks_table,
    audit_table,
    silences_table,
)

FLEET_SILENCE_PREFIX = "fleet:"
"""Local ids of fleet silences on an agent: ``fleet:<uuid>`` (never a node's own uuid)."""


class MatcherError(ValueError):
    """A matcher that does not parse, with its position among the ones given."""

    def __init__(self, kind: str, position: int, text: str, reason: str) -> None:
        self.kind, self.position, self.text = kind, position, text
        super().__init__(f"{kind} matcher {position} ({text!r}): {reason}")


def parse_matchers(texts: Sequence[str], kind: str) -> tuple[Matcher, ...]:
    """Parse every matcher; MatcherError names the first bad one by its 1-based position
    (and, for a bad regular expression, the character where it fails)."""
    out = []
    for position, text in enumerate(texts, start=1):
        try:
            out.append(parse_matcher(text))
        except ValueError as exc:
            reason = str(exc)
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, re.error) and cause.pos is not None:
                reason += f" (at character {cause.pos + 1} of the pattern)"
            raise MatcherError(kind, position, text, reason) from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class FleetSilence:
    """A silence (the alert matchers, its times and author) for every node its
    ``node_matchers`` accept."""

    silence: Silence
    node_matchers: tuple[Matcher, ...]

    @property
    def id(self) -> str:
        return self.silence.id

    def applies_to(self, node: str, labels: Mapping[str, str]) -> bool:
        """Whether this node (its name and ``node.labels``) is one the silence names."""
        return selects_node(self.node_matchers, node, labels)

    def state(self, now: float) -> str:
        return self.silence.state(now)

    def local(self) -> Silence:
        """The node-side silence: the alert matchers, the same times and author."""
        s = self.silence
        return replace(s, id=FLEET_SILENCE_PREFIX + s.id, comment=f"[fleet] {s.comment}")

    def to_dict(self, now: float) -> dict[str, Any]:
        s = self.silence
        return {
            "id": s.id,
            "node_matchers": [format_matcher(m) for m in self.node_matchers],
            "matchers": [format_matcher(m) for m in s.matchers],
            "starts_at": s.starts_at,
            "ends_at": s.ends_at,
            "created_by": s.created_by,
            "comment": s.comment,
            "state": self.state(now),
        }


ACK_WINDOW = 86400.0
"""How long agents look at a fleet acknowledgement: one that an agent cut off for longer
never sees applies to no alert it could still be about (it acknowledges alerts firing when it
was made, and a day-old page has been handled or escalated)."""


ACK_CLOCK_GRACE = 60.0
"""An alert that began up to this long after the acknowledgement, by the node's clock, is
covered too: the operator's and the nodes' clocks differ a little, and a page of the same
minute is the one the person is looking at."""


@dataclass(frozen=True, slots=True)
class FleetAck:
    """A person is on every alert the matchers accept, on every node the node matchers accept,
    that was firing when this was made (each alert's current episode only)."""

    id: str
    node_matchers: tuple[Matcher, ...]
    matchers: tuple[Matcher, ...]
    created_by: str
    comment: str
    created_at: float

    def applies_to(self, node: str, labels: Mapping[str, str]) -> bool:
        return selects_node(self.node_matchers, node, labels)

    def covers(self, alert_labels: Labels, starts_at: float) -> bool:
        """An alert of an applicable node: its labels match and its episode began before."""
        began_before = starts_at <= self.created_at + ACK_CLOCK_GRACE
        return began_before and matches_all(alert_labels, self.matchers)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    actor: str
    action: str
    subject: str  # the silence or acknowledgement id
    detail: Mapping[str, Any]


def check_silence(
    node_matchers: tuple[Matcher, ...],
    matchers: tuple[Matcher, ...],
    *,
    starts_at: float,
    ends_at: float,
    created_by: str,
    now: float,
) -> None:
    """ValueError when the silence could never mute anything, or would mute everything."""
    every = (*node_matchers, *matchers)
    if not every:
        raise ValueError("a fleet silence needs at least one node or alert matcher")
    if all(m.matches(()) for m in every):
        raise ValueError(
            "a fleet silence's matchers must not all match an empty label set "
            "(it would silence every alert of the fleet)"
        )
    check_window(starts_at, ends_at, now)
    if not created_by.strip():
        raise ValueError("a silence needs an author")


class FleetSilenceBook(RegistryBook):
    """Add, expire and read fleet silences and their audit trail in the registry."""

    TABLES = (silences_table, acks_table, audit_table)
    WHAT = "fleet silence tables"

    def add(
        self,
        node_matchers: tuple[Matcher, ...],
        matchers: tuple[Matcher, ...],
        *,
        starts_at: float,
        ends_at: float,
        created_by: str,
        comment: str,
        actor: str,
        now: float,
    ) -> FleetSilence:
        """Store a fleet silence and its audit row in one transaction."""
        check_silence(
            node_matchers,
            matchers,
            starts_at=starts_at,
            ends_at=ends_at,
            created_by=created_by,
            now=now,
        )
        local = Silence(
            str(uuid.uuid4()), matchers, starts_at, ends_at, created_by, comment, now, now
        )
        silence = FleetSilence(local, node_matchers)
        row = _row(silence)
        view = silence.to_dict(now)
        detail = {k: view[k] for k in ("node_matchers", "matchers", "ends_at", "comment")}
        self._write(
            [
                insert(silences_table).values(**row),
                audit(now, actor, "add", silence.id, detail),
            ]
        )
        return silence

    def acknowledge(
        self,
        node_matchers: tuple[Matcher, ...],
        matchers: tuple[Matcher, ...],
        *,
        created_by: str,
        comment: str,
        actor: str,
        now: float,
    ) -> FleetAck:
        """Store a fleet acknowledgement and its audit row in one transaction."""
        if not (*node_matchers, *matchers) or all(
            m.matches(()) for m in (*node_matchers, *matchers)
        ):
            raise ValueError(
                "a fleet acknowledgement needs a matcher that selects (it would acknowledge "
                "every alert of the fleet)"
            )
        if not created_by.strip():
            raise ValueError("an acknowledgement needs an author")
        ack = FleetAck(str(uuid.uuid4()), node_matchers, matchers, created_by, comment, now)
        texts = {
            "node_matchers": [format_matcher(m) for m in node_matchers],
            "matchers": [format_matcher(m) for m in matchers],
        }
        self._write(
            [
                insert(acks_table).values(
                    id=ack.id,
                    node_matchers=json.dumps(texts["node_matchers"]),
                    matchers=json.dumps(texts["matchers"]),
                    created_by=created_by,
                    comment=comment,
                    created_at=now,
                ),
                audit(now, actor, "ack", ack.id, {**texts, "comment": comment}),
            ]
        )
        return ack

    def recent_acks(self, now: float) -> list[FleetAck]:
        """The fleet acknowledgements of the last ``ACK_WINDOW`` (the heartbeat's pull)."""
        t = acks_table
        stmt = select(t).where(t.c.created_at > now - ACK_WINDOW).order_by(t.c.created_at)
        return [
            FleetAck(
                r["id"],
                matchers_from_column(r["node_matchers"]),
                matchers_from_column(r["matchers"]),
                r["created_by"],
                r["comment"],
                r["created_at"],
            )
            for r in self._rows(stmt)
        ]

    def expire(self, silence_id: str, *, actor: str, comment: str, now: float) -> FleetSilence:
        """End a fleet silence now; KeyError if there is none with that id."""
        current = self.get(silence_id)
        if current is None:
            raise KeyError(silence_id)
        if current.state(now) == "expired":
            return current
        t = silences_table
        starts = min(current.silence.starts_at, now)
        self._write(
            [
                update(t)
                .where(t.c.id == silence_id)
                .values(starts_at=starts, ends_at=now, updated_at=now),
                audit(now, actor, "expire", silence_id, {"comment": comment}),
            ]
        )
        found = self.get(silence_id)
        assert found is not None
        return found

    def get(self, silence_id: str) -> FleetSilence | None:
        t = silences_table
        rows = self._read(select(t).where(t.c.id == silence_id))
        return rows[0] if rows else None

    def current(self, now: float) -> list[FleetSilence]:
        """Every fleet silence not yet ended at ``now`` (one query: the heartbeat's pull)."""
        t = silences_table
        return self._read(select(t).where(t.c.ends_at > now).order_by(t.c.created_at, t.c.id))

    def all(self) -> list[FleetSilence]:
        t = silences_table
        return self._read(select(t).order_by(t.c.created_at.desc(), t.c.id))

    def audit(self, limit: int = 200) -> list[AuditEntry]:
        """The newest audit entries first."""
        t = audit_table
        return [
            AuditEntry(r["at"], r["actor"], r["action"], r["subject"], json.loads(r["detail"]))
            for r in self._rows(select(t).order_by(t.c.seq.desc()).limit(limit))
        ]

    def _read(self, stmt: Any) -> list[FleetSilence]:
        return [_silence(r) for r in self._rows(stmt)]


def for_node(
    silences: Sequence[FleetSilence], node: str, labels: Mapping[str, str]
) -> list[Silence]:
    """The local silences of the fleet silences that name this node."""
    return [s.local() for s in silences if s.applies_to(node, labels)]


def _row(silence: FleetSilence) -> dict[str, Any]:
    node_matchers = matchers_column(silence.node_matchers)
    return {**silence_row(silence.silence), "node_matchers": node_matchers}


def _silence(row: RowMapping) -> FleetSilence:
    return FleetSilence(silence_from_row(row), matchers_from_column(row["node_matchers"]))
