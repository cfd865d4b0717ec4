"""Reading the fleet's KPI summaries (``fleet_reports``, written by ``fleetd.registry.report``)
for ``fleetctl report --db``: one query through ``RegistryReader``, no SQLAlchemy import."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetd.registry.reader import RegistryError, RegistryReader

REPORTS_TABLE = "fleet_reports"


@dataclass(frozen=True, slots=True)
class StoredReport:
    node: str
    at: float
    summary: Mapping[str, Any]


def read_reports(
    reader: RegistryReader, *, nodes: frozenset[str] = frozenset()
) -> list[StoredReport]:
    """Every node's last summary (or those of ``nodes``), by node name, in one query; an
    empty list when no agent has published one yet (no table)."""
    where = ""
    params: tuple[str, ...] = ()
    if nodes:  # bound parameters, never names in the SQL text
        where = f" WHERE node IN ({', '.join('?' for _ in nodes)})"
        params = tuple(sorted(nodes))
    sql = f"SELECT node, at, summary FROM {REPORTS_TABLE}{where} ORDER BY node"
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
            out.append(StoredReport(str(node), float(at), summary))
    return out
