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
* ``mmap_size=0``: pages are read with ``read(2)``, never through a memory map, so a file
  that turns immutable or is truncated under fleetd fails a call instead of killing the
  process with SIGBUS. The WAL index (``-shm``) is always mapped, so before every connection
  and statement ``FileGuard`` checks that the directory and the files are still writable
  (``chattr +i``, a read-only remount) and raises ``StoreError`` instead of letting SQLite
  touch a mapping the kernel would fault.
* ``Database.begin(timeout=…)`` bounds one transaction's wait for the write lock (the poll's
  writes use a short one: another process holding the lock makes storage degraded at once
  instead of stretching every poll by ``busy_timeout``).
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import threading
import time
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
CHECK_CACHE_KIB = 256
"""The integrity check's page cache. The check walks every b-tree once, so SQLite's default
(2 MiB) buys nothing, and filling it on a fresh connection every ``integrity_check_interval``
lifted the RSS high-water mark of a process that had imported fleetd: by 0.8–1.0 MB for an
hour of a node's samples and 1.0–1.3 MB for a 106 MB file; with 256 KiB by nothing
measurable, in the same time (``bench/store.py``, docs/performance.md "Footprint, round 7").
The whole daemon's steady RSS did not show it: this bounds a transient."""


class SchemaTooNewError(StoreError):
    """The database was written by a newer fleetd: never replaced, never written."""


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


class FileGuard:
    """Whether a SQLite file, its WAL and WAL index and their directory can still be
    written, looked at before SQLite touches them: up to four ``access(2)`` calls, a few
    microseconds, by default before every statement (a check cached for even a fraction of
    a second lets a statement reach files made immutable in between). ``access(W_OK)``
    refuses an immutable file even to root, and a read-only file system to everyone, which
    is exactly what would fault the mapped WAL index. Raises ``StoreError`` naming the file."""

    def __init__(self, path: Path, ttl: float = 0.0) -> None:
        self.path = path
        self.ttl = ttl
        self._checked_at = float("-inf")
        self._problem: str | None = None
        self._lock = threading.Lock()
        folder = path.parent if str(path.parent) else Path(".")
        # the names as strings, built once: the check runs before every statement
        self._folder = os.fspath(folder)
        self._files = tuple(f"{path}{suffix}" for suffix in ("", "-wal", "-shm"))

    def problem(self) -> str | None:
        """Why the files cannot be written, or None."""
        if self.ttl <= 0:  # every time: nothing shared to guard with the lock
            return self._look()
        with self._lock:
            at = time.monotonic()
            if at - self._checked_at >= self.ttl:
                self._problem = self._look()
                self._checked_at = at
            return self._problem

    def _look(self) -> str | None:
        """``file_problem`` with the usual answer (all writable) in four ``access(2)`` calls
        and nothing else; only a refusal asks whether the name exists at all (a ``-wal`` or
        ``-shm`` that is not there yet is no problem), and then ``file_problem`` words it."""
        access, exists = os.access, os.path.exists
        if not access(self._folder, os.W_OK | os.X_OK) and exists(self._folder):
            return file_problem(self.path)
        for name in self._files:
            if not access(name, os.R_OK | os.W_OK) and exists(name):
                return file_problem(self.path)
        return None

    def check(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise StoreError(problem)

    def forget(self) -> None:
        """Look again at the next check (after the files were moved or fixed)."""
        with self._lock:
            self._checked_at = float("-inf")


def file_problem(path: Path) -> str | None:
    """Why ``path`` (a SQLite file), its ``-wal``/``-shm`` or its directory is not writable."""
    folder = path.parent if str(path.parent) else Path(".")
    if folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
        return f"state directory {folder} is read-only or immutable"
    for suffix in ("", "-wal", "-shm"):
        name = Path(f"{path}{suffix}")
        if name.exists() and not os.access(name, os.R_OK | os.W_OK):
            return f"database file {name} is read-only or immutable"
    return None


def _install_sqlite_hooks(
    engine: Engine, busy_timeout: float, synchronous: Synchronous, guard: FileGuard | None
) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        if guard is not None:
            guard.check()  # before SQLite maps the WAL index
        dbapi_connection.isolation_level = None  # fleetd emits BEGIN itself (see _on_begin)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={max(0, round(busy_timeout * 1000))}")
        cursor.execute("PRAGMA mmap_size=0")  # read(2), never a map a fault could hit
        # takes effect on a new file only, and setting it on an existing one writes its
        # header: that would need the write lock, so a reader could not even connect while
        # another process holds it
        if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
            cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT_BYTES}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    if guard is not None:
        # Not on pool checkout: a failed checkout closes the connection, and closing the
        # last one checkpoints through the WAL index, which is the fault being avoided.
        @event.listens_for(engine, "before_cursor_execute")
        def _on_execute(*_args: Any) -> None:
            guard.check()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


class Database:
    """An engine plus the schema checks; build one in daemon wiring and pass it in."""

    def __init__(
        self, engine: Engine, *, busy_timeout: float = 5.0, guard: FileGuard | None = None
    ) -> None:
        self.engine = engine
        self.busy_timeout = busy_timeout
        self.guard = guard

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
        guard: FileGuard | None = None
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
                if path is not None:
                    guard = FileGuard(path)
                engine = create_engine(url, pool_size=4, max_overflow=4)
            _install_sqlite_hooks(engine, busy_timeout, synchronous, guard)
        else:
            engine = create_engine(engine_url(url), pool_pre_ping=True, pool_size=4, max_overflow=4)
        db = cls(engine, busy_timeout=busy_timeout, guard=guard)
        if upgrade:
            try:
                db.upgrade()
            except Exception:
                engine.dispose()
                raise
        return db

    @contextmanager
    def begin(self, *, timeout: float | None = None) -> Iterator[Connection]:
        """A write transaction that commits on success and rolls back on error.

        On SQLite it holds the write lock from the start (``BEGIN IMMEDIATE``), waiting at
        most ``timeout`` seconds for it (default: the database's ``busy_timeout``).
        """
        with self.engine.connect() as conn:
            raw: Any = None
            if self.is_sqlite:
                conn = conn.execution_options(**{_IMMEDIATE: True})
                if timeout is not None and timeout != self.busy_timeout:
                    raw = conn.connection.driver_connection
                    raw.execute(f"PRAGMA busy_timeout={max(0, round(timeout * 1000))}")
            try:
                with conn.begin():
                    yield conn
            finally:
                if raw is not None:
                    with suppress(Exception):
                        raw.execute(f"PRAGMA busy_timeout={round(self.busy_timeout * 1000)}")

    def writable(self, timeout: float = 0.05) -> bool:
        """Whether a write transaction can start now (SQLite: the files are writable and
        no other process holds the write lock); waits at most ``timeout``."""
        try:
            with self.begin(timeout=timeout) as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception:
            return False
        return True

    def quick_check(self) -> str | None:
        """``PRAGMA quick_check`` on SQLite (every page read, in the main file and the WAL):
        None when it reports ``ok``, else the first problems. A file is checked on a
        connection of its own, whose page cache is empty, so what is on disk is what is
        checked, and small (``CHECK_CACHE_KIB``): the check reads each page about once.
        Raises what SQLite raises (``database disk image is malformed`` is itself the answer
        for a corrupt file)."""
        if not self.is_sqlite:
            return None
        path = self.path
        if path is None:
            with self.engine.connect() as conn:
                rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA quick_check(10)")]
                conn.rollback()
        else:
            if self.guard is not None:
                self.guard.check()
            conn_ = sqlite3.connect(
                f"file:{path}?mode=rw", uri=True, timeout=self.busy_timeout, isolation_level=None
            )
            try:
                conn_.execute("PRAGMA mmap_size=0")
                conn_.execute(f"PRAGMA cache_size=-{CHECK_CACHE_KIB}")
                rows = [str(r[0]) for r in conn_.execute("PRAGMA quick_check(10)")]
            finally:
                conn_.close()
        if rows == ["ok"]:
            return None
        return "; ".join(rows)[:500] or "quick_check returned nothing"

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
            raise SchemaTooNewError(
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
        """Close the pooled connections, unless the files are immutable or read-only: the
        last close checkpoints through the mapped WAL index and would fault (SIGBUS); those
        connections are then left open until the process ends."""
        if self.guard is not None and self.guard.problem() is not None:
            return
        self.engine.dispose()
