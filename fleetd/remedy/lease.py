"""Fleet-wide limits: a cap on GPUs out of service at once, and a circuit breaker.

With a registry URL the limits are shared by every node through PostgreSQL: each decision
runs in one transaction holding a transaction-scoped advisory lock, so two agents can never
both take the last slot. Without one, the same tables in the node's own database give
per-node limits. Leases of held (quarantined, drained) GPUs stay until a human undrains them:
those GPUs *are* out of service. The breaker never closes by itself (a human resets it), and
it only counts failures after its last reset.

With a registry, caps per label group (``remediation.fleet.caps`` and the registry's
``fleet_remediation_caps``, ``fleetd.remedy.caps``) apply as well: each lease row carries its
node's labels, so a group's GPUs out are a sum over the rows of that group. Breakers per label
group (``breaker.groups``) count the failures of one group (scope ``fleet/rack=r2``); a
tripped group breaker stops the automatic runs of that group's nodes only.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy import (
    Connection,
    column,
    create_engine,
    delete,
    func,
    inspect,
    select,
    table,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from fleetd.logs import get_logger
from fleetd.remedy.caps import (
    FLEET_METADATA,
    Cap,
    Held,
    Member,
    cap_refusal,
    caps_table,
    group_text,
    in_group,
    labels_json,
    labels_of,
    node_labels,
    registry_caps,
)
from fleetd.remedy.config import BreakerConfig, FleetConfig
from fleetd.remedy.journal import FLEET_TABLES, breaker_table, failures_table, leases_table
from fleetd.store.db import Database, engine_url
from fleetd.store.migrations import lease_labels
from fleetd.store.schema import METADATA
from fleetd.store.writes import writes_on

_nodes = table(  # the registry's fleet_nodes (fleetd.registry.store), read for group sizes
    "fleet_nodes",
    column("node"),
    column("labels"),
    column("gpus_total"),
    column("gpus_physical"),
    column("heartbeat_at"),
)

log = get_logger("remedy.lease")

_LOCK_KEY = zlib.crc32(b"fleetd-remediation-fleet-lease")
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class LeaseDecision:
    granted: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    tripped: bool
    reason: str | None = None
    tripped_at: float | None = None
    just_tripped: bool = False
    scope: str = ""  # which breaker: "fleet", "node:NAME", or a group's "fleet/rack=r2"


class FleetLease(Protocol):
    """What the executor asks before taking GPUs out of service."""

    @property
    def scope(self) -> str: ...

    def acquire(
        self, *, node: str, run_id: str, gpus: Sequence[int], manual: bool, now: float
    ) -> LeaseDecision: ...

    def release(self, run_id: str) -> None: ...

    def leases(self, node: str) -> list[str]:
        """Run ids holding a lease for ``node``."""
        ...

    def record_failure(
        self, *, node: str, gpu: int | None, run_id: str | None, now: float
    ) -> BreakerStatus: ...

    def breaker(self) -> BreakerStatus: ...

    def reset_breaker(self, *, who: str, now: float) -> None: ...

    def out_of_service(self) -> int: ...


class SqlFleetLease:
    """The cap and the breaker in SQL tables; PostgreSQL advisory locks when shared.

    Args:
        labels: this node's labels (``node.labels``): the groups its leases and failures
            count in.
        caps: caps per label group besides ``max_gpus_out`` (applied with ``registry``).
        registry: the tables are the shared registry's: caps per group, the registry's own
            caps and group breakers apply; group sizes come from its ``fleet_nodes``.
        stale_after: a node whose heartbeat is older is not counted in its group's size.
    """

    def __init__(
        self,
        db: Database,
        *,
        scope: str,
        max_gpus_out: int,
        breaker: BreakerConfig,
        owns_db: bool = False,
        tables_ready: bool = True,
        labels: Mapping[str, str] | None = None,
        caps: Sequence[Cap] = (),
        registry: bool = False,
        stale_after: float = 60.0,
    ) -> None:
        self._db = db
        self._tables_ready = tables_ready
        self._scope = scope
        self._max = max_gpus_out
        self._breaker_cfg = breaker
        self._local_lock = threading.Lock()
        self._pg = db.engine.dialect.name == "postgresql"
        self._owns_db = owns_db
        self._labels = dict(labels or {})
        self._caps = tuple(caps) if registry else ()
        self._registry = registry
        self._stale_after = stale_after
        self._group_breakers = breaker.groups if registry else []
        self._last_out = 0  # what out_of_service and breaker last read (shown in an outage)
        self._last_breaker = BreakerStatus(False, scope=scope)
        # per node, this lease is the only writer of its tables in the node's database, so
        # what /metrics and the status page read (every scrape) is kept between its writes;
        # the registry's tables are written by every node: always read
        self._writes = None if registry else writes_on(db)
        self._kept_out: dict[str, tuple[int, int]] = {}
        self._kept_breaker: dict[str, tuple[int, BreakerStatus]] = {}

    @classmethod
    def local(
        cls, db: Database, node: str, config: FleetConfig, labels: Mapping[str, str] | None = None
    ) -> SqlFleetLease:
        """Per-node limits in the node's own database (no group caps: no fleet to group)."""
        return cls(
            db,
            scope=f"node:{node}",
            max_gpus_out=config.max_gpus_out,
            breaker=config.breaker,
            labels=node_labels(node, labels or {}),
        )

    @classmethod
    def shared(
        cls,
        url: str,
        config: FleetConfig,
        *,
        timeout: float = 5.0,
        node: str = "",
        labels: Mapping[str, str] | None = None,
        stale_after: float = 60.0,
    ) -> SqlFleetLease:
        """Fleet-wide limits in the shared PostgreSQL registry (creates only its own tables).

        A registry that is down does not stop the agent from starting: the tables are
        created at the first use that reaches it, and until then every lease call raises
        (no lease is granted). ``timeout`` bounds each connection attempt.
        """
        pg = url.startswith("postgresql")
        connect_args = {"connect_timeout": max(1, round(timeout))} if pg else {}
        db = Database(create_engine(engine_url(url), pool_pre_ping=True, connect_args=connect_args))
        lease = cls(
            db,
            scope="fleet",
            max_gpus_out=config.max_gpus_out,
            breaker=config.breaker,
            owns_db=True,
            tables_ready=False,
            labels=node_labels(node, labels or {}),
            caps=[c.cap() for c in config.caps],
            registry=True,
            stale_after=stale_after,
        )
        try:
            lease._ensure_tables()
        except SQLAlchemyError as exc:
            log.warning("fleet_lease_unavailable", error=type(exc).__name__)
        return lease

    def _ensure_tables(self) -> None:
        """Create the tables, and add what a newer fleetd declares to those an older one
        created (schema step 4: the lease tables' ``labels``), before the first use."""
        if self._tables_ready:
            return
        with self._db.begin() as conn:
            METADATA.create_all(conn, tables=list(FLEET_TABLES))
            FLEET_METADATA.create_all(conn)
            lease_labels(conn)
        self._tables_ready = True

    @property
    def scope(self) -> str:
        return self._scope

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        self._ensure_tables()
        with self._db.read() as conn:
            yield conn

    @contextmanager
    def _locked(self) -> Iterator[Connection]:
        self._ensure_tables()
        try:
            with self._local_lock, self._db.begin() as conn:
                if self._pg:
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
                yield conn
        finally:
            if self._writes is not None:
                self._writes.ended()

    def _read_kept(self, cache: dict[str, tuple[int, _V]], read: Callable[[Connection], _V]) -> _V:
        """``read`` in a read transaction; per node, kept until this lease writes again."""

        def fresh() -> _V:
            with self._read() as conn:
                return read(conn)

        if self._writes is None:
            return fresh()
        return self._writes.kept(cache, self._scope, fresh)

    # ---- cap ---------------------------------------------------------------------------
    def acquire(
        self, *, node: str, run_id: str, gpus: Sequence[int], manual: bool, now: float
    ) -> LeaseDecision:
        labels = {**self._labels, "node": node}
        with self._locked() as conn:
            mine = conn.execute(
                select(leases_table.c.run_id).where(leases_table.c.run_id == run_id)
            ).first()
            if mine is not None:
                return LeaseDecision(True, "already held")
            if not manual:
                status = self._breaker(conn)
                if status.tripped:
                    return LeaseDecision(
                        False, f"circuit breaker open ({status.scope}): {status.reason}"
                    )
                out = self._out(conn)
                if out + len(gpus) > self._max:
                    return LeaseDecision(
                        False,
                        f"cap on GPUs out of service ({self._scope}): {out} out, "
                        f"{len(gpus)} more would exceed {self._max}",
                    )
                why = self._group_refusal(conn, labels, len(gpus), now)
                if why is not None:
                    return LeaseDecision(
                        False, f"cap on GPUs out of service ({self._scope}): {why}"
                    )
            conn.execute(
                leases_table.insert().values(
                    run_id=run_id,
                    node=node,
                    gpus=len(gpus),
                    gpu_list=",".join(str(g) for g in gpus),
                    manual=manual,
                    acquired_at=now,
                    labels=labels_json(labels),
                )
            )
        return LeaseDecision(True, "manual: cap and breaker do not apply" if manual else "")

    def caps(self, conn: Connection) -> list[Cap]:
        """The caps per group in force: fleetd.yaml's, then the registry's."""
        if not self._registry:
            return []
        rows = conn.execute(select(caps_table)).mappings().all()
        return [*self._caps, *registry_caps(rows)]

    def _group_refusal(
        self, conn: Connection, labels: Mapping[str, str], wanted: int, now: float
    ) -> str | None:
        caps = self.caps(conn)
        if not caps:
            return None
        held = [
            Held(labels_of(row_labels), int(count))
            for row_labels, count in conn.execute(
                select(leases_table.c.labels, leases_table.c.gpus)
            )
        ]
        members = self._members(conn, now) if any(c.percent is not None for c in caps) else []
        return cap_refusal(caps, labels, wanted, held, members)

    def _members(self, conn: Connection, now: float) -> list[Member] | None:
        """The registry's fresh nodes with their physical GPUs (an agent older than the
        ``gpus_physical`` column: its device count); None when the table is not readable."""
        try:
            names = {c["name"] for c in inspect(conn).get_columns("fleet_nodes")}
        except SQLAlchemyError:
            return None
        if not {"labels", "gpus_physical"} <= names:
            return None
        n = _nodes.c
        rows = conn.execute(
            select(n.node, n.labels, n.gpus_total, n.gpus_physical).where(
                n.heartbeat_at >= now - self._stale_after
            )
        )
        out = []
        for node, text_labels, total, physical in rows:
            labels = labels_of(text_labels) or {}
            gpus = physical if physical is not None else total
            out.append(Member(str(node), {**labels, "node": str(node)}, int(gpus or 0)))
        return out

    def release(self, run_id: str) -> None:
        with self._locked() as conn:
            conn.execute(delete(leases_table).where(leases_table.c.run_id == run_id))

    def leases(self, node: str) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(
                select(leases_table.c.run_id).where(leases_table.c.node == node)
            ).scalars()
            return [str(r) for r in rows]

    def out_of_service(self) -> int:
        """GPUs out under the lease; with the registry unreachable, the count last read (a
        status page must not fail with it; decisions never use this)."""
        try:
            self._last_out = self._read_kept(self._kept_out, self._out)
        except SQLAlchemyError as exc:
            if not self._registry:
                raise
            log.info("fleet_lease_unreadable", error=type(exc).__name__)
        return self._last_out

    @staticmethod
    def _out(conn: Connection) -> int:
        total = conn.execute(select(func.coalesce(func.sum(leases_table.c.gpus), 0))).scalar()
        return int(total or 0)

    # ---- breaker -----------------------------------------------------------------------
    def _group_scopes(self) -> list[tuple[str, tuple[tuple[str, str], ...], int]]:
        """(scope, group, max_failures) of each group breaker this node is in."""
        out = []
        for cfg in self._group_breakers:
            group = tuple((k, self._labels.get(k, "")) for k in cfg.group_by)
            out.append((f"{self._scope}/{group_text(group)}", group, cfg.max_failures))
        return out

    def record_failure(
        self, *, node: str, gpu: int | None, run_id: str | None, now: float
    ) -> BreakerStatus:
        cfg = self._breaker_cfg
        labels = {**self._labels, "node": node}
        with self._locked() as conn:
            conn.execute(
                failures_table.insert().values(
                    node=node, gpu=gpu, run_id=run_id, at=now, labels=labels_json(labels)
                )
            )
            conn.execute(delete(failures_table).where(failures_table.c.at < now - 10 * cfg.window))
            status = self._breaker(conn)
            if status.tripped:
                return status
            recent = conn.execute(
                select(
                    failures_table.c.node,
                    failures_table.c.gpu,
                    failures_table.c.at,
                    failures_table.c.labels,
                ).where(failures_table.c.at >= now - cfg.window)
            ).all()
            scopes = [(self._scope, (), cfg.max_failures), *self._group_scopes()]
            for scope, group, limit in scopes:
                since = self._reset_at(conn, scope)
                pairs = {
                    (f_node, f_gpu)
                    for f_node, f_gpu, at, f_labels in recent
                    if (since is None or at > since) and in_group(labels_of(f_labels), group)
                }
                if len(pairs) < limit:
                    continue
                where = f" of {group_text(group)}" if group else ""
                reason = f"{len(pairs)} GPUs{where} failed within {cfg.window:g}s (limit {limit})"
                self._set_breaker(conn, scope, tripped=True, tripped_at=now, reason=reason)
                log.warning("remediation_breaker_tripped", scope=scope, reason=reason)
                return BreakerStatus(True, reason, now, just_tripped=True, scope=scope)
        return status

    @staticmethod
    def _reset_at(conn: Connection, scope: str) -> float | None:
        """Only failures after a scope's last reset count."""
        row = conn.execute(
            select(breaker_table.c.reset_at).where(breaker_table.c.scope == scope)
        ).first()
        return None if row is None or row[0] is None else float(row[0])

    def breaker(self) -> BreakerStatus:
        """The breaker that stops this node's runs; with the registry unreachable, the one
        last read, saying so (``acquire`` refuses every run meanwhile)."""
        try:
            self._last_breaker = self._read_kept(self._kept_breaker, self._breaker)
            return self._last_breaker
        except SQLAlchemyError as exc:
            if not self._registry:
                raise
            last = self._last_breaker
            why = f"the registry is unreachable ({type(exc).__name__}): last read"
            reason = f"{last.reason}; {why}" if last.reason else why
            return BreakerStatus(last.tripped, reason, last.tripped_at, scope=last.scope)

    def _breaker(self, conn: Connection) -> BreakerStatus:
        """The fleet's breaker, else the first open breaker of this node's groups."""
        scopes = [self._scope, *(scope for scope, _, _ in self._group_scopes())]
        rows = {
            r["scope"]: r
            for r in conn.execute(select(breaker_table).where(breaker_table.c.scope.in_(scopes)))
            .mappings()
            .all()
        }
        for scope in scopes:
            row = rows.get(scope)
            if row is not None and row["tripped"]:
                return BreakerStatus(True, row["reason"], row["tripped_at"], scope=scope)
        return BreakerStatus(False, scope=self._scope)

    def reset_breaker(self, *, who: str, now: float) -> None:
        """Close the fleet's breaker and those of this node's groups."""
        with self._locked() as conn:
            self._set_breaker(conn, self._scope, tripped=False, reset_by=who, reset_at=now)
            for scope, _, _ in self._group_scopes():
                self._set_breaker(conn, scope, tripped=False, reset_by=who, reset_at=now)
        log.info("remediation_breaker_reset", scope=self._scope, by=who)

    @staticmethod
    def _set_breaker(conn: Connection, scope: str, **values: object) -> None:
        found = conn.execute(
            select(breaker_table.c.scope).where(breaker_table.c.scope == scope)
        ).first()
        if found is None:
            conn.execute(breaker_table.insert().values(scope=scope, **values))
        else:
            conn.execute(
                update(breaker_table).where(breaker_table.c.scope == scope).values(**values)
            )

    def dispose(self) -> None:
        """Close the shared registry's connections (the node's own database is not ours)."""
        if self._owns_db:
            self._db.dispose()
