"""Fixtures shared by the whole suite: a fake clock and an isolated PostgreSQL schema."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from fleetd.clock import FakeClock

PG_BASE_URL = os.environ.get("FLEETD_TEST_PG", "postgresql+psycopg2://root@127.0.0.1:5432/test")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a ``slow`` test run first. Under ``--dist loadfile`` (scripts/test.sh,
    with xdist's reordering by test count turned off) workers take files in this order, so
    the long end-to-end files overlap the many short ones instead of running alone at the end
    of the run. The sort is stable: the order inside a file and among the rest is kept."""
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """A test that configures logging (level, stream) must not silence the next one's."""
    yield
    import structlog

    structlog.reset_defaults()


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when a test advances it."""
    return FakeClock()


def _pg_unavailable_reason() -> str | None:
    try:
        import psycopg2  # noqa: F401
        from sqlalchemy import create_engine, text
    except ImportError as exc:  # pragma: no cover - psycopg2 is a test dependency
        return f"psycopg2 is not installed ({exc})"
    engine = create_engine(PG_BASE_URL, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            conn.execute(text("select 1"))
    except Exception as exc:
        return f"no PostgreSQL server answers at {PG_BASE_URL} ({type(exc).__name__})"
    finally:
        engine.dispose()
    return None


@pytest.fixture(scope="session")
def pg_available() -> None:
    """Skip, with the reason, when the local PostgreSQL server is not there."""
    reason = _pg_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def pg_url(pg_available: None) -> Iterator[str]:
    """A URL into a fresh, private PostgreSQL schema; dropped after the test.

    Tests running in parallel (or several developers' suites) never see each other's tables.
    """
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


@pytest.fixture
def webhook(httpserver: HTTPServer) -> Iterator[list[dict[str, Any]]]:
    """Alertmanager-format webhook bodies POSTed to ``httpserver``'s /hook, in order."""
    received: list[dict[str, Any]] = []

    def record(request: Any) -> Any:
        from werkzeug import Response

        received.append(json.loads(request.data))
        return Response("ok")

    httpserver.expect_request("/hook").respond_with_handler(record)
    yield received
