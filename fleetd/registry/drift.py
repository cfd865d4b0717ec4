"""Version drift: what a node runs (driver, amdsmi, VBIOS, firmware, fleetd) against its group.

Nodes are grouped by SKU (the GPU model, e.g. MI355X); within a group the version most nodes
run is the majority, and a node running another one drifts — unless its version is shared by
at least ``tolerance`` of the group (a canary cohort, a rollout half done). An unknown version
(``None``: not readable on this node) is never drift and is not counted. Pure functions:
the heartbeat feeds them its group's counts, ``fleetctl drift`` the whole fleet's rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleetd.model import GpuIdentity

COMPONENTS: dict[str, str] = {
    "driver": "driver_version",
    "amdsmi": "amdsmi_version",
    "vbios": "vbios_version",
    "firmware": "firmware_version",
    "fleetd": "version",
    "partition": "partition_layout",
}
"""Component name → its column in ``fleet_nodes`` (``version`` is fleetd's own, as before)."""


@dataclass(frozen=True, slots=True)
class NodeVersions:
    """What one node runs; None where it cannot be read (never an empty string)."""

    sku: str | None
    driver: str | None = None
    amdsmi: str | None = None
    vbios: str | None = None
    firmware: str | None = None
    fleetd: str | None = None
    partition: str | None = None
    gpus_physical: int | None = None
    """Not a version: the node's physical GPUs (partition-0 devices), which the fleet caps
    count (a percentage cap's group size)."""

    def get(self, component: str) -> str | None:
        value: str | None = getattr(self, component)
        return value


def _distinct(values: Iterable[str | None]) -> str | None:
    """One text for a node's GPUs: the value, or the sorted distinct values joined by ``|``
    (GPUs of one node on different VBIOS are themselves a drift worth seeing)."""
    found = sorted({v for v in values if v})
    return "|".join(found) if found else None


def node_versions(
    gpus: Sequence[GpuIdentity],
    *,
    amdsmi: str | None,
    fleetd: str,
    firmware: str | None = None,
    partition: str | None = None,
) -> NodeVersions:
    """The node's versions from its GPUs' identities and the amdsmi pair it runs."""
    models = Counter(g.model or g.product for g in gpus if g.model or g.product)
    return NodeVersions(
        gpus_physical=sum(1 for g in gpus if g.primary),
        sku=models.most_common(1)[0][0] if models else None,
        driver=_distinct(g.driver_version for g in gpus),
        amdsmi=amdsmi,
        vbios=_distinct(g.vbios for g in gpus),
        firmware=firmware,
        fleetd=fleetd,
        partition=partition,
    )


def firmware_text(per_gpu: Iterable[Mapping[str, str] | None]) -> str | None:
    """One text for the node's firmware: ``BLOCK=VERSION`` per block, sorted, space separated
    (``PSP_SOSDRV=00.36.02.59 PM=00.85.114.00 …``); a block whose GPUs differ shows their
    versions joined by ``|``. GPUs whose firmware could not be read are left out; None when
    none could be."""
    versions: dict[str, set[str]] = {}
    for blocks in per_gpu:
        for name, version in (blocks or {}).items():
            versions.setdefault(name, set()).add(version)
    if not versions:
        return None
    return " ".join(f"{name}={'|'.join(sorted(v))}" for name, v in sorted(versions.items()))


def shown_versions(component: str, version: str, majority: str) -> tuple[str, str]:
    """(majority, version) as ``fleetctl drift``'s table shows them: for firmware only the
    blocks that differ (the whole list is a few hundred characters)."""
    if component != "firmware":
        return majority, version
    mine, theirs = _blocks(version), _blocks(majority)
    names = sorted(n for n in mine.keys() | theirs.keys() if mine.get(n) != theirs.get(n))
    if not names:
        return majority, version

    def text(blocks: Mapping[str, str]) -> str:
        return " ".join(f"{n}={blocks.get(n, '-')}" for n in names)

    return text(theirs), text(mine)


def _blocks(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def partition_layout(modes: Sequence[tuple[int, str | None, str | None]]) -> str | None:
    """``SPX/NPS1`` from each GPU's (index, compute mode, memory mode); distinct layouts
    joined by ``|``; None when no GPU could say."""
    return _distinct(f"{c or '?'}/{m or '?'}" for _, c, m in modes if c or m)


def majority(counts: Mapping[str, int]) -> str | None:
    """The value most nodes run (ties: the smallest text, so every reader agrees)."""
    if not counts:
        return None
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def drifts(value: str | None, counts: Mapping[str, int], tolerance: float) -> bool:
    """Whether ``value`` is drift in a group whose known values are ``counts``."""
    if value is None:
        return False
    total = sum(counts.values())
    top = majority(counts)
    if top is None or value == top or total == 0:
        return False
    return counts.get(value, 0) / total < tolerance if tolerance > 0 else True


@dataclass(frozen=True, slots=True)
class Minority:
    """A version that some nodes of a SKU group run and the majority does not."""

    sku: str
    component: str
    version: str
    majority: str
    nodes: tuple[str, ...]
    group_size: int


def fleet_drift(
    rows: Iterable[tuple[str, NodeVersions]], tolerance: float = 0.0
) -> tuple[dict[str, int], list[Minority]]:
    """Group sizes by SKU, and every minority version that counts as drift, sorted."""
    groups: dict[str, list[tuple[str, NodeVersions]]] = {}
    for node, versions in rows:
        groups.setdefault(versions.sku or "unknown", []).append((node, versions))
    out: list[Minority] = []
    for sku, members in sorted(groups.items()):
        for component in COMPONENTS:
            counts = Counter(v.get(component) for _, v in members if v.get(component) is not None)
            known = {str(k): n for k, n in counts.items()}
            top = majority(known)
            if top is None:
                continue
            for version in sorted(known):
                if not drifts(version, known, tolerance):
                    continue
                nodes = tuple(sorted(n for n, v in members if v.get(component) == version))
                out.append(Minority(sku, component, version, top, nodes, len(members)))
    return {sku: len(m) for sku, m in groups.items()}, out
