"""Fleet caps per label group: at most N physical GPUs, or N % of a group's, out of service.

A cap names the node labels that group the fleet (``group_by: [cluster]``: one group per
cluster; ``[]``: the whole fleet) and its ``max``: a count of physical GPUs or a percentage
of the group's physical GPUs (those of the group's nodes whose heartbeat is fresh in the
registry; a partitioned node's 64 logical devices are its 8 GPUs). A lease counts against
the group its node is in: each lease row carries its node's labels. A node without one of
the labels is in the group whose value is empty. A lease written by an older fleetd (no
labels) could be in any group: it counts against every one.

Caps come from fleetd.yaml (``remediation.fleet.caps``) and from the registry
(``fleetctl remediation cap add``, the ``fleet_remediation_caps`` table declared here); an
automatic run waits until every cap that applies holds. Pure functions, plus the table.

A wave (``fleetctl remediation mode on``) is checked against the same caps:
``wave_refusals`` says, per cap group it touches, how many GPUs it would newly put under
automatic remediation, and refuses it when that is more than the group's cap (so the worst
case of a wave — every node it enables faulting at once — stays inside the caps).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, Float, MetaData, String, Table, Text

FLEET_METADATA = MetaData()
"""Tables that exist only in the shared registry (never in a node's own database)."""

caps_table = Table(  # caps set through the registry: fleetctl remediation cap add
    "fleet_remediation_caps",
    FLEET_METADATA,
    Column("id", String(36), primary_key=True),
    Column("group_by", Text, nullable=False),  # JSON list of label names
    Column("max", String(16), nullable=False),  # "16" or "10%"
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
)

_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


def parse_max(value: object) -> tuple[int | None, float | None]:
    """(count, percent) from ``16`` or ``"10%"``; ValueError naming what is wrong."""
    if isinstance(value, bool):
        raise ValueError(f"max must be a GPU count or a percentage like 10%, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"max must not be negative, not {value}")
        return value, None
    match = _MAX.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"max must be a GPU count or a percentage like 10%, not {value!r}")
    number, percent = match.groups()
    if percent:
        share = float(number)
        if not 0 < share <= 100:
            raise ValueError(f"a percentage cap must be above 0% and at most 100%, not {value}")
        return None, share
    if "." in number:
        raise ValueError(f"a GPU count must be whole, not {value!r}")
    return int(number), None


def check_group_by(names: Iterable[str]) -> tuple[str, ...]:
    out = tuple(names)
    for name in out:
        if not _LABEL.match(name):
            raise ValueError(f"group_by: {name!r} is not a label name")
    if len(set(out)) != len(out):
        raise ValueError("group_by names a label twice")
    return out


@dataclass(frozen=True, slots=True)
class Cap:
    """One cap: ``count`` GPUs or ``percent`` % of each group's GPUs (exactly one is set)."""

    group_by: tuple[str, ...]
    count: int | None = None
    percent: float | None = None
    source: str = "fleetd.yaml"

    @classmethod
    def of(cls, group_by: Iterable[str], max_: object, source: str = "fleetd.yaml") -> Cap:
        count, percent = parse_max(max_)
        return cls(check_group_by(group_by), count, percent, source)

    @property
    def max_text(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else str(self.count)

    @property
    def key(self) -> tuple[tuple[str, ...], str]:
        return self.group_by, self.max_text

    def group(self, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The group of a node with ``labels`` (its ``node`` name among them)."""
        return tuple((name, labels.get(name, "")) for name in self.group_by)

    def limit(self, total: int | None) -> int | None:
        """GPUs the group may have out: the count, or the share of ``total`` rounded down
        (None: a percentage of a group whose size is unknown)."""
        if self.count is not None:
            return self.count
        if total is None:
            return None
        return math.floor((self.percent or 0.0) * total / 100.0 + 1e-9)

    def describe(self, group: tuple[tuple[str, str], ...], total: int | None) -> str:
        """``cap 10% of cluster=eu1 (40 of 400 GPUs)`` / ``cap 16 GPUs in the fleet``."""
        where = group_text(group)
        if self.percent is not None:
            size = "size unknown" if total is None else f"{self.limit(total)} of {total} GPUs"
            return f"cap {self.max_text} of {where} ({size})"
        return f"cap {self.count} GPUs in {where}"

    def to_json(self) -> dict[str, object]:
        return {"group_by": list(self.group_by), "max": self.max_text}

    @classmethod
    def from_json(cls, data: Mapping[str, object], source: str) -> Cap:
        names = data.get("group_by") or []
        if not isinstance(names, list):
            raise ValueError("group_by must be a list")
        return cls.of([str(n) for n in names], data.get("max"), source)


def group_text(group: tuple[tuple[str, str], ...]) -> str:
    """``cluster=eu1,rack=r2``; the fleet for no label."""
    return ",".join(f"{k}={v}" for k, v in group) if group else "the fleet"


def in_group(labels: Mapping[str, str] | None, group: tuple[tuple[str, str], ...]) -> bool:
    """Whether a node (a lease's labels) is in ``group``; unknown labels (None): it may be."""
    if labels is None:
        return True
    return all(labels.get(k, "") == v for k, v in group)


def node_labels(node: str, labels: Mapping[str, str]) -> dict[str, str]:
    """What a lease row records of its node: its labels, and ``node`` (group_by: [node])."""
    return {**labels, "node": node}


def labels_json(labels: Mapping[str, str]) -> str:
    return json.dumps(dict(labels), sort_keys=True)


def labels_of(text: str | None) -> dict[str, str] | None:
    """A row's labels, or None for a row an older fleetd wrote (or unreadable)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class Held:
    """A lease: its node's labels (None: written by an older fleetd) and physical GPUs."""

    labels: Mapping[str, str] | None
    gpus: int


@dataclass(frozen=True, slots=True)
class Member:
    """A node of the fleet as the registry says: labels (with ``node``) and physical GPUs."""

    node: str
    labels: Mapping[str, str]
    gpus: int
    caps: tuple[Cap, ...] = field(default=())  # the caps its own fleetd.yaml sets


def group_total(members: Iterable[Member], group: tuple[tuple[str, str], ...]) -> int:
    return sum(m.gpus for m in members if in_group(m.labels, group))


def cap_refusal(
    caps: Sequence[Cap],
    labels: Mapping[str, str],
    wanted: int,
    held: Sequence[Held],
    members: Sequence[Member] | None,
) -> str | None:
    """Why ``wanted`` more GPUs of the node with ``labels`` may not go out now, or None.

    ``members``: the fresh nodes of the registry (None: not readable, so a percentage cap
    cannot be judged and refuses)."""
    for cap in caps:
        group = cap.group(labels)
        out = sum(h.gpus for h in held if in_group(h.labels, group))
        total = group_total(members, group) if members is not None else None
        limit = cap.limit(total)
        if limit is None or out + wanted > limit:
            return (
                f"{cap.describe(group, total)}: {out} out, {wanted} more would exceed "
                f"{'an unknown limit' if limit is None else limit}"
            )
    return None


def unique_caps(caps: Iterable[Cap]) -> list[Cap]:
    seen: set[tuple[tuple[str, ...], str]] = set()
    out = []
    for cap in caps:
        if cap.key not in seen:
            seen.add(cap.key)
            out.append(cap)
    return out


@dataclass(frozen=True, slots=True)
class WaveLoad:
    """One cap group a wave reaches: what it newly enables there against the cap."""

    cap: Cap
    group: tuple[tuple[str, str], ...]
    nodes: int
    gpus: int
    total: int
    limit: int

    @property
    def exceeds(self) -> bool:
        return self.gpus > self.limit

    def text(self) -> str:
        return (
            f"{group_text(self.group)}: {self.nodes} node{'' if self.nodes == 1 else 's'}, "
            f"{self.gpus} GPUs newly on; "
            f"{self.cap.describe(self.group, self.total)} ({self.cap.source})"
        )


def wave_loads(
    enabled: Sequence[Member], members: Sequence[Member], registry_caps: Sequence[Cap]
) -> list[WaveLoad]:
    """Per cap and group that the ``enabled`` nodes (those a wave newly turns ``on``) are
    in: how many nodes and GPUs it enables there, against the cap on that group. The caps of
    a node are its own fleetd.yaml's (published with its heartbeat) and the registry's."""
    loads: dict[tuple[tuple[tuple[str, ...], str], tuple[tuple[str, str], ...]], WaveLoad] = {}
    for node in enabled:
        for cap in unique_caps([*node.caps, *registry_caps]):
            group = cap.group(node.labels)
            key = (cap.key, group)
            found = loads.get(key)
            if found is None:
                total = group_total(members, group)
                limit = cap.limit(total)
                found = WaveLoad(cap, group, 0, 0, total, limit if limit is not None else 0)
            loads[key] = WaveLoad(
                found.cap, group, found.nodes + 1, found.gpus + node.gpus, found.total, found.limit
            )
    return sorted(loads.values(), key=lambda w: (not w.exceeds, group_text(w.group), w.cap.key))


def registry_caps(rows: Iterable[Mapping[Any, Any]]) -> list[Cap]:
    """The caps of ``fleet_remediation_caps`` rows; ValueError naming a row that is not a cap
    (written by hand): no lease is granted until it is mended, never a cap ignored."""
    out = []
    for row in rows:
        try:
            names = json.loads(str(row["group_by"]))
            if not isinstance(names, list):
                raise ValueError("group_by is not a list")
            source = f"registry cap {str(row['id'])[:8]}"
            out.append(Cap.of([str(n) for n in names], str(row["max"]), source))
        except ValueError as exc:
            raise ValueError(f"fleet_remediation_caps row {row['id']}: {exc}") from None
    return out
