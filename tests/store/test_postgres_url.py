"""A plain ``postgresql://`` URL, as an operator writes it, opens with the driver installed.

SQLAlchemy 2.1 maps ``postgresql://`` to psycopg 3, while fleetd depends on psycopg2: every
place that opens PostgreSQL must resolve the driver the same way.
"""

from __future__ import annotations

from fleetd.remedy.config import FleetConfig
from fleetd.remedy.lease import SqlFleetLease
from fleetd.store import schema
from fleetd.store.db import Database, engine_url


def plain(url: str) -> str:
    scheme, rest = url.split("://", 1)
    assert scheme.startswith("postgresql")
    return f"postgresql://{rest}"


def test_engine_url_names_an_installed_driver() -> None:
    resolved = engine_url("postgresql://u:p@db.example:5432/fleet")
    assert resolved.split("://")[0] in ("postgresql+psycopg", "postgresql+psycopg2")
    assert engine_url("postgres://u@h/d").startswith("postgresql+")
    assert engine_url("postgresql+psycopg2://u@h/d") == "postgresql+psycopg2://u@h/d"
    assert (
        engine_url("sqlite:////var/lib/fleetd/fleetd.db") == "sqlite:////var/lib/fleetd/fleetd.db"
    )


def test_the_store_opens_a_plain_postgresql_url(pg_url: str) -> None:
    db = Database.open(plain(pg_url))
    try:
        assert db.dialect == "postgresql"
        assert db.schema_version() == schema.SCHEMA_VERSION
    finally:
        db.dispose()


def test_the_fleet_lease_opens_a_plain_postgresql_url(pg_url: str) -> None:
    lease = SqlFleetLease.shared(plain(pg_url), FleetConfig())
    try:
        assert lease.breaker().tripped is False
        assert lease.out_of_service() == 0
    finally:
        lease.dispose()
