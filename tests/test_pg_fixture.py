"""The PostgreSQL fixture isolates each test in its own schema."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.postgres


def test_pg_url_points_at_a_private_schema(pg_url: str) -> None:
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("create table probe (x int)"))
        schema = conn.execute(text("select current_schema()")).scalar_one()
    engine.dispose()
    assert schema.startswith("t_")
