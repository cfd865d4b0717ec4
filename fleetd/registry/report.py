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
from typing import Any

from sqlalchemy import Column, Engine, Float, Integer, String, Table, Text

from fleetd.registry.report_reader import REPORTS_TABLE
from fleetd.registry.store import REGISTRY_METADATA, registry_errors
from fleetd.store.upsert import upsert

MAX_SUMMARY_BYTES = 256 * 1024
"""A summary larger than this (thousands of rules) is published without its rule list."""

reports_table = Table(
    REPORTS_TABLE,
    REGISTRY_METADATA,
    Column("node", String(255), primary_key=True),
    Column("at", Float(precision=53), nullable=False),  # the agent's clock, like heartbeat_at
    Column("window_s", Float, nullable=False),
    Column("succeeded", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("gpu_hours_out", Float, nullable=False),
    Column("summary", Text, nullable=False),  # JSON: Report.summary()
)


def _clean(value: Any) -> Any:
    """JSON without NaN or infinities (PostgreSQL's json and other readers refuse them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def report_row(summary: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The row (less its ``node``) a summary is published as."""
    data = _clean(dict(summary))
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_SUMMARY_BYTES:
        data["rules"] = []
        data["rules_left_out"] = "the rule list exceeded the registry's size cap"
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    success = data.get("success") or {}
    return {
        "at": now,
        "window_s": float(data.get("window_s") or 0.0),
        "succeeded": int(success.get("succeeded") or 0),
        "failed": int(success.get("failed") or 0),
        "gpu_hours_out": float(data.get("gpu_hours_out_of_service") or 0.0),
        "summary": text,
    }


def publish_report(engine: Engine, node: str, summary: Mapping[str, Any], now: float) -> None:
    """Upsert ``node``'s KPI summary as of ``now``."""
    row = report_row(summary, now)
    with registry_errors("publish the KPI report"), engine.begin() as conn:
        upsert(conn, reports_table, {"node": node}, row)
