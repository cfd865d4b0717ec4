"""``fleetctl rma list|show NODE [SERIAL]``: the RMA records of a node's GPUs, one per serial.

``list`` shows every GPU that has one (``--physical``: only those a person must act on);
``show`` one GPU's faults, runs, validator verdicts and physical-action decisions with the
evidence bundle to fetch (``fleetctl evidence NODE RUN``). Exit 0, or 3 when a listed GPU
needs physical action (as ``fleetctl status`` for GPUs out of service).
"""

from __future__ import annotations

import json
from typing import Any

import click

from fleetd.cli.fleetctl_commands import _fleet, read
from fleetd.cli.fleetctl_context import fleet_options
from fleetd.cli.fleetctl_render import Cell, Column, clock, render_table

EXIT_PHYSICAL = 3

RMA_COLUMNS = (
    Column("SERIAL"),
    Column("GPU", "right"),
    Column("FAULTS", "right"),
    Column("RUNS", "right"),
    Column("LAST RUN"),
    Column("VALIDATORS"),
    Column("PHYSICAL ACTION"),
)


@click.group("rma")
def rma_group() -> None:
    """RMA records: per physical GPU (by serial), its faults, runs, validator verdicts, and
    whether a person must act on the hardware."""


def _row(rec: dict[str, Any]) -> list[Cell]:
    runs = rec.get("runs") or []
    last = runs[-1] if runs else None
    checks = rec.get("validations") or []
    failed = [v["name"] for v in checks if not v["ok"]]
    if failed:
        verdict = Cell("failed: " + ", ".join(dict.fromkeys(failed)), "red")
    elif checks:
        verdict = Cell(f"{len(checks)} passed", "green")
    else:
        verdict = Cell("-")
    decision = rec.get("open_decision")
    action = Cell("-")
    if decision is not None:
        action = Cell(
            f"NEEDED ({decision['source']}: {decision['fault_class'] or '?'})", "bold red"
        )
    return [
        Cell(rec["serial"]),
        Cell(str(rec["gpu"])),
        Cell(str(len(rec.get("faults") or []))),
        Cell(str(len(runs))),
        Cell(f"{last['plan']} {last['state']}" if last else "-"),
        verdict,
        action,
    ]


@rma_group.command("list")
@click.argument("node")
@click.option("--physical", is_flag=True, help="Only GPUs that need physical action.")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def rma_list(node: str, physical: bool, as_json: bool, **kw: Any) -> None:
    """NODE's RMA records, one per GPU serial, newest change first."""
    fleet = _fleet(kw)
    data = read(fleet, node, "/rma", **({"physical": "true"} if physical else {}))
    records = data["records"]
    needed = any(r.get("physical_action_needed") for r in records)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    elif not records:
        fleet.echo(f"{node}: no RMA records")
    else:
        fleet.echo(render_table(RMA_COLUMNS, [_row(r) for r in records], fleet.painter))
    raise SystemExit(EXIT_PHYSICAL if needed else 0)


@rma_group.command("show")
@click.argument("node")
@click.argument("serial")
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def rma_show(node: str, serial: str, as_json: bool, **kw: Any) -> None:
    """One GPU's RMA record: faults, runs, validator verdicts, decisions."""
    fleet = _fleet(kw)
    rec = read(fleet, node, f"/rma/{serial}")["record"]
    if as_json:
        click.echo(json.dumps(rec, indent=2))
        raise SystemExit(EXIT_PHYSICAL if rec["physical_action_needed"] else 0)
    paint = fleet.painter.paint
    fleet.echo(f"GPU serial {rec['serial']} on {node} (GPU {rec['gpu']}, {rec['bdf'] or '?'})")
    decision = rec.get("open_decision")
    if decision is not None:
        fleet.echo(paint(f"PHYSICAL ACTION NEEDED ({decision['source']})", "bold red"))
        fleet.echo(f"  decided   {clock(decision['decided_at'])} by run {decision['run_id']}")
        if decision["fault_class"]:
            fleet.echo(f"  class     {decision['fault_class']}")
        if decision["afids"]:
            fleet.echo(f"  AFIDs     {', '.join(str(a) for a in decision['afids'])}")
        fleet.echo(f"  what      {decision['message']}")
        fleet.echo(f"  why       {decision['reason']}")
        if decision["bundle_path"]:
            fleet.echo(
                f"  evidence  {decision['bundle_path']} sha256:{decision['bundle_sha256']} "
                f"(fleetctl evidence {node} {decision['run_id']})"
            )
        if decision["ticket"]:
            fleet.echo(f"  ticket    {decision['ticket']}")
    else:
        fleet.echo(paint("no physical action open", "green"))
    fleet.echo("faults:")
    for f in rec["faults"] or []:
        afid = f" AFID {f['afid']}" if f["afid"] else ""
        fleet.echo(f"  {clock(f['at'])}  {f['rule']}{afid}  {f['fault_class']}  run {f['run_id']}")
    fleet.echo("runs:")
    for r in rec["runs"] or []:
        fleet.echo(
            f"  {clock(r['created_at'])}  {r['run_id']}  {r['plan']} → {r['state']}: {r['outcome']}"
        )
    fleet.echo("validators:")
    for v in rec["validations"] or []:
        mark = paint("pass", "green") if v["ok"] else paint("FAIL", "red")
        target = f" ({v['target']})" if v["target"] else ""
        fleet.echo(f"  {mark}  {v['name']}{target}  run {v['run_id']}: {v['summary']}")
    for d in rec["decisions"] or []:
        if d["resolved_at"] is not None:
            fleet.echo(f"closed decision {d['decision_id']}: {d['resolved_by']}")
    raise SystemExit(EXIT_PHYSICAL if rec["physical_action_needed"] else 0)
