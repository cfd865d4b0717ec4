"""The per-node lease keeps what /metrics and the status page read at every request (GPUs
out under the lease, the breaker) between its own writes; each write is seen by the next
read. A registry's lease, written by every node, always reads."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import update

from fleetd.remedy.config import BreakerConfig, FleetConfig
from fleetd.remedy.journal import breaker_table
from fleetd.remedy.lease import SqlFleetLease
from fleetd.store.db import Database

NOW = 1_767_225_600.0


def test_each_write_of_the_node_lease_is_seen_by_the_next_read(
    sqlite_db: Database, count_reads: Callable[[Database], list[str]]
) -> None:
    db = sqlite_db
    config = FleetConfig(max_gpus_out=8, breaker=BreakerConfig(max_failures=2))
    lease = SqlFleetLease.local(db, "n1", config)
    assert lease.out_of_service() == 0 and not lease.breaker().tripped
    reads = count_reads(db)
    for _ in range(3):
        assert lease.out_of_service() == 0 and not lease.breaker().tripped
    assert reads == []  # kept: nothing written since
    assert lease.acquire(node="n1", run_id="r1", gpus=[0, 1], manual=False, now=NOW).granted
    assert lease.out_of_service() == 2
    lease.record_failure(node="n1", gpu=0, run_id="r1", now=NOW)
    lease.record_failure(node="n1", gpu=1, run_id="r1", now=NOW + 1)
    assert lease.breaker().tripped
    lease.reset_breaker(who="ops", now=NOW + 2)
    assert not lease.breaker().tripped
    lease.release("r1")
    assert lease.out_of_service() == 0


def test_a_registry_lease_reads_every_time(
    sqlite_db: Database, count_reads: Callable[[Database], list[str]]
) -> None:
    db = sqlite_db
    lease = SqlFleetLease(
        db, scope="fleet", max_gpus_out=8, breaker=BreakerConfig(max_failures=1), registry=True
    )
    lease.record_failure(node="n1", gpu=0, run_id="r1", now=NOW)
    assert lease.breaker().tripped
    with db.begin() as conn:  # another node resets it in the shared registry
        conn.execute(update(breaker_table).values(tripped=False))
    reads = count_reads(db)
    assert not lease.breaker().tripped
    assert reads == ["read"]
