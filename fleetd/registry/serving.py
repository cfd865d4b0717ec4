"""The fleet's serving figures: each agent's recent per-worker decode figures, for gray failure.

Each heartbeat replaces this node's rows of ``fleet_serving`` (one per vLLM worker and model,
at most ``MAX_ROWS_PER_NODE``) and reads the fresh rows of the other nodes of its SKU serving
the same models: one delete, one insert, one indexed select. The comparison itself is pure and
lives with the node-local one (``fleetd.vllm.fleet``); this module only moves rows.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from sqlalchemy import Column, Engine, Float, Index, String, Table, Text, select

from fleetd.registry.store import REGISTRY_METADATA, registry_errors
from fleetd.store.rows import finite
from fleetd.vllm.fleet import ServingFigure

MAX_ROWS_PER_NODE = 64
"""A node publishes at most this many rows (workers × models): the table stays bounded at
nodes × 64 rows, whatever a misconfigured node serves."""

serving_table = Table(
    "fleet_serving",
    REGISTRY_METADATA,
    Column("node", String(255), primary_key=True),
    Column("worker", String(255), primary_key=True),
    Column("model", String(255), primary_key=True),
    Column("sku", String(64), nullable=False),
    Column("hive", String(64), nullable=False),
    Column("gpus", Text, nullable=False),  # JSON list of GPU indexes
    Column("at", Float(precision=53), nullable=False),  # the agent's clock, like heartbeat_at
    Column("per_token_s", Float, nullable=True),
    Column("tokens_per_joule", Float, nullable=True),
    Column("clock_hz", Float, nullable=True),
    Column("throttle", Float, nullable=True),
    Column("batch", Float, nullable=True),
    Index("ix_fleet_serving_sku_model", "sku", "model", "at"),
)


def publish_serving(engine: Engine, node: str, figures: Sequence[ServingFigure]) -> None:
    """Replace ``node``'s rows with ``figures`` (the first ``MAX_ROWS_PER_NODE``), each
    stamped with the time its figures were taken (none: the node's rows are removed)."""
    rows = [
        {
            "node": node,
            "worker": f.worker,
            "model": f.model,
            "sku": f.sku,
            "hive": f.hive,
            "gpus": json.dumps(list(f.gpus)),
            "at": f.at,
            "per_token_s": finite(f.per_token_s),
            "tokens_per_joule": finite(f.tokens_per_joule),
            "clock_hz": finite(f.clock_hz),
            "throttle": finite(f.throttle),
            "batch": finite(f.batch),
        }
        for f in figures[:MAX_ROWS_PER_NODE]
    ]
    with registry_errors("publish serving figures"), engine.begin() as conn:
        conn.execute(serving_table.delete().where(serving_table.c.node == node))
        if rows:
            conn.execute(serving_table.insert(), rows)


def read_peers(
    engine: Engine, *, sku: str, models: Collection[str], since: float, exclude: str
) -> list[ServingFigure]:
    """The other nodes' rows of ``sku`` serving one of ``models``, published since ``since``."""
    if not models:
        return []
    t = serving_table
    stmt = select(t).where(
        t.c.sku == sku, t.c.model.in_(sorted(models)), t.c.at >= since, t.c.node != exclude
    )
    with registry_errors("read serving figures"), engine.connect() as conn:
        rows = conn.execute(stmt).mappings().all()
    out = []
    for r in rows:
        try:
            gpus = tuple(int(g) for g in json.loads(r["gpus"]))
        except (ValueError, TypeError):  # a row no fleetd wrote: not anyone's peer
            continue
        out.append(
            ServingFigure(
                node=r["node"], hive=r["hive"], worker=r["worker"], model=r["model"],
                sku=r["sku"], gpus=gpus, at=float(r["at"]), per_token_s=r["per_token_s"],
                tokens_per_joule=r["tokens_per_joule"], clock_hz=r["clock_hz"],
                throttle=r["throttle"], batch=r["batch"],
            )
        )  # fmt: skip
    return out
