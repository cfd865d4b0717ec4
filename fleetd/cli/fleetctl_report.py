"""``fleetctl report``: reliability KPIs and per-rule precision, for one node or the fleet.

From the agents (``NODE…`` or ``--inventory``: ``GET /api/v1/report`` of each, at once) or
from the registry (``--db``: every agent's last published summary, one query). The fleet
figures are the nodes' combined: counts add up, means are weighted by their counts, and a
rule's precision is recomputed from its summed runs. Exit codes: 0 every node reported, 2 some
node did not answer or its summary is stale.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from fleetd.cli.fleetctl_commands import _fleet, parse_duration
from fleetd.cli.fleetctl_context import (
    EXIT_OK,
    EXIT_UNREACHABLE,
    Fleet,
    fleet_options,
    registry_reader,
)
from fleetd.cli.fleetctl_fleet import _need_db
from fleetd.cli.fleetctl_http import fan_out
from fleetd.cli.fleetctl_render import Cell, Column, age, clock, render_table
from fleetd.remedy.kpi_labels import STAGES

REPORT_PATH = "/api/v1/report"


# ------------------------------------------------------------------------------- combining
@dataclass
class _Mean:
    count: int = 0
    total: float = 0.0
    max_s: float | None = None

    def add(self, count: int, mean: float | None, max_s: float | None = None) -> None:
        if not count or mean is None:
            return
        self.count += count
        self.total += count * mean
        if max_s is not None:
            self.max_s = max_s if self.max_s is None else max(self.max_s, max_s)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "mean_s": self.mean, "max_s": self.max_s}


@dataclass
class _Rule:
    modes: set[str] = field(default_factory=set)
    plan: str | None = None
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def precision(self) -> float | None:
        judged = self.counts["fault_found"] + self.counts["nothing_found"]
        if not judged:
            return None
        confirmed = self.counts["fault_found"] + min(
            self.counts["recurred"], self.counts["nothing_found"]
        )
        return confirmed / judged


_RULE_COUNTS = (
    "runs",
    "fault_found",
    "nothing_found",
    "recurred",
    "fired",
    "resolved_without_action",
    "shadow_fired",
)


def combine(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fleet's figures from each node's report summary (``Report.summary()``)."""
    repair: dict[str, _Mean] = defaultdict(_Mean)
    stages: dict[str, _Mean] = defaultdict(_Mean)
    readmission = _Mean()
    succeeded = failed = 0
    hours = 0.0
    rules: dict[str, _Rule] = defaultdict(_Rule)
    gpus: list[dict[str, Any]] = []
    incidents = 0
    windows = set()
    for s in summaries:
        windows.add(s.get("window_s"))
        for kind, spread in (s.get("time_to_repair") or {}).items():
            repair[kind].add(spread.get("count", 0), spread.get("mean_s"), spread.get("max_s"))
        success = s.get("success") or {}
        succeeded += int(success.get("succeeded") or 0)
        failed += int(success.get("failed") or 0)
        readm = s.get("readmission") or {}
        runs = int(readm.get("runs") or 0)
        readmission.add(runs, readm.get("mean_s"))
        for stage, mean in (readm.get("stages") or {}).items():
            stages[stage].add(runs, mean)
        hours += float(s.get("gpu_hours_out_of_service") or 0.0)
        for g in (s.get("incidents") or {}).get("gpus") or []:
            incidents += int(g.get("incidents") or 0)
            if g.get("incidents"):
                gpus.append({"node": s.get("node"), **g})
        for r in s.get("rules") or []:
            rule = rules[str(r.get("rule"))]
            rule.modes.add(str(r.get("mode")))
            rule.plan = rule.plan or r.get("plan")
            for key in _RULE_COUNTS:
                rule.counts[key] += int(r.get(key) or 0)
    gpus.sort(key=lambda g: (-int(g["incidents"]), str(g["node"]), g.get("gpu") or 0))
    total = succeeded + failed
    return {
        "nodes": len(summaries),
        "window_s": sorted(w for w in windows if w is not None),
        "time_to_repair": {k: repair[k].to_dict() for k in ("automatic", "manual")},
        "success": {
            "succeeded": succeeded,
            "failed": failed,
            "ratio": succeeded / total if total else None,
        },
        "readmission": {
            "runs": readmission.count,
            "mean_s": readmission.mean,
            "stages": {st: stages[st].mean for st in STAGES if st in stages},
        },
        "incidents": {"total": incidents, "gpus": gpus[:20]},
        "gpu_hours_out_of_service": hours,
        "rules": [
            {
                "rule": name,
                "mode": "/".join(sorted(r.modes)),
                "plan": r.plan,
                **{k: r.counts[k] for k in _RULE_COUNTS},
                "precision": r.precision,
            }
            for name, r in sorted(rules.items())
        ],
    }


# ------------------------------------------------------------------------------- reading
@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    summary: Mapping[str, Any] | None
    at: float | None = None
    error: str | None = None


def from_agents(fleet: Fleet, nodes: Sequence[str], window: float | None) -> list[NodeReport]:
    targets = [fleet.resolve(n) for n in nodes] if nodes else fleet.targets()
    params = {"window": f"{window:g}"} if window is not None else None
    out = []
    for reply in fan_out(targets, REPORT_PATH, params=params, options=fleet.options()):
        name = reply.node
        if reply.ok and isinstance(reply.data, dict):
            out.append(NodeReport(name, reply.data, reply.data.get("at")))
        else:
            out.append(NodeReport(name, None, error=reply.message()))
    return out


def from_registry(fleet: Fleet, nodes: Sequence[str], now: float) -> list[NodeReport]:
    """Every agent's last published summary, in one query; stale ones say so."""
    from fleetd.registry.report_reader import read_reports

    with registry_reader(_need_db(fleet, "the fleet report"), fleet.timeout) as reader:
        rows = read_reports(reader, nodes=frozenset(nodes))
    out = []
    for row in rows:
        stale = now - row.at > fleet.stale_after
        error = f"stale: published {age(now - row.at)} ago" if stale else None
        out.append(NodeReport(row.node, row.summary, row.at, error))
    for name in sorted(set(nodes) - {r.node for r in rows}):
        out.append(NodeReport(name, None, error="no KPI report in the registry"))
    return out


# ------------------------------------------------------------------------------- showing
def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s" if value < 10 else f"{value:.0f}s"
    return age(value)


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


NODE_COLUMNS = (
    Column("NODE"),
    Column("OK", "right"),
    Column("FAILED", "right"),
    Column("SUCCESS", "right"),
    Column("TTR AUTO", "right"),
    Column("TTR MANUAL", "right"),
    Column("READMIT", "right"),
    Column("GPU-H OUT", "right"),
    Column("INCIDENTS", "right"),
    Column("AS OF"),
)
RULE_COLUMNS = (
    Column("RULE"),
    Column("MODE"),
    Column("RUNS", "right"),
    Column("FAULT", "right"),
    Column("NOTHING", "right"),
    Column("RECURRED", "right"),
    Column("PRECISION", "right"),
    Column("FIRED", "right"),
    Column("NO ACTION", "right"),
    Column("SHADOW", "right"),
)


def _headline(figures: Mapping[str, Any]) -> list[str]:
    success = figures["success"]
    ttr = figures["time_to_repair"]
    readm = figures["readmission"]

    def ttr_text(kind: str) -> str:
        t = ttr.get(kind) or {}
        if not t.get("count"):
            return f"{kind} none"
        return f"{kind} {seconds(t['mean_s'])} (n={t['count']}, max {seconds(t['max_s'])})"

    stages = ", ".join(
        f"{st.replace('_', ' ')} {seconds(readm['stages'].get(st))}" for st in STAGES
    )
    return [
        f"runs: {success['succeeded']} succeeded, {success['failed']} failed "
        f"(success {ratio(success['ratio'])}); GPU-hours out of service: "
        f"{figures['gpu_hours_out_of_service']:.2f}",
        f"time to repair: {ttr_text('automatic')}; {ttr_text('manual')}",
        f"re-admission by stage (mean of {readm['runs']} successful runs): {stages}; "
        f"total {seconds(readm['mean_s'])}",
    ]


def _rule_rows(rules: Iterable[Mapping[str, Any]]) -> list[list[Cell]]:
    styles = {"shadow": "magenta", "alert": "yellow", "remediate": "green"}
    return [
        [
            Cell(r["rule"]),
            Cell(r["mode"], styles.get(r["mode"])),
            *(Cell(str(r[k])) for k in ("runs", "fault_found", "nothing_found", "recurred")),
            Cell(ratio(r.get("precision"))),
            *(Cell(str(r[k])) for k in ("fired", "resolved_without_action", "shadow_fired")),
        ]
        for r in rules
        if any(r.get(k) for k in _RULE_COUNTS) or r["mode"] == "shadow"
    ]


def _node_row(n: NodeReport) -> list[Cell]:
    s = n.summary or {}
    if not s:
        return [Cell(n.node), *(Cell("-") for _ in range(8)), Cell(n.error or "", "bold red")]
    ttr = s.get("time_to_repair") or {}
    success = s.get("success") or {}
    incidents = sum(
        int(g.get("incidents") or 0) for g in (s.get("incidents") or {}).get("gpus", [])
    )
    when = clock(n.at) + (f" ({n.error})" if n.error else "")
    return [
        Cell(n.node),
        Cell(str(success.get("succeeded", 0))),
        Cell(str(success.get("failed", 0)), "bold red" if success.get("failed") else None),
        Cell(ratio(success.get("ratio"))),
        Cell(seconds((ttr.get("automatic") or {}).get("mean_s"))),
        Cell(seconds((ttr.get("manual") or {}).get("mean_s"))),
        Cell(seconds((s.get("readmission") or {}).get("mean_s"))),
        Cell(f"{float(s.get('gpu_hours_out_of_service') or 0):.2f}"),
        Cell(str(incidents)),
        Cell(when, "bold magenta" if n.error else None),
    ]


def _rank(n: NodeReport) -> tuple[int, int, float, int, str]:
    """Nodes that need a look first: no answer, failed runs, GPU-hours out, incidents."""
    s = n.summary or {}
    failed = int((s.get("success") or {}).get("failed") or 0)
    hours = float(s.get("gpu_hours_out_of_service") or 0.0)
    gpus = (s.get("incidents") or {}).get("gpus") or []
    incidents = sum(int(g.get("incidents") or 0) for g in gpus)
    return (0 if n.error else 1, -failed, -hours, -incidents, n.node)


def render(reports: Sequence[NodeReport], fleet: Fleet, *, source: str, show: int = 20) -> str:
    paint = fleet.painter.paint
    summaries = [r.summary for r in reports if r.summary is not None]
    figures = combine(summaries)
    windows = ", ".join(seconds(w) for w in figures["window_s"]) or "-"
    lines = [
        paint(
            f"reliability of {figures['nodes']} of {len(reports)} nodes "
            f"(window {windows}; from {source})",
            "bold",
        ),
        *_headline(figures),
        "",
        render_table(
            NODE_COLUMNS, [_node_row(r) for r in sorted(reports, key=_rank)[:show]], fleet.painter
        ),
    ]
    if len(reports) > show:
        lines.append(f"… and {len(reports) - show} more nodes (--show N lists more)")
    rows = _rule_rows(figures["rules"])
    if rows:
        lines += ["", paint("rules: what their firings led to (precision)", "bold")]
        lines.append(render_table(RULE_COLUMNS, rows, fleet.painter))
    repeat = [g for g in figures["incidents"]["gpus"] if int(g["incidents"]) > 1]
    if repeat:
        lines += ["", paint("GPUs with repeated incidents", "bold")]
        for g in repeat[:10]:
            lines.append(
                f"  {g['node']} GPU {g.get('gpu')} (serial {g.get('serial') or '-'}): "
                f"{g['incidents']} incidents, every {seconds(g.get('mean_between_s'))} on average"
            )
    if len(reports) == 1 and reports[0].summary is not None:
        lines += _runs(reports[0].summary)
    return "\n".join(lines)


def _runs(summary: Mapping[str, Any]) -> list[str]:
    runs = summary.get("runs") or []
    if not runs:
        return []
    out = ["", "recent runs (stage seconds)"]
    for r in runs[:10]:
        dry = " dry-run" if r.get("dry_run") else ""
        stages = " ".join(f"{k}={seconds(v)}" for k, v in (r.get("stages") or {}).items())
        repair = f" repair {r['repair']} in {seconds(r.get('repair_s'))}" if r.get("repair") else ""
        verdict = f" {r['verdict']}" if r.get("verdict") else ""
        again = " recurred" if r.get("recurred") else ""
        out.append(
            f"  {clock(r['trigger_at'])} {r['run_id']} {r['plan']}{dry} {r['state']}"
            f"{repair}{verdict}{again}" + (f": {stages}" if stages else "")
        )
    return out


@click.command("report")
@click.argument("nodes", nargs=-1)
@click.option(
    "--window",
    default=None,
    help="Another window than each agent's remediation.kpi_window (e.g. 24h, 30d); agents "
    "only: the registry holds what each agent last published.",
)
@click.option(
    "--show",
    type=click.IntRange(1, 1_000_000),
    default=20,
    show_default=True,
    help="Nodes listed (those that need a look first: no answer, failed runs, GPU-hours out).",
)
@click.option("--json", "as_json", is_flag=True)
@fleet_options
def report_command(
    nodes: tuple[str, ...], window: str | None, show: int, as_json: bool, **kw: Any
) -> None:
    """Reliability KPIs and rule precision: time to repair (automatic, manual), success rate,
    re-admission time by stage, incidents per GPU and hive, GPU-hours out of service, and what
    each rule's firings led to — for NODE…, the inventory, or the registry (--db, one query).

    Exit 0: every node reported; 2: some node did not answer or its summary is stale."""
    fleet = _fleet(kw)
    now = time.time()
    if fleet.inventory is None and fleet.db is not None:
        source = "the registry"
        if window is not None:
            raise click.UsageError("--window asks the agents: not with the registry (--db)")
        reports = from_registry(fleet, nodes, now)
    else:
        source = "the agents"
        reports = from_agents(fleet, nodes, parse_duration(window) if window else None)
    code = EXIT_UNREACHABLE if any(r.error for r in reports) else EXIT_OK
    if as_json:
        summaries = [r.summary for r in reports if r.summary is not None]
        click.echo(
            json.dumps(
                {
                    "source": "registry" if source == "the registry" else "agents",
                    "fleet": combine(summaries),
                    "nodes": [
                        {"node": r.node, "at": r.at, "error": r.error, "report": r.summary}
                        for r in reports
                    ],
                },
                indent=2 if len(reports) <= 50 else None,  # 10,000 nodes: one line, fast
            )
        )
        raise SystemExit(code)
    fleet.echo(render(reports, fleet, source=source, show=show))
    raise SystemExit(code)
