"""Store fixtures: a real SQLite file per test, or a private PostgreSQL schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.store.config import StoreConfig
from fleetd.store.db import Database, sqlite_url
from fleetd.store.samples import SampleStore


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "fleetd.db"


@pytest.fixture
def sqlite_db(sqlite_path: Path) -> Iterator[Database]:
    db = Database.open(sqlite_url(sqlite_path), busy_timeout=2.0)
    yield db
    db.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """The same test on a SQLite file and on PostgreSQL (skipped with the reason if absent)."""
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "fleetd.db")
    else:
        url = request.getfixturevalue("pg_url")
    db = Database.open(url)
    yield db
    db.dispose()


@pytest.fixture
def store(any_db: Database) -> SampleStore:
    return SampleStore(any_db)


@pytest.fixture
def config() -> StoreConfig:
    return StoreConfig()
