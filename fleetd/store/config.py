"""The ``store:`` section of fleetd.yaml: where the data lives and how long each tier is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictInt, ValidationInfo, field_validator

from fleetd.configbase import Duration, Secret, Span, StrictModel, documents
from fleetd.store.db import check_url

DEFAULT_DB_NAME = "fleetd.db"
GIB = 1024**3


def check_secret_url(value: Secret | None) -> Secret | None:
    """``check_url`` for a database URL kept as a Secret (it may carry a password)."""
    if value is not None:
        check_url(value.reveal())
    return value


DatabaseUrl = Annotated[Secret | None, AfterValidator(check_secret_url)]
"""An optional SQLAlchemy URL fleetd can open (``store.url``, ``registry.url``)."""


class StoreConfig(StrictModel):
    """Storage settings. ``url`` (any SQLAlchemy URL, e.g. PostgreSQL) wins over ``path``;
    with neither, the SQLite file is ``<state_dir>/fleetd.db``."""

    url: DatabaseUrl = None  # may carry a password: never logged
    """A SQLAlchemy URL instead of the SQLite file, e.g.
    `postgresql://fleetd:PASSWORD@db/fleetd_node7` (a bare `postgresql://` gets the installed
    driver, psycopg2 by default).
    """
    path: Path | None = None
    """The SQLite file; default `<state_dir>/fleetd.db`."""
    raw_retention: Duration = 24 * 3600.0
    """How long raw samples (every poll) are kept."""
    rollup_1m_retention: Duration = Field(default=30 * 86400.0, validate_default=True)
    """How long 1-minute rollups (min, max, avg, last) are kept."""
    rollup_1h_retention: Duration = Field(default=365 * 86400.0, validate_default=True)
    """How long 1-hour rollups are kept."""
    event_retention: Duration = 365 * 86400.0
    """How long the event log is kept (alerts, remediation, resets, reloads, operator actions)."""
    disk_budget_bytes: StrictInt | None = Field(default=2 * GIB, ge=1024 * 1024, le=2**50)
    """Upper bound on the database size: over it, the oldest stored telemetry of every tier is
    dropped first (`fleetd_store_budget_dropped_bytes_total`). `null`: no bound.
    """
    memory_retention: Annotated[Duration, Span(0, "1d")] = 3600.0  # the window rules read
    """The in-memory window the rules evaluate against; older data is read from the database. The
    window is refilled from the database at start-up.
    """
    busy_timeout: Annotated[Duration, Span(0, "10s")] = 1.0  # a write's wait for the lock
    """How long a write waits for another writer's lock (SQLite) before it counts as failed."""
    synchronous: Literal["normal", "full"] = "full"
    """SQLite `synchronous`: `full` makes a committed poll survive a power cut; `normal` writes less
    but may lose the last transactions on power loss (never corrupts).
    """
    chunk_span: Annotated[Duration, Span("1m", "1h")] = 600.0  # compressed per series per span
    """Raw samples are compressed into one chunk per series per span (whole minutes)."""
    compact_delay: Annotated[Duration, Span(0, "1d")] = 60.0  # uncompressed past their span
    """How long past the end of its span a poll's row stays uncompressed before compaction."""
    maintenance_interval: Annotated[Duration, Span(0, "1h", above=True)] = 10.0  # how often
    """How often store maintenance (compaction, rollups, retention, the disk budget) runs."""
    maintenance_rows: StrictInt = Field(default=20_000, ge=100, le=10_000_000)  # one step
    """Most rows one maintenance step handles per job, so maintenance never stalls a poll."""
    retry_interval: Annotated[Duration, Span(0, "1h", above=True)] = 5.0  # doubles up to max
    """First retry after a failed write (disk full, locked, I/O error); doubles on each failure up
    to `retry_interval_max`.
    """
    retry_interval_max: Annotated[Duration, Span(0, "1d", above=True)] = 120.0
    """Longest wait between write retries."""
    integrity_check_interval: Annotated[Duration, Span(0, "7d")] = 600.0
    """How often `PRAGMA quick_check` reads the whole SQLite file, off the poll's path; a damaged
    file (garbage in the WAL or the main file) is moved aside and a fresh one started, as at
    start. `0s`: never.
    """
    backlog_polls: StrictInt = Field(default=900, ge=0, le=100_000)  # in memory while writes fail
    """Polls kept in memory while writes fail, written once the database answers again; beyond, the
    oldest are dropped (`fleetd_store_backlog_dropped_polls_total`).
    """

    # The tiers nest: each check reads the tier before it, when that one is valid itself.
    @field_validator("raw_retention")
    @classmethod
    @documents("raw_retention must be at least 1h")
    def _raw_hour(cls, value: float) -> float:
        if value < 3600:
            raise ValueError("raw_retention must be at least 1h")
        return value

    @field_validator("rollup_1m_retention")
    @classmethod
    @documents("rollup_1m_retention must be at least 7d and raw_retention")
    def _after_raw(cls, value: float, info: ValidationInfo) -> float:
        raw = info.data.get("raw_retention", 0.0)
        if value < max(raw, 7 * 86400):
            raise ValueError("rollup_1m_retention must be at least 7d and raw_retention")
        return value

    @field_validator("rollup_1h_retention")
    @classmethod
    @documents("rollup_1h_retention must be at least rollup_1m_retention")
    def _after_1m(cls, value: float, info: ValidationInfo) -> float:
        minute = info.data.get("rollup_1m_retention")
        if minute is not None and value < minute:
            raise ValueError("rollup_1h_retention must be at least rollup_1m_retention")
        return value

    @field_validator("chunk_span")
    @classmethod
    @documents("chunk_span must be a whole number of minutes between 1m and 1h")
    def _whole_minutes(cls, value: float) -> float:
        if value % 60:
            raise ValueError("chunk_span must be a whole number of minutes between 1m and 1h")
        return value

    def database_url(self, state_dir: Path) -> Secret:
        """The SQLAlchemy URL to open (wrapped: a PostgreSQL URL may hold a password)."""
        if self.url is not None:
            return self.url
        return Secret(f"sqlite:///{self.path or state_dir / DEFAULT_DB_NAME}")
