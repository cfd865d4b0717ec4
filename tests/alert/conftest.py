"""Fixtures for the alert delivery tests: a SQLite database, the same on PostgreSQL, and a
dispatcher harness on the fake clock."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.logs import configure_logging
from fleetd.store.db import Database, sqlite_url
from tests.alert.support import Harness


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[Database]:
    db = Database.open(sqlite_url(tmp_path / "fleetd.db"))
    yield db
    db.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on a SQLite file and on the real PostgreSQL (skipped if absent)."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "fleetd.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def harness(sqlite_db: Database, clock: FakeClock) -> Harness:
    return Harness(sqlite_db, clock)


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """Every log line (JSON, debug and up) of code built inside the test."""
    buffer = io.StringIO()
    configure_logging("json", "debug", stream=buffer)
    try:
        yield buffer
    finally:
        configure_logging("json", "info")
