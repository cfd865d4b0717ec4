"""fleetctl's registry-side commands: fleet silences, their audit trail, drift, and alerts.

These read or write the fleet registry (``--db``) and contact no agent: a fleet silence is a
row agents pull with their heartbeat; ``drift`` and ``alerts`` read every node's last
heartbeat in one query. Exit codes: 0 done (no drift, no firing alert), 1 refused (a bad
matcher, with its position) or found (drift), 2 the registry could not be
read, or some node's heartbeat is stale (``alerts``: 0 or 2, as when it asks the agents).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fleetd.cli.fleetctl_context import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    Fail,
    Fleet,
    Unreachable,
    registry_reader,
    registry_session,
)
from fleetd.cli.fleetctl_render import Cell, Column, age, clock, number, render_table

if TYPE_CHECKING:
    from fleetd.query import Matcher
    from fleetd.registry.book import RegistryBook
    from fleetd.registry.reader import RegistryNode
    from fleetd.registry.silences import FleetSilenceBook

B = TypeVar("B", bound="RegistryBook")

SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _need_db(fleet: Fleet, what: str) -> str:
    if fleet.db is None:
        raise Unreachable(f"{what} lives in the fleet registry: give --db URL (or $FLEETCTL_DB)")
    return fleet.db


def registry_book(kind: type[B], fleet: Fleet, what: str) -> AbstractContextManager[B]:
    """A book of the fleet registry (``--db``; ``what`` names what lives there when it is
    missing) as a ``registry_session``; a malformed URL or a missing driver is
    ``Unreachable`` too."""
    try:
        book = kind(_need_db(fleet, what), timeout=fleet.timeout)
    except Exception as exc:  # a malformed URL, a missing driver
        raise Unreachable(str(exc)) from None
    return registry_session(book)


def _silences(fleet: Fleet, what: str) -> AbstractContextManager[FleetSilenceBook]:
    from fleetd.registry.silences import FleetSilenceBook

    return registry_book(FleetSilenceBook, fleet, what)


def _book_write(
    fleet: Fleet,
    what: str,
    node_matchers: Sequence[str],
    matchers: Sequence[str],
    write: Callable[[FleetSilenceBook, tuple[Matcher, ...], tuple[Matcher, ...]], Any],
) -> Any:
    """Parse the matchers (a bad one is refused with its position, exit 1), then ``write``
    them to the fleet book; a refused write exits 1, an unreachable registry as such."""
    from fleetd.registry.silences import MatcherError, parse_matchers

    try:
        nodes = parse_matchers(node_matchers, "node")
        alerts = parse_matchers(matchers, "alert")
    except MatcherError as exc:
        raise Fail(f"refused: {exc}") from None
    with _silences(fleet, what) as book:
        try:
            return write(book, nodes, alerts)
        except ValueError as exc:
            raise Fail(f"refused: {exc}") from None


# ---------------------------------------------------------------------------- fleet silences
def add_fleet_silence(
    fleet: Fleet,
    node_matchers: Sequence[str],
    matchers: Sequence[str],
    *,
    duration: float,
    author: str,
    reason: str,
    actor: str,
) -> None:
    """Validate (bad matcher: refused with its position, exit 1), store, print the id."""
    now = time.time()
    silence = _book_write(
        fleet,
        "a fleet silence",
        node_matchers,
        matchers,
        lambda book, nodes, alerts: book.add(
            nodes,
            alerts,
            starts_at=now,
            ends_at=now + duration,
            created_by=author,
            comment=reason,
            actor=actor,
            now=now,
        ),
    )
    where = " ".join(silence.to_dict(now)["node_matchers"]) or "every node"
    fleet.echo(
        f"fleet silence {silence.id} on {where} until {clock(silence.silence.ends_at)}: "
        "agents apply it at their next heartbeat"
    )


def ack_fleet(
    fleet: Fleet,
    node_matchers: Sequence[str],
    matchers: Sequence[str],
    *,
    author: str,
    reason: str,
    actor: str,
) -> None:
    """A fleet acknowledgement: refused with the bad matcher's position (exit 1), or stored."""
    ack = _book_write(
        fleet,
        "a fleet acknowledgement",
        node_matchers,
        matchers,
        lambda book, nodes, alerts: book.acknowledge(
            nodes, alerts, created_by=author, comment=reason, actor=actor, now=time.time()
        ),
    )
    fleet.echo(
        f"fleet acknowledgement {ack.id}: agents acknowledge the matching alerts firing now "
        "at their next heartbeat"
    )


FLEET_SILENCE_COLUMNS = (
    Column("ID"),
    Column("STATE"),
    Column("NODES"),
    Column("ALERTS"),
    Column("ENDS"),
    Column("BY"),
    Column("COMMENT"),
)


def list_fleet_silences(fleet: Fleet, *, everything: bool, as_json: bool) -> None:
    now = time.time()
    with _silences(fleet, "a fleet silence") as book:
        found = book.all() if everything else book.current(now)
    views = [s.to_dict(now) for s in found]
    if as_json:
        click.echo(json.dumps({"fleet_silences": views}, indent=2))
        return
    rows = [
        [
            Cell(v["id"]),
            Cell(v["state"], "green" if v["state"] == "active" else None),
            Cell(" ".join(v["node_matchers"]) or "(all)"),
            Cell(" ".join(v["matchers"]) or "(all)"),
            Cell(clock(v["ends_at"])),
            Cell(v["created_by"]),
            Cell(v["comment"]),
        ]
        for v in views
    ]
    fleet.echo(render_table(FLEET_SILENCE_COLUMNS, rows, fleet.painter))


def expire_fleet_silence(fleet: Fleet, silence_id: str, *, reason: str, actor: str) -> None:
    with _silences(fleet, "a fleet silence") as book:
        try:
            book.expire(silence_id, actor=actor, comment=reason, now=time.time())
        except KeyError:
            raise Fail(f"no fleet silence {silence_id!r} in the registry") from None
    fleet.echo(f"fleet silence {silence_id} expired: agents drop it at their next heartbeat")


AUDIT_COLUMNS = (Column("AT"), Column("WHO"), Column("ACTION"), Column("ID"), Column("WHAT"))


def show_audit(fleet: Fleet, *, limit: int, as_json: bool) -> None:
    with _silences(fleet, "the fleet silence audit trail") as book:
        entries = book.audit(limit)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "audit": [
                        {
                            "at": e.at,
                            "actor": e.actor,
                            "action": e.action,
                            "subject": e.subject,
                            "detail": e.detail,
                        }
                        for e in entries
                    ]
                },
                indent=2,
            )
        )
        return
    rows = [
        [
            Cell(clock(e.at)),
            Cell(e.actor),
            Cell(e.action),
            Cell(e.subject),
            Cell(_audit_text(e.detail)),
        ]
        for e in entries
    ]
    fleet.echo(render_table(AUDIT_COLUMNS, rows, fleet.painter))


def _audit_text(detail: Any) -> str:
    parts = []
    for key in ("node_matchers", "matchers"):
        value = detail.get(key)
        if value:
            matchers = json.loads(value) if isinstance(value, str) else value
            parts.append(f"{key.replace('_', ' ')}: {' '.join(matchers)}")
    if detail.get("ends_at"):
        parts.append(f"until {clock(detail['ends_at'])}")
    if detail.get("comment"):
        parts.append(f"“{detail['comment']}”")
    return "; ".join(parts)


# ------------------------------------------------------------------------------ registry read
def read_fleet(fleet: Fleet, now: float) -> list[RegistryNode]:
    """Every node's last heartbeat, in one query."""
    with registry_reader(_need_db(fleet, "this view"), fleet.timeout) as reader:
        nodes: list[RegistryNode] = reader.fleet(now, stale_after=fleet.stale_after)
        return nodes


ALERT_COLUMNS = (
    Column("NODE"),
    Column("SEVERITY"),
    Column("ALERT"),
    Column("GPU", "right"),
    Column("SINCE"),
    Column("VALUE", "right"),
    Column("MUTED"),
    Column("SUMMARY"),
)
ORDER = {"critical": 0, "warning": 1, "info": 2}


def registry_alerts(
    fleet: Fleet, nodes: Sequence[str], severity: str | None, as_json: bool
) -> None:
    """Firing alerts as every agent last published them (one query); exit 0, or 2 when a
    node is stale or never published its alerts (as the fan-out's 2 for a node that did not
    answer)."""
    now = time.time()
    wanted = set(nodes)
    found: list[tuple[str, dict[str, Any]]] = []
    missing: list[tuple[str, str]] = []
    for n in read_fleet(fleet, now):
        name = n.summary.node
        if wanted and name not in wanted:
            continue
        if n.stale:
            missing.append((name, f"stale: last heartbeat {age(n.heartbeat_age_s)} ago"))
        if n.alerts is None:
            if not n.stale:
                missing.append((name, "its agent does not publish alerts to the registry"))
            continue
        found.extend(
            (name, dict(a)) for a in n.alerts if severity is None or a["severity"] == severity
        )
    unknown = sorted(wanted - {n for n, _ in found} - {n for n, _ in missing})
    found.sort(key=lambda na: (ORDER.get(na[1]["severity"], 9), na[0], na[1]["gpu"] or -1))
    code = EXIT_UNREACHABLE if missing else EXIT_OK
    if as_json:
        click.echo(
            json.dumps(
                {
                    "source": "registry",
                    "alerts": [{"node": n, **a} for n, a in found],
                    "unreachable": [{"node": n, "error": why} for n, why in missing],
                },
                indent=2,
            )
        )
        raise SystemExit(code)
    rows = [
        [
            Cell(node),
            Cell(a["severity"], SEVERITY_STYLES.get(a["severity"])),
            Cell(a["rule"]),
            Cell("-" if a["gpu"] is None else str(a["gpu"])),
            Cell(clock(a.get("since"))),
            Cell(number(a["value"], digits=2) if a.get("value") is not None else "-"),
            Cell(_muted(a)),
            Cell(a.get("summary") or ""),
        ]
        for node, a in found
    ]
    fleet.echo(render_table(ALERT_COLUMNS, rows, fleet.painter))
    for name, why in missing:
        fleet.echo(fleet.painter.paint(f"{name}: {why}", "bold magenta"))
    for name in unknown:
        fleet.echo(fleet.painter.paint(f"{name}: not in the registry", "bold red"))
    raise SystemExit(EXIT_UNREACHABLE if unknown else code)


def _muted(alert: dict[str, Any]) -> str:
    flags = (("silenced", alert.get("silenced")), ("acked", alert.get("acknowledged")))
    return ",".join(word for word, on in flags if on) or "-"


DRIFT_COLUMNS = (
    Column("SKU"),
    Column("NODES", "right"),
    Column("COMPONENT"),
    Column("MAJORITY"),
    Column("MINORITY"),
    Column("COUNT", "right"),
    Column("ON"),
)


def drift_report(fleet: Fleet, tolerance: float, as_json: bool, show: int) -> None:
    """SKU groups and their minority versions from one query; exit 1 when there is drift."""
    from fleetd.registry.drift import fleet_drift, shown_versions

    with registry_reader(_need_db(fleet, "drift"), fleet.timeout) as reader:
        nodes = reader.versions(time.time(), stale_after=fleet.stale_after)
    fresh = [(node, v) for node, v, stale in nodes if not stale and v is not None]
    stale = sum(1 for _, _, is_stale in nodes if is_stale)
    silent = sum(1 for _, v, is_stale in nodes if not is_stale and v is None)
    groups, minorities = fleet_drift(fresh, tolerance)
    code = EXIT_UNHEALTHY if minorities else EXIT_OK
    if as_json:
        click.echo(
            json.dumps(
                {
                    "groups": groups,
                    "drift": [
                        {
                            "sku": m.sku,
                            "component": m.component,
                            "version": m.version,
                            "majority": m.majority,
                            "nodes": list(m.nodes),
                            "group_size": m.group_size,
                        }
                        for m in minorities
                    ],
                    "stale_nodes": stale,
                    "nodes_without_versions": silent,
                    "tolerance": tolerance,
                },
                indent=2,
            )
        )
        raise SystemExit(code)
    rows = []
    for m in minorities:
        majority, version = shown_versions(m.component, m.version, m.majority)
        shown = ", ".join(m.nodes[:show])
        if len(m.nodes) > show:
            shown += f" (+{len(m.nodes) - show})"
        rows.append(
            [
                Cell(m.sku),
                Cell(str(m.group_size)),
                Cell(m.component),
                Cell(majority),
                Cell(version, "yellow"),
                Cell(str(len(m.nodes))),
                Cell(shown),
            ]
        )
    summary = ", ".join(f"{sku}: {count}" for sku, count in sorted(groups.items()))
    fleet.echo(f"{sum(groups.values())} nodes by SKU ({summary or 'none'})")
    if rows:
        fleet.echo(render_table(DRIFT_COLUMNS, rows, fleet.painter))
    else:
        fleet.echo("no drift: every node runs its SKU group's majority versions")
    if stale or silent:
        fleet.echo(
            f"not judged: {stale} stale node(s), {silent} node(s) whose agent publishes no versions"
        )
    raise SystemExit(code)


# ------------------------------------------------------------------------ remediation waves
def set_wave(
    fleet: Fleet,
    node_matchers: Sequence[str],
    mode: str,
    *,
    reason: str,
    actor: str,
    force: bool = False,
) -> None:
    """Store a wave (a bad matcher: refused with its position, exit 1; a wave turning ``on``
    more GPUs of a group than its cap: refused with the numbers, unless ``force``) and say how
    many registered nodes it names."""
    from fleetd.cli.fleetctl_caps import check_wave
    from fleetd.registry.modes import FleetModeBook
    from fleetd.registry.silences import MatcherError, parse_matchers

    try:
        nodes = parse_matchers(node_matchers, "node")
    except MatcherError as exc:
        raise Fail(f"refused: {exc}") from None
    counted: tuple[int, int] | None = None  # (named, registered) as the cap check read them
    if mode == "on":
        where = " ".join(format_matchers(nodes)) or "every node"
        lines, forced, counted = check_wave(fleet, nodes, where=where, force=force)
        fleet.echo("\n".join(lines))
        if forced:  # the audit trail keeps the numbers it was forced past
            reason = f"{reason} [forced past a cap: {'; '.join(x.strip() for x in lines)}]"
    now = time.time()
    with registry_book(FleetModeBook, fleet, "a remediation wave") as book:
        wave = book.set(nodes, mode, created_by=actor, comment=reason, actor=actor, now=now)
    where = " ".join(format_matchers(nodes)) or "every node"
    if counted is not None and counted[1]:  # one read of the fleet, not two
        count = f"{counted[0]} of {counted[1]} registered nodes"
    else:
        count = _registered(fleet, wave, now)
    fleet.echo(
        f"wave {wave.id}: remediation mode {mode} for {where} ({count}); "
        "agents take it at their next heartbeat"
    )


def _registered(fleet: Fleet, wave: Any, now: float) -> str:
    """How many registered nodes ``wave`` names, of how many."""
    try:
        registry = read_fleet(fleet, now)
    except Unreachable:  # no agent has published yet: the wave is stored all the same
        return "no node registered yet"
    named = sum(1 for n in registry if wave.applies_to(n.summary.node, dict(n.summary.labels)))
    return f"{named} of {len(registry)} registered nodes"


def format_matchers(matchers: Sequence[Any]) -> list[str]:
    from fleetd.alert.matchers import format_matcher

    return [format_matcher(m) for m in matchers]


WAVE_COLUMNS = (Column("SET"), Column("BY"), Column("NODES"), Column("MODE"), Column("COMMENT"))


def show_waves(fleet: Fleet, *, as_json: bool) -> None:
    """The waves, oldest first, and how many nodes run each mode by them (two queries)."""
    from fleetd.registry.modes import FleetModeBook, mode_for

    now = time.time()
    registry = read_fleet(fleet, now)
    with registry_book(FleetModeBook, fleet, "a remediation wave") as book:
        waves = book.all()
    by_mode: dict[str, int] = {}
    for n in registry:
        mode = mode_for(waves, n.summary.node, dict(n.summary.labels)) or "local"
        by_mode[mode] = by_mode.get(mode, 0) + 1
    if as_json:
        click.echo(
            json.dumps(
                {
                    "waves": [
                        {
                            "id": w.id,
                            "node_matchers": format_matchers(w.node_matchers),
                            "mode": w.mode,
                            "created_by": w.created_by,
                            "comment": w.comment,
                            "created_at": w.created_at,
                        }
                        for w in waves
                    ],
                    "nodes_by_mode": by_mode,
                },
                indent=2,
            )
        )
        return
    rows = [
        [
            Cell(clock(w.created_at)),
            Cell(w.created_by),
            Cell(" ".join(format_matchers(w.node_matchers)) or "(all)"),
            Cell(w.mode, "bold" if w.mode == "on" else None),
            Cell(w.comment),
        ]
        for w in waves
    ]
    fleet.echo(render_table(WAVE_COLUMNS, rows, fleet.painter))
    summary = ", ".join(f"{mode}: {count}" for mode, count in sorted(by_mode.items()))
    fleet.echo(f"registered nodes by wave mode: {summary or 'none'} (local: their fleetd.yaml)")
