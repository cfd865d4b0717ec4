"""Helpers shared by the store tests (a module of its own: conftest is not for importing)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from fleetd.model import Labels, Reading, make_labels
from fleetd.store.maintenance import Maintenance

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a whole day
PG_BASE_URL = os.environ.get("FLEETD_TEST_PG", "postgresql+psycopg2://root@127.0.0.1:5432/test")


def gpu(i: int, **extra: object) -> Labels:
    return make_labels({"gpu": i, "uuid": f"u{i}", **extra})


def readings(
    metric: str, labels: Labels, points: Iterable[tuple[float, float | None]]
) -> list[Reading]:
    return [Reading(metric, labels, value, T0 + offset) for offset, value in points]


def settle(jobs: Maintenance, now: float, limit: int = 10_000) -> int:
    """Run maintenance steps until nothing is left to do; returns the steps taken."""
    for n in range(1, limit + 1):
        if not jobs.step(now).more:
            return n
    raise AssertionError("maintenance never settled")


@contextmanager
def pg_schema() -> Iterator[str]:
    """A URL into a fresh private PostgreSQL schema (for fixtures wider than a test)."""
    from sqlalchemy import create_engine, text

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_BASE_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{name}"'))
    try:
        yield f"{PG_BASE_URL}?options=-csearch_path%3D{name}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()
