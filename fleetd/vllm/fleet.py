"""Gray failure against the fleet: each hive's serving aggregate against the peer hives.

The node-local comparison (``fleetd.vllm.peers``) cannot see a node whose GPUs are all equally
slow — every GPU is then its peers' median. So each agent publishes its workers' recent figures
with its heartbeat (``fleetd.registry.serving``) and compares each of its hives with the hives
of other nodes of the same SKU serving the same model:

* a hive's figure is the median of its workers' decode time per token (so one slow worker in
  it — the node-local comparison's business — barely moves it); its clock, throttle residency
  and batch are the medians of its workers';
* the reference is the median of the peer hives and the spread their scaled MAD, floored at
  ``mad_floor`` of the median; an outlier needs the z-score above ``z`` *and* a slowdown of at
  least ``min_slowdown`` — the same tests, and for the same reasons, as on the node;
* peers are hives whose figures are at most ``max_age`` old (the registry's ``stale_after``)
  and have a decode figure; fewer than ``fleet_min_peers`` gives no verdict, and says so;
* cut off from the registry (the last read failed, or is older than ``max_age``), there is no
  fleet verdict: the verdict says the comparison is node-local only.

Attribution as on the node: *hardware* when the hive's clock is ``clock_drop`` below the peer
hives' or its throttle residency ``throttle_ratio`` above, *workload* when its batch is more than
``load_factor`` away from theirs, *engine* otherwise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from fleetd.vllm.config import PeersConfig
from fleetd.vllm.robust import robust_z


@dataclass(frozen=True, slots=True)
class ServingFigure:
    """One worker's recent figures, as published to the registry; None where unknown."""

    node: str
    hive: str
    worker: str
    model: str
    sku: str
    gpus: tuple[int, ...]
    at: float
    per_token_s: float | None
    tokens_per_joule: float | None = None
    clock_hz: float | None = None
    throttle: float | None = None
    batch: float | None = None


@dataclass(frozen=True, slots=True)
class FleetView:
    """What the last heartbeat read of the fleet: the peers' figures, or why there are none."""

    peers: tuple[ServingFigure, ...] = ()
    read_at: float | None = None  # None: never read
    error: str | None = None  # the last read failed


@dataclass(frozen=True, slots=True)
class HiveUnit:
    """A hive's aggregate for one model."""

    node: str
    hive: str
    model: str
    workers: tuple[str, ...]
    gpus: tuple[int, ...]
    per_token_s: float
    clock_hz: float | None
    throttle: float | None
    batch: float | None


@dataclass(frozen=True, slots=True)
class FleetVerdict:
    """One of this node's hives against the fleet's peer hives (``level`` "hive")."""

    hive: str
    model: str
    workers: tuple[str, ...]
    gpus: tuple[int, ...]
    peers: int
    compared: bool
    slowdown: float | None = None
    z: float | None = None
    outlier: bool = False
    attribution: str | None = None
    why: str = ""


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def hive_units(figures: Sequence[ServingFigure]) -> list[HiveUnit]:
    """The figures aggregated per (node, hive, model); workers without a decode figure drop out."""
    groups: dict[tuple[str, str, str], list[ServingFigure]] = {}
    for f in figures:
        if f.per_token_s is not None and f.per_token_s > 0:
            groups.setdefault((f.node, f.hive, f.model), []).append(f)
    out = []
    for (node, hive, model), group in sorted(groups.items()):
        out.append(
            HiveUnit(
                node, hive, model,
                tuple(sorted(f.worker for f in group)),
                tuple(sorted({g for f in group for g in f.gpus})),
                statistics.median(f.per_token_s for f in group if f.per_token_s is not None),
                _median([f.clock_hz for f in group]),
                _median([f.throttle for f in group]),
                _median([f.batch for f in group]),
            )
        )  # fmt: skip
    return out


def judge_fleet(
    mine: Sequence[ServingFigure],
    view: FleetView | None,
    settings: PeersConfig,
    now: float,
    max_age: float,
) -> list[FleetVerdict]:
    """Each of ``mine``'s hives against the peer hives in ``view`` (and this node's other hives).

    ``view`` None: no registry configured, so no fleet verdicts at all."""
    if view is None:
        return []
    own = hive_units(mine)
    cut_off = view.read_at is None or now - view.read_at > max_age or view.error is not None
    if cut_off:
        reason = view.error or ("never read" if view.read_at is None else "last read too old")
        why = f"cut off from the registry ({reason}): node-local comparison only"
        return [FleetVerdict(u.hive, u.model, u.workers, u.gpus, 0, False, why=why) for u in own]
    me = {f.node for f in mine}
    fresh = [p for p in view.peers if p.node not in me and now - p.at <= max_age]
    units = own + hive_units(fresh)
    verdicts = []
    for unit in own:
        peers = [
            u for u in units if u.model == unit.model and (u.node, u.hive) != (unit.node, unit.hive)
        ]
        if len(peers) < settings.fleet_min_peers:
            why = f"{len(peers)} peer hive(s) with data, {settings.fleet_min_peers} needed"
            verdicts.append(
                FleetVerdict(unit.hive, unit.model, unit.workers, unit.gpus, len(peers), False,
                             why=why)
            )  # fmt: skip
            continue
        med, z = robust_z(unit.per_token_s, [p.per_token_s for p in peers], settings.mad_floor)
        slowdown = unit.per_token_s / med - 1.0 if med > 0 else None
        outlier = slowdown is not None and z > settings.z and slowdown >= settings.min_slowdown
        attribution, why = attribute_hive(unit, peers, settings) if outlier else (None, "")
        verdicts.append(
            FleetVerdict(unit.hive, unit.model, unit.workers, unit.gpus, len(peers), True,
                         slowdown, z, outlier, attribution, why)
        )  # fmt: skip
    return verdicts


def attribute_hive(
    unit: HiveUnit, peers: Sequence[HiveUnit], settings: PeersConfig
) -> tuple[str, str]:
    """hardware, workload or engine for a slow hive, with the evidence in words."""
    clock_ref = _median([p.clock_hz for p in peers])
    throttle_ref = _median([p.throttle for p in peers]) or 0.0
    batch_ref = _median([p.batch for p in peers])
    n = len(peers)
    clock = unit.clock_hz
    if clock_ref and clock is not None and clock < clock_ref * (1 - settings.clock_drop):
        pct = round(100 * (1 - clock / clock_ref))
        return "hardware", f"hive gfx clock {pct} % below its {n} peer hives'"
    if unit.throttle is not None and unit.throttle - throttle_ref > settings.throttle_ratio:
        return "hardware", f"hive throttled {round(100 * unit.throttle)} % of the time"
    if unit.batch is not None and batch_ref:
        ratio = unit.batch / batch_ref
        if ratio > settings.load_factor or ratio < 1 / settings.load_factor:
            why = f"running requests {unit.batch:.3g} vs the peer hives' {batch_ref:.3g}"
            return "workload", why
    return "engine", "no hardware signal and comparable traffic: restart the hive's workers"
