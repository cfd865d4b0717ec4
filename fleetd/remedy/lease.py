"""Fleet-wide limits: a cap on GPUs out of service at once, and a circuit breaker.

With a registry URL the limits are shared by every node through PostgreSQL: each decision
runs in one transaction holding a transaction-scoped advisory lock, so two agents can never
both take the last slot. Without one, the same tables in the node's own database give
per-node limits. Leases of held (quarantined, drained) GPUs stay until a human undrains them:
those GPUs *are* out of service. The breaker never closes by itself (a human resets it), and
it only counts failures after its last reset.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Connection, create_engine, delete, func, select, text, update
from sqlalchemy.exc import SQLAlchemyError

from fleetd.logs import get_logger
from fleetd.remedy.config import BreakerConfig, FleetConfig
from fleetd.remedy.journal import FLEET_TABLES, breaker_table, failures_table, leases_table
from fleetd.store.db import Database, engine_url
from fleetd.store.schema import METADATA

log = get_logger("remedy.lease")

_LOCK_KEY = zlib.crc32(b"fleetd-remediation-fleet-lease")


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
    """The cap and the breaker in SQL tables; PostgreSQL advisory locks when shared."""

    def __init__(
        self,
        db: Database,
        *,
        scope: str,
        max_gpus_out: int,
        breaker: BreakerConfig,
        owns_db: bool = False,
        tables_ready: bool = True,
    ) -> None:
        self._db = db
        self._tables_ready = tables_ready
        self._scope = scope
        self._max = max_gpus_out
        self._breaker_cfg = breaker
        self._local_lock = threading.Lock()
        self._pg = db.engine.dialect.name == "postgresql"
        self._owns_db = owns_db

    @classmethod
    def local(cls, db: Database, node: str, config: FleetConfig) -> SqlFleetLease:
        """Per-node limits in the node's own database."""
        return cls(
            db,
            scope=f"node:{node}",
            max_gpus_out=config.max_gpus_out,
            breaker=config.breaker,
        )

    @classmethod
    def shared(cls, url: str, config: FleetConfig, *, timeout: float = 5.0) -> SqlFleetLease:
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
        )
        try:
            lease._ensure_tables()
        except SQLAlchemyError as exc:
            log.warning("fleet_lease_unavailable", error=type(exc).__name__)
        return lease

    def _ensure_tables(self) -> None:
        if self._tables_ready:
            return
        with self._db.begin() as conn:
            METADATA.create_all(conn, tables=list(FLEET_TABLES))
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
        with self._local_lock, self._db.begin() as conn:
            if self._pg:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            yield conn

    # ---- cap ---------------------------------------------------------------------------
    def acquire(
        self, *, node: str, run_id: str, gpus: Sequence[int], manual: bool, now: float
    ) -> LeaseDecision:
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
                        False, f"circuit breaker open ({self._scope}): {status.reason}"
                    )
                out = self._out(conn)
                if out + len(gpus) > self._max:
                    return LeaseDecision(
                        False,
                        f"cap on GPUs out of service ({self._scope}): {out} out, "
                        f"{len(gpus)} more would exceed {self._max}",
                    )
            conn.execute(
                leases_table.insert().values(
                    run_id=run_id,
                    node=node,
                    gpus=len(gpus),
                    gpu_list=",".join(str(g) for g in gpus),
                    manual=manual,
                    acquired_at=now,
                )
            )
        return LeaseDecision(True, "manual: cap and breaker do not apply" if manual else "")

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
        with self._read() as conn:
            return self._out(conn)

    @staticmethod
    def _out(conn: Connection) -> int:
        total = conn.execute(select(func.coalesce(func.sum(leases_table.c.gpus), 0))).scalar()
        return int(total or 0)

    # ---- breaker -----------------------------------------------------------------------
    def record_failure(
        self, *, node: str, gpu: int | None, run_id: str | None, now: float
    ) -> BreakerStatus:
        cfg = self._breaker_cfg
        with self._locked() as conn:
            conn.execute(failures_table.insert().values(node=node, gpu=gpu, run_id=run_id, at=now))
            conn.execute(delete(failures_table).where(failures_table.c.at < now - 10 * cfg.window))
            status = self._breaker(conn)
            if status.tripped:
                return status
            recent = failures_table.c.at >= now - cfg.window
            row = conn.execute(
                select(breaker_table.c.reset_at).where(breaker_table.c.scope == self._scope)
            ).first()
            if row is not None and row[0] is not None:  # only failures after the last reset
                recent = recent & (failures_table.c.at > float(row[0]))
            pairs = conn.execute(
                select(failures_table.c.node, failures_table.c.gpu).where(recent).distinct()
            ).all()
            if len(pairs) < cfg.max_failures:
                return status
            reason = f"{len(pairs)} GPUs failed within {cfg.window:g}s (limit {cfg.max_failures})"
            self._set_breaker(conn, tripped=True, tripped_at=now, reason=reason)
        log.warning("remediation_breaker_tripped", scope=self._scope, reason=reason)
        return BreakerStatus(True, reason, now, just_tripped=True)

    def breaker(self) -> BreakerStatus:
        with self._read() as conn:
            return self._breaker(conn)

    def _breaker(self, conn: Connection) -> BreakerStatus:
        row = (
            conn.execute(select(breaker_table).where(breaker_table.c.scope == self._scope))
            .mappings()
            .first()
        )
        if row is None or not row["tripped"]:
            return BreakerStatus(False)
        return BreakerStatus(True, row["reason"], row["tripped_at"])

    def reset_breaker(self, *, who: str, now: float) -> None:
        with self._locked() as conn:
            self._set_breaker(conn, tripped=False, reset_by=who, reset_at=now)
        log.info("remediation_breaker_reset", scope=self._scope, by=who)

    def _set_breaker(self, conn: Connection, **values: object) -> None:
        found = conn.execute(
            select(breaker_table.c.scope).where(breaker_table.c.scope == self._scope)
        ).first()
        if found is None:
            conn.execute(breaker_table.insert().values(scope=self._scope, **values))
        else:
            conn.execute(
                update(breaker_table).where(breaker_table.c.scope == self._scope).values(**values)
            )

    def dispose(self) -> None:
        """Close the shared registry's connections (the node's own database is not ours)."""
        if self._owns_db:
            self._db.dispose()
