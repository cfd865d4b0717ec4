"""``fleetctl status [NODE]``: the fleet at a glance, or one node's GPUs.

Exit codes (scripts and monitors rely on them; the first that applies wins):

    2  at least one node could not be reached (refused, timed out, wrong node at that
       address, or a registry heartbeat older than --stale-after)
    1  every node answered, and at least one has a problem in service: degraded,
       unhealthy or unknown
    3  every node answered and every GPU in service is healthy, but GPUs are out of service
       (drained, in a remediation run, quarantined or held)
    0  every node answered, every GPU is in service and healthy

A problem on a GPU that still serves outranks capacity someone (or remediation) took out on
purpose: 1 needs a person now, 3 says the fleet is short of GPUs.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from fleetd.cli.fleetctl_context import (
    EXIT_OK,
    EXIT_OUT_OF_SERVICE,
    EXIT_UNHEALTHY,
    EXIT_UNREACHABLE,
    Fail,
    Fleet,
    Unreachable,
    fleet_options,
    make_fleet,
    registry_reader,
)
from fleetd.cli.fleetctl_http import Reply, fan_out, request
from fleetd.cli.fleetctl_render import (
    Cell,
    Column,
    Painter,
    age,
    age_cell,
    alerts_cell,
    health_cell,
    number,
    power,
    render_table,
    size,
    temperature_cell,
)
from fleetd.registry.summary import NodeSummary, summarize

STATUS_PATH = "/api/v1/status"


@dataclass(frozen=True, slots=True)
class FleetRow:
    """One node of the fleet table: its summary, or why there is none."""

    name: str
    address: str | None
    state: str  # ok | unreachable | stale | wrong node
    summary: NodeSummary | None = None
    error: str | None = None
    heartbeat_age_s: float | None = None

    @property
    def health(self) -> str:
        if self.state != "ok" or self.summary is None:
            return self.state
        return self.summary.health

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.name,
            "address": self.address,
            "reachable": self.state == "ok",
            "state": self.state,
            "health": self.health,
            "error": self.error,
            "heartbeat_age_s": self.heartbeat_age_s,
            "summary": self.summary.to_dict() if self.summary is not None else None,
        }


def row_from_reply(reply: Reply) -> FleetRow:
    target = reply.target
    if reply.ok and isinstance(reply.data, dict):
        try:
            summary = summarize(reply.data)
            name = target.name if target.name_known else summary.node  # as the agent says
            return FleetRow(name, target.url, "ok", summary)
        except (KeyError, TypeError, ValueError) as exc:
            return FleetRow(target.name, target.url, "unreachable", error=f"bad status: {exc}")
    if reply.status == 404:
        return FleetRow(target.name, target.url, "wrong node", error=reply.message())
    return FleetRow(target.name, target.url, "unreachable", error=reply.message())


def rows_from_agents(fleet: Fleet) -> list[FleetRow]:
    replies = fan_out(fleet.targets(), STATUS_PATH, options=fleet.options())
    return [row_from_reply(r) for r in replies]


def rows_from_registry(fleet: Fleet, now: float) -> tuple[list[FleetRow], list[str]]:
    assert fleet.db is not None
    with registry_reader(fleet.db, fleet.timeout) as reader:
        nodes = reader.fleet(now, stale_after=fleet.stale_after)
        limits = reader.limits()
    rows = [
        FleetRow(
            n.summary.node,
            n.address,
            "stale" if n.stale else "ok",
            n.summary,
            f"last heartbeat {age(n.heartbeat_age_s)} ago" if n.stale else None,
            n.heartbeat_age_s,
        )
        for n in nodes
    ]
    notes = []
    if limits is not None:
        notes.append(f"fleet remediation: {limits.gpus_out_of_service} GPUs out of service")
        if limits.breaker_tripped:
            notes.append(f"circuit breaker OPEN: {limits.breaker_reason}")
        for scope, why in limits.groups_open:  # a label group's (fleet/rack=r2)
            notes.append(f"circuit breaker OPEN for {scope.removeprefix('fleet/')}: {why}")
    return rows, notes


def fleet_exit_code(rows: Sequence[FleetRow]) -> int:
    """2 unreachable, else 1 a problem in service, else 3 GPUs out of service, else 0."""
    if any(r.state != "ok" or r.summary is None for r in rows):
        return EXIT_UNREACHABLE
    return max(
        (
            health_exit_code(r.health, r.summary.serving, r.summary.gpus_total)
            for r in rows
            if r.summary is not None
        ),
        key=_EXIT_RANK.__getitem__,
        default=EXIT_OK,
    )


_EXIT_RANK = {EXIT_OK: 0, EXIT_OUT_OF_SERVICE: 1, EXIT_UNHEALTHY: 2, EXIT_UNREACHABLE: 3}


def health_exit_code(health: str, in_service: int, total: int) -> int:
    """One answering node's code: 0 healthy and all in service, 3 out of service, else 1."""
    if health == "healthy":
        return EXIT_OK if in_service >= total else EXIT_OUT_OF_SERVICE
    if health == "out_of_service":
        return EXIT_OUT_OF_SERVICE
    return EXIT_UNHEALTHY


FLEET_COLUMNS = (
    Column("NODE"),
    Column("HEALTH"),
    Column("GPUS", "right"),
    Column("HOT°C", "right"),
    Column("POWER", "right"),
    Column("ALERTS c/w/i", "right"),
    Column("REMEDIATION"),
    Column("AGE", "right"),
    Column("NOTE"),
)


def render_fleet(rows: Sequence[FleetRow], notes: Sequence[str], fleet: Fleet) -> str:
    painter = fleet.painter
    cells = []
    for row in rows:
        s = row.summary
        if s is None:
            cells.append(
                [Cell(row.name), health_cell(row.state)]
                + [Cell("-")] * 6
                + [Cell(row.error or "", "red")]
            )
            continue
        gpus_style = "yellow" if s.gpus_healthy < s.gpus_total else None
        said = list(s.reasons)
        if s.serving < s.gpus_total:
            said.insert(0, f"{s.serving}/{s.gpus_total} GPUs in service")
        note = row.error or "; ".join(said)
        cells.append(
            [
                Cell(row.name),
                health_cell(row.health),
                Cell(f"{s.gpus_healthy}/{s.gpus_total}", gpus_style),
                temperature_cell(s.hottest_junction_c),
                Cell(power(s.power_w)),
                alerts_cell(s.alerts_critical, s.alerts_warning, s.alerts_info),
                Cell(s.remediation, "cyan" if s.remediation != "-" else None),
                age_cell(s.data_age_s, fleet.stale_after),
                Cell(note, "red" if row.state != "ok" else None),
            ]
        )
    lines = [render_table(FLEET_COLUMNS, cells, painter), fleet_summary(rows, painter)]
    lines.extend(painter.paint(n, "bold red" if "OPEN" in n else None) for n in notes)
    return "\n".join(lines)


def fleet_summary(rows: Sequence[FleetRow], painter: Painter) -> str:
    counts = Counter(r.health for r in rows)
    order = [
        "healthy",
        "out_of_service",
        "degraded",
        "unhealthy",
        "unknown",
        "unreachable",
        "wrong node",
        "stale",
    ]
    parts = [painter.paint(f"{counts[k]} {k}", health_cell(k).style) for k in order if counts[k]]
    total = sum(r.summary.gpus_total for r in rows if r.summary is not None)
    healthy = sum(r.summary.gpus_healthy for r in rows if r.summary is not None)
    serving = sum(r.summary.serving for r in rows if r.summary is not None)
    line = f"{len(rows)} nodes: " + ", ".join(parts) + f" · {healthy}/{total} GPUs healthy"
    return line + (f" · {serving}/{total} GPUs in service" if serving < total else "")


# --------------------------------------------------------------------------------- one node
GPU_COLUMNS = (
    Column("GPU", "right"),
    Column("HEALTH"),
    Column("HOT°C", "right"),
    Column("HBM°C", "right"),
    Column("POWER", "right"),
    Column("UTIL", "right"),
    Column("MEMORY", "right"),
    Column("ECC ue/ce", "right"),
    Column("PCIE", "right"),
    Column("XGMI", "right"),
    Column("ALERTS c/w/i", "right"),
    Column("REMEDIATION"),
    Column("AGE", "right"),
    Column("NOTE"),
)


def _gpu_row(gpu: dict[str, Any], fleet: Fleet) -> list[Cell]:
    r = gpu["readings"]
    limit = r.get("temperature_hotspot_limit_c")
    pcie = "-"
    if r.get("pcie_width") is not None:
        pcie = f"x{r['pcie_width']:.0f} {number(r.get('pcie_speed_gts'), 'GT/s')}"
        if r.get("pcie_max_width") is not None and r["pcie_width"] < r["pcie_max_width"]:
            pcie += f" (<x{r['pcie_max_width']:.0f})"
    remediation = gpu.get("remediation")
    remedy_text = (
        f"{remediation['plan']} {remediation['phase']}"
        + (" (dry-run)" if remediation.get("dry_run") else "")
        if remediation
        else "-"
    )
    ecc = f"{number(r.get('ecc_uncorrectable_total'))}/{number(r.get('ecc_correctable_total'))}"
    counts = gpu["alerts"]
    return [
        Cell(str(gpu["gpu"])),
        health_cell(gpu["health"]["state"]),
        temperature_cell(r.get("temperature_hotspot_c"), limit),
        temperature_cell(r.get("temperature_hbm_c")),
        Cell(power(r.get("power_w"))),
        Cell(_ratio(r.get("utilization_gfx"))),
        Cell(size(r.get("memory_used_bytes"))),
        Cell(ecc, "bold red" if (r.get("ecc_uncorrectable_total") or 0) > 0 else None),
        Cell(pcie, "yellow" if "(<" in pcie else None),
        Cell(number(r.get("xgmi_links_up"))),
        alerts_cell(counts["critical"], counts["warning"], counts["info"]),
        Cell(remedy_text, "cyan" if remediation else None),
        age_cell(gpu["health"]["data_age_s"], fleet.stale_after),
        Cell("; ".join(gpu["health"]["reasons"]) or (gpu.get("error") or "")),
    ]


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


_BOARD_CELLS = (2, 3, 4, 7, 8, 9)  # temperatures, power, ECC, PCIe, XGMI: partition 0's


def _physical_rows(
    physical: dict[str, Any], by_index: dict[int, dict[str, Any]], fleet: Fleet, expand: bool
) -> list[list[Cell]]:
    """One row per physical GPU: its board readings (partition 0's), the mean utilisation
    and the alerts of its partitions, the worst of their verdicts; with ``expand``, a row
    per partition under it (its own verdict, utilisation, memory, alerts)."""
    members = [by_index[i] for i in physical["partitions"] if i in by_index]
    head = by_index.get(physical["gpu"], members[0])
    row = _gpu_row(head, fleet)
    first, last = physical["partitions"][0], physical["partitions"][-1]
    row[0] = Cell(f"{physical['physical']} [{first}-{last}]")
    verdict = physical["health"]
    row[1] = health_cell(verdict["state"])
    util = [m["readings"].get("utilization_gfx") for m in members]
    known = [u for u in util if u is not None]
    row[5] = Cell(_ratio(sum(known) / len(known)) if known else "-")
    counts = [m["alerts"] for m in members]
    row[10] = alerts_cell(*(sum(c[k] for c in counts) for k in ("critical", "warning", "info")))
    row[12] = age_cell(verdict["data_age_s"], fleet.stale_after)
    row[13] = Cell("; ".join(verdict["reasons"]))
    rows = [row]
    if expand:
        for member in members:
            sub = _gpu_row(member, fleet)
            part = member.get("partition") or {}
            sub[0] = Cell(f"└ {member['gpu']} p{part.get('id', '?')}")
            for i in _BOARD_CELLS:
                sub[i] = Cell("")
            rows.append(sub)
    return rows


def render_node(status: dict[str, Any], fleet: Fleet, partitions: bool = False) -> str:
    """One node's table: a row per GPU; on a partitioned node a row per physical GPU with
    its partitions folded underneath (``partitions`` lists them)."""
    painter = fleet.painter
    physical = status.get("physical_gpus") or []
    folded = any(len(p["partitions"]) > 1 for p in physical)
    if folded:
        by_index = {g["gpu"]: g for g in status["gpus"]}
        rows = [row for p in physical for row in _physical_rows(p, by_index, fleet, partitions)]
    else:
        rows = [_gpu_row(gpu, fleet) for gpu in status["gpus"]]
    total = status["gpus_total"]
    head = (
        f"{status['node']}: "
        + painter.paint(status["health"]["state"], health_cell(status["health"]["state"]).style)
        + f" · {status['gpus_healthy']}/{total} GPUs healthy"
        + f" · {in_service(status)}/{total} GPUs in service"
        + f" · data age {age(status.get('data_age_s'))}"
        + f" · remediation {status['remediation']['mode']}"
    )
    if status["remediation"].get("pause", {}).get("paused"):
        head += " (paused)"
    lines = [head]
    if folded:
        modes = sorted(
            {
                f"{p.get('compute_partition') or '?'}+{p.get('memory_partition') or '?'}"
                for p in physical
            }
        )
        lines.append(
            f"{len(physical)} physical GPUs in {', '.join(modes)}: {total} partitions"
            + ("" if partitions else " (--partitions lists them)")
        )
    lines.append(render_table(GPU_COLUMNS, rows, painter))
    for alert in status["alerts"]["firing"]:
        where = f"gpu {alert['gpu']}" if alert["gpu"] is not None else "node"
        muted = " (silenced)" if alert.get("silenced") else ""
        summary = alert.get("summary") or ""
        text = f"  {alert['severity']:<8} {alert['rule']} [{where}]{muted}: {summary}"
        lines.append(painter.paint(text, "red" if alert["severity"] == "critical" else "yellow"))
    return "\n".join(lines)


def in_service(status: dict[str, Any]) -> int:
    """GPUs in service (every GPU, for an agent from before out_of_service)."""
    value = status.get("gpus_in_service")
    return int(status["gpus_total"] if value is None else value)


def node_exit_code(status: dict[str, Any]) -> int:
    """As ``fleet_exit_code`` for the one node that answered."""
    return health_exit_code(status["health"]["state"], in_service(status), status["gpus_total"])


# --------------------------------------------------------------------------------- command
def once(
    fleet: Fleet, node: str | None, as_json: bool, partitions: bool = False
) -> tuple[str, int]:
    """One rendering of the status and its exit code."""
    if node is not None:
        target = fleet.resolve(node)
        reply = request(
            target, "GET", STATUS_PATH, params=target.node_param(), options=fleet.options()
        )
        if not reply.ok or not isinstance(reply.data, dict):
            failure = Unreachable if not reply.reachable or reply.status == 404 else Fail
            raise failure(f"{target.name} ({target.url}): {reply.message()}")
        status = reply.data
        if as_json:
            return json.dumps(status, indent=2), node_exit_code(status)
        return render_node(status, fleet, partitions), node_exit_code(status)
    notes: list[str] = []
    if fleet.inventory is None and fleet.db is not None:
        rows, notes = rows_from_registry(fleet, time.time())
    else:
        rows = rows_from_agents(fleet)
    code = fleet_exit_code(rows)
    if as_json:
        counts = Counter(r.health for r in rows)
        document = {
            "nodes": [r.to_dict() for r in rows],
            "summary": {"nodes": len(rows), **dict(sorted(counts.items()))},
            "notes": notes,
            "exit_code": code,
        }
        return json.dumps(document, indent=2), code
    return render_fleet(rows, notes, fleet), code


@click.command("status")
@click.argument("node", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--watch", "-w", is_flag=True, help="Redraw every --interval seconds until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(0, 3600), default=5.0, show_default=True)
@click.option("--count", type=click.IntRange(1), default=None, hidden=True)
@click.option(
    "--partitions",
    "-p",
    is_flag=True,
    help="With NODE on a partitioned node: list each physical GPU's partitions under it.",
)
@fleet_options
def status_command(
    node: str | None,
    as_json: bool,
    partitions: bool,
    watch: bool,
    interval: float,
    count: int | None,
    **kw: Any,
) -> None:
    """Health of every node (or, with NODE, of each of its GPUs).

    \b
    Exit codes (the first that applies):
      2  a node is unreachable: refused, timed out, another node at its address,
         or a registry heartbeat older than --stale-after
      1  a node (or, with NODE, that node) is degraded, unhealthy or unknown
      3  every GPU in service is healthy, but GPUs are out of service
         (drained, in a remediation run, quarantined or held)
      0  every GPU is in service and healthy
    """
    fleet = make_fleet(**kw)  # the fleet_options
    if not watch:
        text, code = once(fleet, node, as_json, partitions)
        fleet.echo(text)
        sys.exit(code)
    code = EXIT_OK
    done = 0
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() and not as_json else ""
    try:
        while count is None or done < count:
            try:
                text, code = once(fleet, node, as_json, partitions)
            except Fail as exc:
                text, code = f"error: {exc.message}", exc.exit_code
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            suffix = "" if as_json else f"\n(every {interval:g}s, {stamp})"
            fleet.echo(clear + text + suffix)
            done += 1
            if count is None or done < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    sys.exit(code)
