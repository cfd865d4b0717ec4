"""The ``store:`` section of fleetd.yaml: where the data lives and how long each tier is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fleetd.configbase import Duration, Secret, StrictModel
from fleetd.store.db import check_url

DEFAULT_DB_NAME = "fleetd.db"
GIB = 1024**3


class StoreConfig(StrictModel):
    """Storage settings. ``url`` (any SQLAlchemy URL, e.g. PostgreSQL) wins over ``path``;
    with neither, the SQLite file is ``<state_dir>/fleetd.db``."""

    url: Secret | None = None  # may carry a password: never logged
    path: Path | None = None
    raw_retention: Duration = 24 * 3600.0
    rollup_1m_retention: Duration = 30 * 86400.0
    rollup_1h_retention: Duration = 365 * 86400.0
    event_retention: Duration = 365 * 86400.0
    disk_budget_bytes: int | None = Field(default=2 * GIB, ge=1024 * 1024)
    memory_retention: Duration = 3600.0  # the in-memory window rules evaluate against
    busy_timeout: Duration = 1.0  # how long a write waits for another writer's lock
    synchronous: Literal["normal", "full"] = "full"
    chunk_span: Duration = 600.0  # raw samples are compressed per series per span
    compact_delay: Duration = 60.0  # head rows stay uncompressed this long past their span
    maintenance_interval: Duration = 10.0  # how often the daemon runs store maintenance
    maintenance_rows: int = Field(default=20_000, ge=100)  # work bound of one step
    retry_interval: Duration = 5.0  # first retry after a failed write; doubles up to max
    retry_interval_max: Duration = 120.0
    backlog_polls: int = Field(default=900, ge=0)  # polls kept in memory while writes fail

    @field_validator("url")
    @classmethod
    def _usable_url(cls, value: Secret | None) -> Secret | None:
        if value is not None:
            check_url(value.reveal())
        return value

    @model_validator(mode="after")
    def _tiers_nest(self) -> StoreConfig:
        if self.raw_retention < 3600:
            raise ValueError("raw_retention must be at least 1h")
        if self.rollup_1m_retention < max(self.raw_retention, 7 * 86400):
            raise ValueError("rollup_1m_retention must be at least 7d and raw_retention")
        if self.rollup_1h_retention < self.rollup_1m_retention:
            raise ValueError("rollup_1h_retention must be at least rollup_1m_retention")
        if not 60 <= self.chunk_span <= 3600 or self.chunk_span % 60:
            raise ValueError("chunk_span must be a whole number of minutes between 1m and 1h")
        if self.busy_timeout > 10:
            raise ValueError("busy_timeout above 10s would stall polls")
        return self

    def database_url(self, state_dir: Path) -> Secret:
        """The SQLAlchemy URL to open (wrapped: a PostgreSQL URL may hold a password)."""
        if self.url is not None:
            return self.url
        return Secret(f"sqlite:///{self.path or state_dir / DEFAULT_DB_NAME}")
