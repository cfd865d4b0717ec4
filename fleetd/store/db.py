"""Opening the database: SQLite in WAL mode by default, any SQLAlchemy URL otherwise.

``Database.open`` creates a fresh schema, upgrades an older one step by step (each step and
its version bump in one transaction, so a crash mid-upgrade leaves the previous version
intact), and refuses a schema newer than this code with a clear error, so an upgrade never
requires deleting data.

SQLite specifics, all for crash safety and a bounded file:

* pysqlite's own transaction handling is switched off and fleetd emits ``BEGIN`` itself, so
  DDL is transactional too; ``Database.begin`` takes the write lock up front
  (``BEGIN IMMEDIATE``), so a writer waits ``busy_timeout`` for another writer instead of
  failing half-way, while readers (``Database.read``) never block writers (WAL).
* ``synchronous=FULL`` by default: a committed poll survives even a power cut.
* ``auto_vacuum=INCREMENTAL`` on a new file, so space freed by retention can be handed back
  to the file system a few pages at a time; ``journal_size_limit`` keeps the WAL small
  (16 MiB after a checkpoint).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event, inspect, make_url, select, text
from sqlalchemy.pool import StaticPool

from fleetd import __version__
from fleetd.errors import StoreError
from fleetd.store import schema

Synchronous = Literal["off", "normal", "full"]

_IMMEDIATE = "fleetd_sqlite_immediate"
_WAL_LIMIT_BYTES = 16 * 1024 * 1024


def engine_url(url: str) -> str:
    """``url`` with an installed PostgreSQL driver named (psycopg 3, else psycopg2).

    SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3; fleetd depends on psycopg2.
    Every place that opens a database from a URL an operator wrote goes through here.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        driver = "psycopg" if importlib.util.find_spec("psycopg") else "psycopg2"
        return f"postgresql+{driver}://{rest}"
    return url


def check_url(url: str) -> None:
    """Raise ValueError when ``url`` is not a database URL fleetd can open. The message
    never repeats the URL: it may carry a password."""
    try:
        make_url(engine_url(url)).get_dialect()
    except Exception:
        raise ValueError(
            "not a usable database URL (dialect[+driver]://user:password@host:port/database)"
        ) from None


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{Path(path)}"


def _install_sqlite_hooks(engine: Engine, busy_timeout: float, synchronous: Synchronous) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # fleetd emits BEGIN itself (see _on_begin)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={max(0, round(busy_timeout * 1000))}")
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect on a new file only
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """An engine plus the schema checks; build one in daemon wiring and pass it in."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for another database or an in-memory one."""
        if not self.is_sqlite:
            return None
        name = self.engine.url.database
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return Path(name)

    def describe(self) -> str:
        """Where the data lives, safe for logs (never shows a password)."""
        return self.engine.url.render_as_string(hide_password=True)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        upgrade: bool = True,
        busy_timeout: float = 5.0,
        synchronous: Synchronous = "full",
    ) -> Database:
        """Connect to ``url`` and bring its schema to the current version."""
        if url.startswith("sqlite"):
            in_memory = ":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite+pysqlite:")
            if in_memory:
                engine = create_engine(
                    url, poolclass=StaticPool, connect_args={"check_same_thread": False}
                )
            else:
                path = Path(url.split(":///", 1)[1]) if ":///" in url else None
                if path is not None and path.parent != Path():
                    path.parent.mkdir(parents=True, exist_ok=True)
                engine = create_engine(url, pool_size=4, max_overflow=4)
            _install_sqlite_hooks(engine, busy_timeout, synchronous)
        else:
            engine = create_engine(engine_url(url), pool_pre_ping=True, pool_size=4, max_overflow=4)
        db = cls(engine)
        if upgrade:
            try:
                db.upgrade()
            except Exception:
                engine.dispose()
                raise
        return db

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction that commits on success and rolls back on error.

        On SQLite it holds the write lock from the start (``BEGIN IMMEDIATE``).
        """
        with self.engine.connect() as conn:
            if self.is_sqlite:
                conn = conn.execution_options(**{_IMMEDIATE: True})
            with conn.begin():
                yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot; never blocks a writer on SQLite)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    def schema_version(self) -> int | None:
        """The version recorded in the database, or None for an empty database."""
        if not inspect(self.engine).has_table(schema.schema_version_table.name):
            return None
        with self.read() as conn:
            row = conn.execute(select(schema.schema_version_table.c.version)).first()
        return None if row is None else int(row[0])

    def upgrade(self) -> None:
        """Create or migrate the schema; a newer schema than the code is a StoreError."""
        from fleetd.store import migrations

        metadata = schema.load_table_modules()
        found = self.schema_version()
        if found is not None and found > schema.SCHEMA_VERSION:
            raise StoreError(
                f"database schema version {found} is newer than this fleetd understands "
                f"({schema.SCHEMA_VERSION}); upgrade fleetd or point it at another database"
            )
        if found is None:
            with self.begin() as conn:
                metadata.create_all(conn)
                self._set_version(conn, schema.SCHEMA_VERSION)
            return
        for version in range(found + 1, schema.SCHEMA_VERSION + 1):
            with self.begin() as conn:
                migrations.apply(version, conn)
                self._set_version(conn, version)
        with self.begin() as conn:
            metadata.create_all(conn)  # tables added without a migration step of their own

    @staticmethod
    def _set_version(conn: Connection, version: int) -> None:
        table = schema.schema_version_table
        conn.execute(table.delete())
        conn.execute(table.insert().values(id=1, version=version, fleetd_version=__version__))

    def size_bytes(self) -> int | None:
        """Bytes of live data: the SQLite file's pages in use (free pages excluded; the WAL,
        bounded by ``journal_size_limit``, neither), or the total relation size of fleetd's
        tables on PostgreSQL; None where unknown. The disk budget is held against this."""
        if self.is_sqlite:
            if self.path is None:
                return None
            with self.engine.connect() as conn:
                page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
                pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
            return int((pages - free) * page_size)
        if self.dialect == "postgresql":
            names = list(schema.load_table_modules().tables)
            with self.engine.connect() as conn:
                total = conn.execute(
                    text(
                        "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = current_schema() AND c.relname = ANY(:names)"
                    ),
                    {"names": names},
                ).scalar_one()
            return int(total)
        return None

    def file_bytes(self) -> int | None:
        """Bytes the SQLite file and its WAL take on disk (None for other databases)."""
        if self.path is None:
            return None
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with suppress(FileNotFoundError):
                total += os.stat(f"{self.path}{suffix}").st_size
        return total

    def release_free_pages(self, pages: int) -> int:
        """Hand up to ``pages`` free pages back to the file system (SQLite); returns how many
        were free before."""
        if not self.is_sqlite:
            return 0
        with self.begin() as conn:
            free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
            # pysqlite steps a pragma once, and each step releases one page: loop
            for _ in range(min(free, int(pages))):
                conn.exec_driver_sql("PRAGMA incremental_vacuum(1)")
        return free

    def dispose(self) -> None:
        self.engine.dispose()
