"""Opening the database: SQLite in WAL mode by default, any SQLAlchemy URL otherwise.

``Database.open`` creates a fresh schema, upgrades an older one step by step, and refuses a
schema newer than this code with a clear error, so an upgrade never requires deleting data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, select

from fleetd import __version__
from fleetd.errors import StoreError
from fleetd.store import schema


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{Path(path)}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Database:
    """An engine plus the schema checks; build one in daemon wiring and pass it in."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Database:
        """Connect to ``url`` and bring its schema to the current version."""
        if url.startswith("sqlite"):
            # a pooled connection keeps SQLite's WAL open: reopening per transaction costs ~1 ms
            engine = create_engine(url)
            event.listen(engine, "connect", _sqlite_pragmas)
        else:
            engine = create_engine(url, pool_pre_ping=True)
        db = cls(engine)
        if upgrade:
            db.upgrade()
        return db

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a transaction that commits on success and rolls back on error."""
        with self.engine.begin() as conn:
            yield conn

    def schema_version(self) -> int | None:
        """The version recorded in the database, or None for an empty database."""
        if not inspect(self.engine).has_table(schema.schema_version_table.name):
            return None
        with self.engine.connect() as conn:
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
            metadata.create_all(self.engine)
            self._set_version(schema.SCHEMA_VERSION)
            return
        for version in range(found + 1, schema.SCHEMA_VERSION + 1):
            with self.begin() as conn:
                migrations.apply(version, conn)
            self._set_version(version)
        metadata.create_all(self.engine)  # tables added without a migration step of their own

    def _set_version(self, version: int) -> None:
        table = schema.schema_version_table
        with self.begin() as conn:
            conn.execute(table.delete())
            conn.execute(table.insert().values(id=1, version=version, fleetd_version=__version__))

    def dispose(self) -> None:
        self.engine.dispose()
