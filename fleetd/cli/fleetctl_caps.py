"""fleetctl's fleet caps: ``remediation cap add|list|remove`` and the cap check of a wave.

A wave that turns remediation ``on`` is checked before it is stored: per cap and label group
it reaches, the physical GPUs it would newly put under automatic remediation against that
group's cap (docs/operations.md, "Fleet caps and waves"). Refused: exit 1, with the numbers;
``--force`` stores it anyway and says so in the audit trail's comment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import click

from fleetd.cli.fleetctl_context import Fail, Fleet
from fleetd.cli.fleetctl_fleet import registry_book
from fleetd.cli.fleetctl_render import Cell, Column, clock, render_table

if TYPE_CHECKING:
    from fleetd.query import Matcher
    from fleetd.registry.caps import FleetCapBook, WaveCheck


def _caps(fleet: Fleet) -> AbstractContextManager[FleetCapBook]:
    from fleetd.registry.caps import FleetCapBook

    return registry_book(FleetCapBook, fleet, "a fleet cap")


def add_cap(fleet: Fleet, group_by: Sequence[str], max_: str, *, reason: str, actor: str) -> None:
    with _caps(fleet) as book:
        try:
            stored = book.add(
                group_by, max_, created_by=actor, comment=reason, actor=actor, now=time.time()
            )
        except ValueError as exc:
            raise Fail(f"refused: {exc}") from None
    by = ",".join(stored.cap.group_by) or "the whole fleet"
    fleet.echo(
        f"cap {stored.id}: at most {stored.cap.max_text} GPUs out per {by}; agents apply it "
        "at their next lease"
    )


def remove_cap(fleet: Fleet, cap_id: str, *, reason: str, actor: str) -> None:
    with _caps(fleet) as book:
        done = book.remove(cap_id, actor=actor, comment=reason, now=time.time())
    if not done:
        raise Fail(f"no single cap with id {cap_id!r} (fleetctl remediation cap list)")
    fleet.echo(f"cap {cap_id} removed")


CAP_COLUMNS = (Column("ID"), Column("SET"), Column("BY"), Column("GROUP BY"), Column("MAX"))


def list_caps(fleet: Fleet, *, as_json: bool) -> None:
    with _caps(fleet) as book:
        stored = book.all()
    if as_json:
        rows = [
            {
                **s.cap.to_json(),
                "id": s.id,
                "created_by": s.created_by,
                "comment": s.comment,
                "created_at": s.created_at,
            }
            for s in stored
        ]
        click.echo(json.dumps({"caps": rows}, indent=2))
        return
    table = [
        [
            Cell(s.id[:8]),
            Cell(clock(s.created_at)),
            Cell(s.created_by),
            Cell(",".join(s.cap.group_by) or "(fleet)"),
            Cell(s.cap.max_text),
        ]
        for s in stored
    ]
    fleet.echo(render_table(CAP_COLUMNS, table, fleet.painter))
    if not stored:
        fleet.echo("no cap set through the registry (each node's fleetd.yaml may set its own)")


def check_wave(
    fleet: Fleet, nodes: tuple[Matcher, ...], *, where: str, force: bool
) -> tuple[list[str], bool, tuple[int, int]]:
    """Refuse (exit 1) a wave turning ``on`` more GPUs of a group than its cap, with the
    numbers; returns the lines to print, whether it was forced past a cap, and how many
    registered nodes it names of how many."""
    from fleetd.registry.caps import check_wave as check
    from fleetd.registry.modes import FleetModeBook

    now = time.time()
    with _caps(fleet) as book:
        try:
            modes = FleetModeBook("", engine=book.engine)
            members = book.members()
            result: WaveCheck = check(
                nodes,
                waves=modes.all(),
                members=members,
                caps=[s.cap for s in book.all()],
                now=now,
                stale_after=fleet.stale_after,
            )
        except ValueError as exc:  # a node published a cap this fleetctl cannot read
            raise Fail(f"refused: the caps cannot be read: {exc}") from None
    lines = [_load_line(load) for load in result.loads]
    head = (
        f"wave {where}: {len(result.enabled)} of {result.nodes} named nodes newly on, "
        f"{result.gpus} GPUs"
    )
    if result.refused and not force:
        raise Fail(
            "\n".join(
                [
                    f"refused: {head}, more than a cap allows:",
                    *lines,
                    "a smaller wave, or --force to set it all the same",
                ]
            )
        )
    head += " (forced past a cap)" if result.refused else ""
    return [head, *lines], result.refused, (result.nodes, len(members))


def _load_line(load: Any) -> str:
    mark = "EXCEEDS" if load.exceeds else "ok"
    return f"  {mark:<7} {load.text()}"
