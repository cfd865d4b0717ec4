"""A PostgreSQL URL as an operator copies it from libpq (``postgresql://``) just works."""

from __future__ import annotations

import pytest

from fleetd.store.db import Database, driver_url


def test_bare_postgresql_urls_get_the_installed_driver() -> None:
    assert driver_url("postgresql://u:p@db/fleet") == "postgresql+psycopg2://u:p@db/fleet"
    assert driver_url("postgres://db/fleet") == "postgresql+psycopg2://db/fleet"
    assert driver_url("postgresql+psycopg2://db/x") == "postgresql+psycopg2://db/x"
    assert (
        driver_url("sqlite:////var/lib/fleetd/fleetd.db") == "sqlite:////var/lib/fleetd/fleetd.db"
    )


@pytest.mark.postgres
def test_database_opens_a_bare_postgresql_url(pg_url: str) -> None:
    bare = pg_url.replace("postgresql+psycopg2://", "postgresql://")
    db = Database.open(bare)
    try:
        assert db.dialect == "postgresql" and db.schema_version() is not None
    finally:
        db.dispose()
