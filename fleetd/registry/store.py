"""The fleet registry in PostgreSQL: one row per node, upserted by each agent's heartbeat.

Agents write (``RegistryPublisher.publish``, here); fleetctl reads
(``fleetd.registry.reader.RegistryReader``): the whole fleet is one scan of one table, so
10,000 nodes answer in well under a second without contacting any of them. A node's row
carries the time of its heartbeat on the agent's clock; a reader judges staleness against its
own ``now`` (fleet clocks are kept by NTP).

The registry has its own MetaData: it is a shared database, not a node's local store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    inspect,
    literal,
    select,
    union_all,
)
from sqlalchemy.engine.interfaces import ReflectedColumn
from sqlalchemy.exc import SQLAlchemyError

from fleetd.logs import get_logger
from fleetd.registry.drift import COMPONENTS, NodeVersions
from fleetd.registry.reader import RegistryError, describe_error
from fleetd.registry.summary import NodeSummary, summarize
from fleetd.store.db import engine_url
from fleetd.store.upsert import upsert

log = get_logger("registry")

REGISTRY_METADATA = MetaData()

nodes_table = Table(
    "fleet_nodes",
    REGISTRY_METADATA,
    Column("node", String(255), primary_key=True),
    Column("address", String(512), nullable=True),
    Column("heartbeat_at", Float(precision=53), nullable=False),
    Column("health", String(16), nullable=False),
    Column("gpus_total", Integer, nullable=False),
    Column("gpus_healthy", Integer, nullable=False),
    Column("hottest_junction_c", Float, nullable=True),
    Column("power_w", Float, nullable=True),
    Column("alerts_critical", Integer, nullable=False),
    Column("alerts_warning", Integer, nullable=False),
    Column("alerts_info", Integer, nullable=False),
    Column("remediation", String(512), nullable=False),
    Column("remediation_active", Boolean, nullable=False),
    Column("data_age_s", Float, nullable=True),
    Column("reasons", Text, nullable=False),  # JSON list
    Column("version", String(64), nullable=False),
    # added after the first release: nullable, and added to an older table by ensure_schema
    Column("gpus_in_service", Integer, nullable=True),
    Column("labels", Text, nullable=True),  # JSON object: the node's node.labels
    # drift (fleetd.registry.drift): the SKU and what the node runs; None when unreadable
    Column("sku", String(64), nullable=True),
    Column("driver_version", String(128), nullable=True),
    Column("amdsmi_version", String(128), nullable=True),
    Column("vbios_version", String(255), nullable=True),
    Column("firmware_version", Text, nullable=True),  # every block: VARCHAR(255) before
    Column("partition_layout", String(128), nullable=True),
    Column("alerts_firing", Text, nullable=True),  # JSON list: fleetctl alerts --db
    # fleet caps per label group (fleetd.remedy.caps): physical GPUs (a partitioned node's 64
    # devices are 8), and the caps the node's own fleetd.yaml sets (JSON list)
    Column("gpus_physical", Integer, nullable=True),
    Column("caps", Text, nullable=True),
    Index("ix_fleet_nodes_heartbeat", "heartbeat_at"),
    Index("ix_fleet_nodes_sku", "sku"),
)


silences_table = Table(  # fleet silences: fleetd.registry.silences
    "fleet_silences",
    REGISTRY_METADATA,
    Column("id", String(36), primary_key=True),
    Column("node_matchers", Text, nullable=False),  # JSON list of matcher text
    Column("matchers", Text, nullable=False),  # JSON list of matcher text
    Column("starts_at", Float(precision=53), nullable=False),
    Column("ends_at", Float(precision=53), nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
    Column("updated_at", Float(precision=53), nullable=False),
    Index("ix_fleet_silences_ends", "ends_at"),
)

acks_table = Table(  # fleet acknowledgements: fleetd.registry.silences
    "fleet_acks",
    REGISTRY_METADATA,
    Column("id", String(36), primary_key=True),
    Column("node_matchers", Text, nullable=False),  # JSON list of matcher text
    Column("matchers", Text, nullable=False),  # JSON list of matcher text
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
    Index("ix_fleet_acks_created", "created_at"),
)

modes_table = Table(  # remediation modes per label group (waves): fleetd.registry.modes
    "fleet_remediation_modes",
    REGISTRY_METADATA,
    Column("id", String(36), primary_key=True),
    Column("node_matchers", Text, nullable=False),  # JSON list of matcher text
    Column("mode", String(16), nullable=False),  # off | dry-run | on | local
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Float(precision=53), nullable=False),
)

audit_table = Table(
    "fleet_audit",
    REGISTRY_METADATA,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", Float(precision=53), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("action", String(16), nullable=False),  # add | expire | ack | mode
    Column("subject", String(255), nullable=False),  # silence id, or ack id
    Column("detail", Text, nullable=False),  # JSON: matchers, ends_at, comment
)


@contextmanager
def registry_errors(doing: str) -> Iterator[None]:
    """A database error inside becomes ``RegistryError("cannot <doing>: <reason>")``."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise RegistryError(f"cannot {doing}: {describe_error(exc)}") from None


def _engine(url: str, timeout: float) -> Engine:
    url = engine_url(url)
    try:
        if url.startswith("postgresql"):
            return create_engine(
                url,
                pool_pre_ping=True,
                pool_size=1,
                max_overflow=1,
                connect_args={"connect_timeout": max(1, round(timeout))},
            )
        return create_engine(url)
    except Exception as exc:  # a malformed URL or a missing driver
        raise RegistryError(f"cannot use the registry URL: {describe_error(exc)}") from None


class RegistryPublisher:
    """Publishes this node's row; the daemon's heartbeat job calls ``publish``.

    Args:
        url: SQLAlchemy URL of the shared PostgreSQL (SQLite works for a single host).
        address: how fleetctl reaches this agent's API (``http://node:9477``).
    """

    def __init__(self, url: str, *, address: str | None = None, timeout: float = 5.0) -> None:
        self._engine = _engine(url, timeout)
        self._address = address
        self._ready = False

    def ensure_schema(self) -> None:
        """Create the registry table if it is not there (idempotent, safe to race)."""
        try:
            REGISTRY_METADATA.create_all(self._engine, checkfirst=True)
        except SQLAlchemyError as exc:
            # two agents creating the table at once: the loser finds it there
            if not self._has_table():
                raise RegistryError(
                    f"cannot create the registry table: {describe_error(exc)}"
                ) from None
        self._add_missing_columns()
        self._widen_columns()
        self._add_missing_indexes()
        self._ready = True

    def _widen_columns(self) -> None:
        """``firmware_version`` holds every firmware block since fleetd read them: TEXT, not
        the VARCHAR(255) an older fleetd created (PostgreSQL enforces the length; SQLite
        does not). Cheap and idempotent: no rewrite from VARCHAR to TEXT."""
        if self._engine.dialect.name != "postgresql":
            return
        kind = {c["name"]: c["type"] for c in self._columns()}.get("firmware_version")
        if kind is None or getattr(kind, "length", None) is None:
            return
        ddl = f"ALTER TABLE {nodes_table.name} ALTER COLUMN firmware_version TYPE TEXT"
        with (
            registry_errors("widen firmware_version in the registry table"),
            self._engine.begin() as conn,
        ):
            conn.exec_driver_sql(ddl)

    def _add_missing_indexes(self) -> None:
        """Indexes a newer fleetd declares on a table an older one created (``sku``, which
        each heartbeat's drift query selects by). Best effort: without the privilege the
        queries are slower, never wrong."""
        for index in nodes_table.indexes:
            try:
                index.create(self._engine, checkfirst=True)
            except SQLAlchemyError as exc:
                log.info("registry_index_not_created", index=index.name, error=describe_error(exc))

    def _add_missing_columns(self) -> None:
        """Columns a newer fleetd added to a table an older one created (all nullable, so
        older agents' rows and inserts stay valid). Safe to race: PostgreSQL's ``IF NOT
        EXISTS``; on SQLite (one host) a loser finds the column there."""
        present = {c["name"] for c in self._columns()}
        guard = "IF NOT EXISTS " if self._engine.dialect.name == "postgresql" else ""
        for column in nodes_table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=self._engine.dialect)
            ddl = f"ALTER TABLE {nodes_table.name} ADD COLUMN {guard}{column.name} {kind}"
            try:
                with self._engine.begin() as conn:
                    conn.exec_driver_sql(ddl)
            except SQLAlchemyError as exc:
                columns = inspect(self._engine).get_columns(nodes_table.name)
                if column.name not in {c["name"] for c in columns}:
                    raise RegistryError(
                        f"cannot add {column.name} to the registry table: {describe_error(exc)}"
                    ) from None

    def _columns(self) -> list[ReflectedColumn]:
        """The columns the registry table has in the database."""
        with registry_errors("read the registry table"):
            return inspect(self._engine).get_columns(nodes_table.name)

    def _has_table(self) -> bool:
        try:
            return inspect(self._engine).has_table(nodes_table.name)
        except SQLAlchemyError:
            return False

    @property
    def engine(self) -> Engine:
        return self._engine

    def publish(
        self,
        status: Mapping[str, Any],
        now: float,
        *,
        versions: NodeVersions | None = None,
        alerts: Sequence[Mapping[str, Any]] | None = None,
        caps: Sequence[Mapping[str, Any]] | None = None,
    ) -> NodeSummary:
        """Upsert the row of the node ``status`` describes, as of ``now``; returns the row.

        ``versions`` (drift), ``alerts`` (the firing alerts, for ``fleetctl alerts``) and
        ``caps`` (the fleet caps its fleetd.yaml sets, for the wave check) are written when
        given."""
        if not self._ready:
            self.ensure_schema()
        summary = summarize(status)
        row = summary_row(summary, now, self._address)
        if versions is not None:
            row.update(version_columns(versions))
        if alerts is not None:
            row["alerts_firing"] = json.dumps(list(alerts), sort_keys=True)
        if caps is not None:
            row["caps"] = json.dumps(list(caps), sort_keys=True)
        key = {"node": row.pop("node")}
        with registry_errors("publish to the registry"), self._engine.begin() as conn:
            upsert(conn, nodes_table, key, row)
        return summary

    def group_counts(self, sku: str, since: float) -> dict[str, dict[str, int]]:
        """How many fresh nodes of ``sku`` run each version, per component: one query."""
        t = nodes_table
        parts = []
        for component, column in COMPONENTS.items():
            col = t.c[column]
            parts.append(
                select(literal(component).label("component"), col.label("value"), func.count())
                .where(t.c.sku == sku, t.c.heartbeat_at >= since, col.is_not(None))
                .group_by(col)
            )
        out: dict[str, dict[str, int]] = {c: {} for c in COMPONENTS}
        with registry_errors("read the registry"), self._engine.connect() as conn:
            for component, value, count in conn.execute(union_all(*parts)):
                out[str(component)][str(value)] = int(count)
        return out

    def forget(self, node: str) -> None:
        """Remove a decommissioned node's row."""
        with self._engine.begin() as conn:
            conn.execute(nodes_table.delete().where(nodes_table.c.node == node))

    def close(self) -> None:
        self._engine.dispose()


def version_columns(versions: NodeVersions) -> dict[str, Any]:
    """The drift columns of a node's row."""
    row: dict[str, Any] = {"sku": versions.sku, "gpus_physical": versions.gpus_physical}
    for component, column in COMPONENTS.items():
        if component != "fleetd":  # ``version`` comes from the status document
            row[column] = versions.get(component)
    return row


def summary_row(summary: NodeSummary, now: float, address: str | None) -> dict[str, Any]:
    row = summary.to_dict()
    row["reasons"] = json.dumps(list(summary.reasons))
    row["labels"] = json.dumps(dict(summary.labels), sort_keys=True)
    row["heartbeat_at"] = now
    row["address"] = address
    return row
