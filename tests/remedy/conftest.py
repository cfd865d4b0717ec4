"""Fixtures of the remediation tests over a real node database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fleetd.store.db import Database, sqlite_url


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    """A node database (SQLite) in the test's directory."""
    database = Database.open(sqlite_url(tmp_path / "node.db"))
    try:
        yield database
    finally:
        database.dispose()


@pytest.fixture
def count_reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[Database], list[str]]:
    """``count_reads(db)``: from now on each read transaction of ``db`` adds to the list it
    returns (a value kept in memory is answered without one)."""

    def start(db: Database) -> list[str]:
        reads: list[str] = []
        real = db.read

        def counted(*args: object, **kwargs: object) -> object:
            reads.append("read")
            return real(*args, **kwargs)

        monkeypatch.setattr(db, "read", counted)
        return reads

    return start
