"""``fleetd.store.upsert``: insert-or-update by key, in the caller's transaction, on both
databases fleetd opens."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine, select

from fleetd.store.upsert import upsert

META = MetaData()
pairs = Table(
    "t_upsert_pairs",
    META,
    Column("a", String(16), primary_key=True),
    Column("b", Integer, primary_key=True),
    Column("v", Float, nullable=False),
    Column("note", String(16), nullable=True),
)


def _check(url: str) -> None:
    engine = create_engine(url)
    try:
        META.create_all(engine)
        with engine.begin() as conn:
            upsert(conn, pairs, {"a": "x", "b": 1}, {"v": 1.0, "note": "first"})
            upsert(conn, pairs, {"a": "x", "b": 2}, {"v": 2.0, "note": None})
            upsert(conn, pairs, {"a": "x", "b": 1}, {"v": 3.0, "note": "second"})
        with engine.begin() as conn:  # a rolled-back transaction leaves nothing behind
            upsert(conn, pairs, {"a": "y", "b": 1}, {"v": 9.0, "note": None})
            conn.rollback()
        with engine.connect() as conn:
            rows = conn.execute(select(pairs).order_by(pairs.c.a, pairs.c.b)).all()
        assert [tuple(r) for r in rows] == [("x", 1, 3.0, "second"), ("x", 2, 2.0, None)]
    finally:
        META.drop_all(engine)
        engine.dispose()


def test_upsert_sqlite(tmp_path) -> None:
    _check(f"sqlite:///{tmp_path / 'u.db'}")


def test_upsert_postgres(pg_url: str) -> None:
    _check(pg_url)


def test_upsert_needs_a_column_to_set(tmp_path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'u.db'}")
    META.create_all(engine)
    with engine.begin() as conn, pytest.raises(ValueError):
        upsert(conn, pairs, {"a": "x", "b": 1}, {})
