"""fleetctl's read side of the fleet registry: the whole fleet in one query, fast to start.

``fleetctl status --db`` is a command people run by hand and scripts run every few seconds,
so it talks to PostgreSQL through psycopg2 directly (no ORM import at start-up); other
databases (a SQLite registry for a single host) go through SQLAlchemy. Staleness is judged
against the ``now`` the caller passes. The fleet-wide remediation cap and circuit breaker
live in the same database, in the tables ``fleetd.remedy.lease`` creates; the reader shows
them when they are there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from fleetd.errors import FleetdError
from fleetd.registry.drift import COMPONENTS, NodeVersions
from fleetd.registry.summary import NodeSummary

NODES_TABLE = "fleet_nodes"
NODE_COLUMNS = (
    "node", "health", "gpus_total", "gpus_healthy", "hottest_junction_c", "power_w",
    "alerts_critical", "alerts_warning", "alerts_info", "remediation", "remediation_active",
    "data_age_s", "reasons", "version", "address", "heartbeat_at", "gpus_in_service", "labels",
    "sku", "driver_version", "amdsmi_version", "vbios_version", "firmware_version",
    "partition_layout", "alerts_firing", "gpus_physical", "caps",
)  # fmt: skip
"""The columns of the fleet table this reader knows (it reads them by name: a table from an
older fleetd may lack the later ones)."""
# fleetd.remedy.lease keeps the fleet-wide cap and breaker in these tables (declared in
# fleetd.remedy.journal; named here so fleetctl does not load remediation to show two numbers)
LEASES_TABLE = "remedy_fleet_leases"
BREAKER_TABLE = "remedy_fleet_breaker"


class RegistryError(FleetdError):
    """The fleet registry could not be reached, read or written."""


_CREDENTIALS = re.compile(r"(://[^:/@\s]*):[^@\s]*@")


def describe_error(exc: BaseException) -> str:
    """A short reason, with any password in a URL it quotes masked."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = _CREDENTIALS.sub(r"\1:***@", text[0] if text else "")
    return f"{type(exc).__name__}: {first}"[:300]


@dataclass(frozen=True, slots=True)
class RegistryNode:
    """A node as the registry last heard of it."""

    summary: NodeSummary
    address: str | None
    heartbeat_at: float
    heartbeat_age_s: float
    stale: bool
    versions: NodeVersions | None = None  # None: an agent from before drift detection
    alerts_json: str | None = None  # the firing alerts as published; None: not published

    @property
    def alerts(self) -> tuple[Mapping[str, Any], ...] | None:
        """The firing alerts the agent published (parsed when asked: ``status`` never needs
        them), or None when its agent does not publish them."""
        return None if self.alerts_json is None else tuple(json.loads(self.alerts_json))


@dataclass(frozen=True, slots=True)
class FleetLimits:
    """The fleet-wide remediation limits' state."""

    gpus_out_of_service: int
    breaker_tripped: bool
    breaker_reason: str | None
    groups_open: tuple[tuple[str, str], ...] = ()  # (scope, reason) of open group breakers


def _postgres_params(url: str, timeout: float) -> dict[str, Any] | None:
    """psycopg2 connect() arguments for a ``postgresql[+psycopg2]://`` URL, else None."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgresql+psycopg2", "postgres"):
        return None
    params: dict[str, Any] = dict(parse_qsl(parts.query))
    params["dbname"] = unquote(parts.path.lstrip("/")) or None
    if parts.hostname:
        params["host"] = parts.hostname
    if parts.port:
        params["port"] = parts.port
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password:
        params["password"] = unquote(parts.password)
    params.setdefault("connect_timeout", max(1, round(timeout)))
    return {k: v for k, v in params.items() if v is not None}


class RegistryReader:
    """What fleetctl reads from the registry; one short connection per reader."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self._url = url
        self._timeout = timeout
        self._conn: Any = None
        self._module: ModuleType | None = None
        self._engine: Any = None

    # ---- connection ------------------------------------------------------------------
    def _connection(self) -> Any:
        if self._conn is not None:
            return self._conn
        params = _postgres_params(self._url, self._timeout)
        try:
            if params is not None:
                import psycopg2

                self._module = psycopg2
                self._conn = psycopg2.connect(**params)
                self._conn.autocommit = True
            else:
                from sqlalchemy import create_engine

                from fleetd.store.db import engine_url

                self._engine = create_engine(engine_url(self._url))
                raw = self._engine.raw_connection()
                self._module = __import__(raw.driver_connection.__class__.__module__.split(".")[0])
                self._conn = raw
        except Exception as exc:
            raise RegistryError(f"cannot read the registry: {describe_error(exc)}") from None
        return self._conn

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._query_named(sql, params)[1]

    def _query_named(
        self, sql: str, params: tuple[Any, ...] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The column names and the rows of one query."""
        conn = self._connection()
        assert self._module is not None
        if getattr(self._module, "paramstyle", "qmark") != "qmark":
            sql = sql.replace("?", "%s")
        try:
            cursor = conn.cursor()
            try:
                cursor.execute(sql, params)
                names = [str(d[0]) for d in cursor.description or ()]
                return names, list(cursor.fetchall())
            finally:
                cursor.close()
        except Exception as exc:
            if self._module is not None and isinstance(exc, self._module.Error):
                _rollback(conn)
                raise RegistryError(f"cannot read the registry: {describe_error(exc)}") from None
            raise

    # ---- reads -----------------------------------------------------------------------
    def query(
        self, sql: str, params: tuple[Any, ...] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The column names and rows of one read of another registry table (``?`` params)."""
        return self._query_named(sql, params)

    def fleet(self, now: float, *, stale_after: float) -> list[RegistryNode]:
        """Every node, by name, from one query; stale when its heartbeat is too old.

        Columns are read by name, so a registry table from an older fleetd (without the
        columns added since) reads too."""
        names, rows = self._query_named(f"SELECT * FROM {NODES_TABLE} ORDER BY node")
        out = []
        for values in rows:
            r = dict(zip(names, values, strict=True))
            age = max(0.0, now - r["heartbeat_at"])
            summary = NodeSummary.from_dict(  # the row has the reasons and labels as JSON
                {
                    **r,
                    "reasons": json.loads(r["reasons"]),
                    "labels": json.loads(r.get("labels") or "{}"),
                }
            )
            out.append(
                RegistryNode(
                    summary,
                    r["address"],
                    r["heartbeat_at"],
                    age,
                    age > stale_after,
                    _versions(r),
                    r.get("alerts_firing"),
                )
            )
        return out

    def versions(
        self, now: float, *, stale_after: float
    ) -> list[tuple[str, NodeVersions | None, bool]]:
        """(node, versions, stale) of every node, from one query (``fleetctl drift``); a
        table from before drift detection reads as no versions."""
        names, rows = self._query_named(f"SELECT * FROM {NODES_TABLE} ORDER BY node")
        at = {name: i for i, name in enumerate(names)}
        node, beat = at["node"], at["heartbeat_at"]
        columns = [(c, at[c]) for c in ("sku", *COMPONENTS.values()) if c in at]
        out = []
        for values in rows:
            r = {c: values[i] for c, i in columns}
            out.append((values[node], _versions(r), now - values[beat] > stale_after))
        return out

    def address_of(self, node: str) -> str | None:
        """The API address the node published, or None when the registry does not know it."""
        rows = self._query(f"SELECT address FROM {NODES_TABLE} WHERE node = ?", (node,))
        return rows[0][0] if rows else None

    def limits(self) -> FleetLimits | None:
        """The fleet-wide cap and breaker (one query), or None when remediation never used
        this database."""
        try:
            ((gpus, tripped, reason),) = self._query(
                f"SELECT (SELECT coalesce(sum(gpus), 0) FROM {LEASES_TABLE}), b.tripped, b.reason"
                f" FROM (SELECT 1 AS one) AS x LEFT JOIN {BREAKER_TABLE} AS b ON b.scope = ?",
                ("fleet",),
            )
            groups = self._query(
                f"SELECT scope, reason FROM {BREAKER_TABLE} WHERE tripped AND scope LIKE ?"
                " ORDER BY scope",
                ("fleet/%",),
            )
        except RegistryError:
            return None  # the tables are not there: remediation never used this database
        return FleetLimits(
            int(gpus or 0),
            bool(tripped),
            reason if tripped else None,
            tuple((str(scope), str(why or "")) for scope, why in groups),
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()


def _versions(row: Mapping[str, Any]) -> NodeVersions | None:
    """The drift columns of a row, or None when the agent never published them."""
    own = [c for k, c in COMPONENTS.items() if k != "fleetd"]
    if row.get("sku") is None and all(row.get(c) is None for c in own):
        return None
    values = {k: row.get(c) for k, c in COMPONENTS.items()}
    return NodeVersions(sku=row.get("sku"), **values)


def _rollback(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # the connection is gone; close() will tidy up
        return
