"""Remediation mode per label group, set through the registry: a rollout in waves.

``fleetctl remediation mode --fleet -n 'cluster="eu1"' on`` writes one row; every agent's
heartbeat reads the rows (one query) and takes the mode of the newest row whose node matchers
accept it (``local``: back to its own ``remediation.mode``). So a rollout is a few commands —
one rack ``dry-run`` then ``on``, then a cluster, then the fleet — each visible to every
agent within one heartbeat, each in the audit trail.

Two rules keep it safe: a node whose own ``remediation.mode`` is ``off`` stays off whatever
the registry says (``off`` in fleetd.yaml is the node's veto), and a node that cannot read
the registry keeps the mode it last read (after a restart without the registry: its own).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select

from fleetd.alert.matchers import format_matcher, matchers_from_column
from fleetd.query import Matcher
from fleetd.registry.book import RegistryBook, audit, selects_node
from fleetd.registry.store import audit_table, modes_table

MODES = ("off", "dry-run", "on", "local")
"""What a wave may set: a remediation mode, or ``local`` (the node's own fleetd.yaml)."""


@dataclass(frozen=True, slots=True)
class FleetMode:
    """One wave: the remediation mode of the nodes the matchers accept, from ``created_at``."""

    id: str
    node_matchers: tuple[Matcher, ...]
    mode: str
    created_by: str
    comment: str
    created_at: float

    def applies_to(self, node: str, labels: Mapping[str, str]) -> bool:
        return selects_node(self.node_matchers, node, labels)


def mode_for(modes: Sequence[FleetMode], node: str, labels: Mapping[str, str]) -> str | None:
    """The mode the newest applicable wave sets (``local`` and no wave: None)."""
    found = None
    for wave in modes:
        if wave.applies_to(node, labels) and (
            found is None or (wave.created_at, wave.id) > (found.created_at, found.id)
        ):
            found = wave
    return None if found is None or found.mode == "local" else found.mode


def effective_mode(local: str, fleet: str | None) -> str:
    """The mode a node runs: the registry's, except that a node off in fleetd.yaml stays off."""
    return local if local == "off" or fleet is None else fleet


class FleetModeBook(RegistryBook):
    """Set and read the remediation waves in the registry."""

    TABLES = (modes_table, audit_table)
    WHAT = "remediation mode table"

    def set(
        self,
        node_matchers: tuple[Matcher, ...],
        mode: str,
        *,
        created_by: str,
        comment: str,
        actor: str,
        now: float,
    ) -> FleetMode:
        """Store a wave and its audit row in one transaction; ValueError for a bad mode."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        wave = FleetMode(str(uuid.uuid4()), node_matchers, mode, created_by, comment, now)
        texts = [format_matcher(m) for m in node_matchers]
        self._write(
            [
                insert(modes_table).values(
                    id=wave.id,
                    node_matchers=json.dumps(texts),
                    mode=mode,
                    created_by=created_by,
                    comment=comment,
                    created_at=now,
                ),
                audit(
                    now,
                    actor,
                    "mode",
                    wave.id,
                    {"node_matchers": texts, "mode": mode, "comment": comment},
                ),
            ]
        )
        return wave

    def all(self) -> list[FleetMode]:
        """Every wave, oldest first (the heartbeat's pull)."""
        t = modes_table
        return [_wave(r) for r in self._rows(select(t).order_by(t.c.created_at, t.c.id))]


def _wave(row: Any) -> FleetMode:
    return FleetMode(
        row["id"],
        matchers_from_column(row["node_matchers"]),
        row["mode"],
        row["created_by"],
        row["comment"],
        row["created_at"],
    )
