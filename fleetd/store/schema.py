"""The one SQLAlchemy MetaData every fleetd table is declared on, and the schema version.

Each part of fleetd declares its tables in its own module under ``fleetd.store`` on
``METADATA`` and lists that module in ``TABLE_MODULES`` so that ``Database.upgrade`` sees
every table. A change to any table bumps ``SCHEMA_VERSION`` and adds a step to
``fleetd.store.migrations``.
"""

from __future__ import annotations

import importlib

from sqlalchemy import Column, Integer, MetaData, String, Table

METADATA = MetaData()

SCHEMA_VERSION = 2

schema_version_table = Table(
    "fleetd_schema_version",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
    Column("fleetd_version", String(32), nullable=False),
)

TABLE_MODULES: tuple[str, ...] = (
    "fleetd.store.outbox",
    "fleetd.store.silences",
    "fleetd.store.alert_state",
    "fleetd.store.tables",
    "fleetd.store.events",
    "fleetd.store.journal",
)
"""Modules that declare tables on METADATA; imported before the schema is created or checked."""


def load_table_modules() -> MetaData:
    """Import every table module so METADATA is complete, and return it."""
    for name in TABLE_MODULES:
        importlib.import_module(name)
    return METADATA
