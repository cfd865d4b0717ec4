"""Each agent's reliability KPI summary in the registry, for ``fleetctl report --db``.

The heartbeat upserts one row per node into ``fleet_reports`` (the summary of
``fleetd.remedy.kpi.Report``: time to repair, success, stage means, incidents, GPU-hours,
each rule's precision — no per-run list, a few KB at most); ``read_reports`` reads every
node's row in one query, so 10,000 nodes answer without contacting any of them. A few
headline figures are columns too, for SQL without JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Engine, Float, Integer, String, Table, Text
from sqlalchemy.exc import SQLAlchemyError

from fleetd.registry.reader import RegistryError, RegistryReader, describe_error
from fleetd.registry.store import REGISTRY_METADATA
from fleetd.store.upsert import upsert

MAX_SUMMARY_BYTES = 256 * 1024
"""A summary larger than this (thousands of rules) is published without its rule list."""

reports_table = Table(
    "fleet_reports",
    REGISTRY_METADATA,
    Column("node", String(255), primary_key=True),
    Column("at", Float(precision=53), nullable=False),  # the agent's clock, like heartbeat_at
    Column("window_s", Float, nullable=False),
    Column("succeeded", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("gpu_hours_out", Float, nullable=False),
    Column("summary", Text, nullable=False),  # JSON: Report.summary()
)


@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    at: float
    summary: Mapping[str, Any]


def _clean(value: Any) -> Any:
    """JSON without NaN or infinities (PostgreSQL's json and other readers refuse them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def publish_report(engine: Engine, node: str, summary: Mapping[str, Any], now: float) -> None:
    """Upsert ``node``'s KPI summary as of ``now``."""
    data = _clean(dict(summary))
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_SUMMARY_BYTES:
        data["rules"] = []
        data["rules_left_out"] = "the rule list exceeded the registry's size cap"
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    success = data.get("success") or {}
    row = {
        "at": now,
        "window_s": float(data.get("window_s") or 0.0),
        "succeeded": int(success.get("succeeded") or 0),
        "failed": int(success.get("failed") or 0),
        "gpu_hours_out": float(data.get("gpu_hours_out_of_service") or 0.0),
        "summary": text,
    }
    try:
        with engine.begin() as conn:
            upsert(conn, reports_table, {"node": node}, row)
    except SQLAlchemyError as exc:
        raise RegistryError(f"cannot publish the KPI report: {describe_error(exc)}") from None


def read_reports(
    reader: RegistryReader, *, nodes: frozenset[str] = frozenset()
) -> list[NodeReport]:
    """Every node's last summary (or those of ``nodes``), by node name, in one query; an
    empty list when no agent has published one yet (no table)."""
    where = ""
    params: tuple[str, ...] = ()
    if nodes:  # bound parameters, never names in the SQL text
        where = f" WHERE node IN ({', '.join('?' for _ in nodes)})"
        params = tuple(sorted(nodes))
    sql = f"SELECT node, at, summary FROM {reports_table.name}{where} ORDER BY node"
    try:
        _names, rows = reader.query(sql, params)
    except RegistryError as exc:
        if "fleet_reports" in str(exc):  # the table is created by the first publishing agent
            return []
        raise
    out = []
    for node, at, text in rows:
        try:
            summary = json.loads(text)
        except ValueError:  # a row no fleetd wrote
            continue
        if isinstance(summary, dict):
            out.append(NodeReport(str(node), float(at), summary))
    return out
