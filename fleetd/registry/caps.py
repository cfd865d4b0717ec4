"""Fleet caps per label group in the registry, and the check of a wave against the caps.

``fleetctl remediation cap add --group-by cluster --max 10%`` writes a row of
``fleet_remediation_caps`` (declared in ``fleetd.remedy.caps``: the agents' fleet lease reads
it in the same transaction that grants a lease), with its audit row. ``fleetctl remediation
mode on`` asks ``check_wave`` first: per cap and group the wave reaches, the GPUs it would newly
put under automatic remediation against the cap (``fleetd.remedy.caps.wave_loads``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, delete, insert, inspect, literal, select

from fleetd.query import Matcher
from fleetd.registry.book import RegistryBook, audit
from fleetd.registry.modes import FleetMode, mode_for
from fleetd.registry.store import audit_table, nodes_table, registry_errors
from fleetd.remedy.caps import (
    Cap,
    Member,
    WaveLoad,
    caps_table,
    labels_of,
    registry_caps,
    wave_loads,
)


@dataclass(frozen=True, slots=True)
class StoredCap:
    """A cap as the registry holds it."""

    id: str
    cap: Cap
    created_by: str
    comment: str
    created_at: float


@dataclass(frozen=True, slots=True)
class WaveCheck:
    """What a wave would newly enable, per cap group, and whether it is refused."""

    nodes: int  # registered nodes the wave names
    enabled: tuple[Member, ...]  # of those, the ones it turns on (not on by a wave already)
    loads: tuple[WaveLoad, ...]

    @property
    def refused(self) -> bool:
        return any(load.exceeds for load in self.loads)

    @property
    def gpus(self) -> int:
        return sum(m.gpus for m in self.enabled)


class FleetCapBook(RegistryBook):
    """Add, remove and read the caps set through the registry."""

    TABLES = (audit_table, caps_table)  # caps_table is on remedy.caps.FLEET_METADATA
    WHAT = "remediation cap table"

    @property
    def engine(self) -> Engine:
        return self._engine

    def add(
        self,
        group_by: Sequence[str],
        max_: str,
        *,
        created_by: str,
        comment: str,
        actor: str,
        now: float,
    ) -> StoredCap:
        """Store a cap and its audit row in one transaction; ValueError for a bad cap."""
        cap = Cap.of(group_by, max_)
        stored = StoredCap(str(uuid.uuid4()), cap, created_by, comment, now)
        detail = {**cap.to_json(), "comment": comment}
        self._write(
            [
                insert(caps_table).values(
                    id=stored.id,
                    group_by=json.dumps(list(cap.group_by)),
                    max=cap.max_text,
                    created_by=created_by[:255],
                    comment=comment,
                    created_at=now,
                ),
                audit(now, actor, "cap", stored.id, detail),
            ]
        )
        return stored

    def remove(self, cap_id: str, *, actor: str, comment: str, now: float) -> bool:
        """Remove a cap (by id or a unique prefix of it); False when none matches."""
        self._ensure()
        with registry_errors("write the registry"), self._engine.begin() as conn:
            ids = [
                str(i)
                for i in conn.execute(
                    select(caps_table.c.id).where(caps_table.c.id.startswith(cap_id))
                ).scalars()
            ]
            if len(ids) != 1 or not cap_id:
                return False
            conn.execute(delete(caps_table).where(caps_table.c.id == ids[0]))
            conn.execute(audit(now, actor, "uncap", ids[0], {"comment": comment}))
        return True

    def all(self) -> list[StoredCap]:
        """Every cap, oldest first."""
        t = caps_table
        rows = self._rows(select(t).order_by(t.c.created_at, t.c.id))
        caps = registry_caps(rows)
        return [
            StoredCap(str(r["id"]), cap, str(r["created_by"]), str(r["comment"]), r["created_at"])
            for r, cap in zip(rows, caps, strict=True)
        ]

    def members(self) -> list[tuple[Member, float]]:
        """Every registered node (labels with ``node``, physical GPUs, its fleetd.yaml's
        caps) and its heartbeat time: one query (none before the first heartbeat)."""
        t = nodes_table
        with registry_errors("read the registry"), self._engine.connect() as conn:
            if not inspect(conn).has_table(t.name):
                return []
            present = {c["name"] for c in inspect(conn).get_columns(t.name)}
            wanted = ("node", "labels", "gpus_total", "gpus_physical", "caps", "heartbeat_at")
            # a table of an older fleetd, not yet upgraded by a newer agent's heartbeat
            columns = [t.c[n] if n in present else literal(None).label(n) for n in wanted]
            rows = conn.execute(select(*columns)).all()
        out = []
        parsed: dict[str, tuple[Cap, ...]] = {}  # a fleet's nodes mostly share one config
        for node, labels, total, physical, caps, at in rows:
            template = parsed.get(caps or "")
            if template is None:  # parsed and checked once per distinct text
                data = json.loads(caps) if caps else []
                template = tuple(Cap.from_json(d, "fleetd.yaml") for d in data)
                parsed[caps or ""] = template
            source = f"fleetd.yaml of {node}"
            member = Member(
                str(node),
                {**(labels_of(labels) or {}), "node": str(node)},
                int(physical if physical is not None else total or 0),
                tuple(Cap(c.group_by, c.count, c.percent, source) for c in template),
            )
            out.append((member, float(at)))
        return out


def check_wave(
    node_matchers: tuple[Matcher, ...],
    *,
    waves: Sequence[FleetMode],
    members: Sequence[tuple[Member, float]],
    caps: Sequence[Cap],
    now: float,
    stale_after: float,
) -> WaveCheck:
    """A wave turning ``on`` the nodes ``node_matchers`` accept, checked against the caps.

    The nodes it *newly* enables are the registered nodes it names that no earlier wave has
    turned on (a node on only by its own fleetd.yaml counts as newly on: the registry cannot
    know). Group sizes count the nodes with a fresh heartbeat; the enabled nodes count stale
    ones too (they take the wave when they come back)."""
    probe = FleetMode("", node_matchers, "on", "", "", now)
    named = [m for m, _ in members if probe.applies_to(m.node, m.labels)]
    enabled = tuple(m for m in named if mode_for(waves, m.node, m.labels) != "on")
    fresh = [m for m, at in members if at >= now - stale_after]
    return WaveCheck(len(named), enabled, tuple(wave_loads(enabled, fresh, caps)))
