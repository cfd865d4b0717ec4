"""What one batch of keyed writes costs: ``store.upsert.upsert_rows`` (the outbox's alerts and the
rules' alert state, one ``ON CONFLICT DO UPDATE`` executed for every row), against the
delete-then-insert the alert state used before, on SQLite and on PostgreSQL.

Each figure is the best of ``--repeat`` transactions that write ``rows`` alert-state rows whose
keys are all already stored (the steady case: the same alerts change state). PostgreSQL is
measured when ``--pg URL`` (default: the local test server) answers; otherwise it says why not.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, create_engine, delete, insert
from sqlalchemy.exc import OperationalError

from fleetd.rules.state_store import alert_state_table as TABLE
from fleetd.store.upsert import upsert_rows

DEFAULT_PG = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "fingerprint": f"{i:016x}",
            "rule": "GpuEccUncorrectableError",
            "key_labels": '{"gpu":"3"}',
            "state": "firing",
            "severity": "critical",
            "labels": '{"gpu":"3"}',
            "annotations": "{}",
            "value": 1.0,
            "active_at": 1.0,
            "fired_at": 1.0,
            "resolved_at": None,
            "keep_firing_since": None,
            "last_eval_at": 1.0,
            "no_data_since": None,
            "remediation_plan": None,
        }
        for i in range(n)
    ]


def delete_insert(conn: Connection, batch: list[dict[str, Any]]) -> None:
    keys = [r["fingerprint"] for r in batch]
    conn.execute(delete(TABLE).where(TABLE.c.fingerprint.in_(keys)))
    conn.execute(insert(TABLE), batch)


def best_ms(url: str, write: Callable[[Connection, list[dict[str, Any]]], None], n: int,
            repeat: int) -> float:  # fmt: skip
    engine = create_engine(url)
    try:
        TABLE.drop(engine, checkfirst=True)
        TABLE.create(engine)
        batch = rows(n)
        with engine.begin() as conn:
            write(conn, batch)  # every key stored: what follows updates
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            with engine.begin() as conn:
                write(conn, batch)
            best = min(best, time.perf_counter() - start)
        TABLE.drop(engine)
        return round(best * 1000, 2)
    finally:
        engine.dispose()


def measure(url: str, sizes: list[int], repeat: int) -> dict[str, Any]:
    def upsert(conn: Connection, batch: list[dict[str, Any]]) -> None:
        upsert_rows(conn, TABLE, ["fingerprint"], batch)

    return {
        f"{n}_rows": {
            "upsert_rows_ms": best_ms(url, upsert, n, repeat),
            "delete_insert_ms": best_ms(url, delete_insert, n, repeat),
        }
        for n in sizes
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,500")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sqlite", default="sqlite:////tmp/fleetd-bench-upsert.db")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    out: dict[str, Any] = {"bench": "upsert", "sqlite": measure(args.sqlite, sizes, args.repeat)}
    try:
        out["postgresql"] = measure(args.pg, sizes, args.repeat)
    except OperationalError as exc:
        out["postgresql"] = f"not measured: {str(exc.orig).strip().splitlines()[0]}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
