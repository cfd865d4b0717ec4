"""``fleetd.store.upsert``: insert-or-update by key, in the caller's transaction, on both
databases fleetd opens."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, create_engine, select

from fleetd.store.upsert import upsert, upsert_rows

META = MetaData()
pairs = Table(
    "t_upsert_pairs",
    META,
    Column("a", String(16), primary_key=True),
    Column("b", Integer, primary_key=True),
    Column("v", Float, nullable=False),
    Column("note", String(16), nullable=True),
)


def _check_rows(url: str) -> None:
    """Many rows: an update of rows already there, and a key twice in one batch, whose last
    row wins (a driver sending the batch as one statement is refused a key twice)."""
    engine = create_engine(url)
    try:
        META.create_all(engine)
        first = [{"a": "x", "b": n, "v": float(n), "note": None} for n in range(10)]
        again = [
            {"a": "x", "b": 3, "v": 30.0, "note": "dropped"},
            {"a": "y", "b": 1, "v": 1.5, "note": "new"},
            {"a": "x", "b": 3, "v": 33.0, "note": "last"},
            *({"a": "x", "b": n, "v": -1.0, "note": "upd"} for n in range(5, 10)),
        ]
        with engine.begin() as conn:
            upsert_rows(conn, pairs, ["a", "b"], first)
        with engine.begin() as conn:
            upsert_rows(conn, pairs, ["a", "b"], again)
            upsert_rows(conn, pairs, ["a", "b"], [])  # nothing to write: no statement
        with engine.connect() as conn:
            rows = {(r.a, r.b): (r.v, r.note) for r in conn.execute(select(pairs))}
        expected = {("x", n): (float(n), None) for n in range(5)}
        expected[("x", 3)] = (33.0, "last")
        expected |= {("x", n): (-1.0, "upd") for n in range(5, 10)}
        expected[("y", 1)] = (1.5, "new")
        assert rows == expected
    finally:
        META.drop_all(engine)
        engine.dispose()


def test_upsert_rows_sqlite(tmp_path) -> None:
    _check_rows(f"sqlite:///{tmp_path / 'u.db'}")


def test_upsert_rows_postgres(pg_url: str) -> None:
    _check_rows(pg_url)


def test_upsert_rows_refuses_rows_of_different_columns(tmp_path) -> None:
    """A later row's extra column would otherwise be dropped without a word."""
    engine = create_engine(f"sqlite:///{tmp_path / 'u.db'}")
    META.create_all(engine)
    rows = [{"a": "x", "b": 1, "v": 1.0}, {"a": "x", "b": 2, "v": 2.0, "note": "lost"}]
    with engine.begin() as conn, pytest.raises(ValueError, match="differ in their columns"):
        upsert_rows(conn, pairs, ["a", "b"], rows)


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
