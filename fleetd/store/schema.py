"""The one SQLAlchemy MetaData every fleetd table is declared on, and the schema version.

Each part of fleetd declares its tables on ``METADATA`` in the module that owns them — the
time series and the event log here in ``fleetd.store``, the outbox and silences in
``fleetd.alert``, alert state in ``fleetd.rules``, the run journal in ``fleetd.remedy`` — and
that module is named in ``TABLE_MODULES``, so ``Database.upgrade`` creates, checks and
migrates the complete schema whichever part of fleetd opens the database. The names are
strings, imported only when the schema is built: the store imports no domain module at load
time and uses none of their types. A change to any table bumps ``SCHEMA_VERSION`` and adds a
step to ``fleetd.store.migrations``.
"""

from __future__ import annotations

import importlib

from sqlalchemy import Column, Integer, MetaData, String, Table

METADATA = MetaData()

SCHEMA_VERSION = 4

schema_version_table = Table(
    "fleetd_schema_version",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
    Column("fleetd_version", String(32), nullable=False),
)

TABLE_MODULES: tuple[str, ...] = (
    "fleetd.alert.outbox_store",
    "fleetd.alert.silence_store",
    "fleetd.rules.state_store",
    "fleetd.store.tables",
    "fleetd.store.events",
    "fleetd.remedy.journal",
    "fleetd.remedy.rma",
)
"""Modules that declare tables on METADATA; imported before the schema is created or checked.
The one registry of fleetd's tables (``tests/test_layering.py`` checks it is complete)."""


def load_table_modules() -> MetaData:
    """Import every table module so METADATA is complete, and return it."""
    for name in TABLE_MODULES:
        importlib.import_module(name)
    return METADATA
