"""Fleet-wide limits through the shared PostgreSQL: the cap, the breaker, two agents."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.remedy import machine as m
from fleetd.remedy.config import BreakerConfig, FleetConfig
from fleetd.remedy.lease import SqlFleetLease

from .rig import make_rig

pytestmark = pytest.mark.postgres
NOW = 1_767_225_600.0


def test_two_agents_compete_for_the_fleet_cap(
    tmp_path: Path, clock: FakeClock, pg_url: str
) -> None:
    fleet = FleetConfig(max_gpus_out=8, lease_retry_interval=2.0)
    rigs = []
    for name in ("node-a", "node-b"):
        lease = SqlFleetLease.shared(pg_url, fleet)  # each agent its own connection pool
        rigs.append(
            make_rig(
                tmp_path / name,
                clock,
                workers_on=(3,),
                node_name=name,
                lease=lease,
                own_systemctl=True,
            )
        )
    a, b = rigs
    try:
        [run_a] = a.fault(3)
        [run_b] = b.fault(3)
        both_out = 0
        for _ in range(600):
            clock.advance(1)
            a.remediation.tick(clock.now())
            b.remediation.tick(clock.now())
            states = [r.remediation.run(i).state for r, i in ((a, run_a), (b, run_b))]  # type: ignore[union-attr]
            out = [s for s in states if s not in (m.RunState.PLANNED, *m.TERMINAL)]
            both_out = max(both_out, len(out))
            assert a.remediation.status().gpus_out_of_service <= 8
            if all(s.terminal for s in states):
                break
        assert both_out == 1  # one hive of 8 GPUs at a time, fleet-wide
        for r, run_id in ((a, run_a), (b, run_b)):
            assert r.run(run_id).state is m.RunState.DONE
            assert r.sim.reset_count() == 1
        waited = [e for r in rigs for e in r.sink.events if e.kind == "lease_waiting"]
        assert len(waited) == 1 and "cap on GPUs out of service (fleet)" in waited[0].message
        assert a.remediation.status().gpus_out_of_service == 0
    finally:
        for r in rigs:
            r.close()


def test_concurrent_acquisitions_never_exceed_the_cap(pg_url: str) -> None:
    leases = [SqlFleetLease.shared(pg_url, FleetConfig(max_gpus_out=3)) for _ in range(4)]
    granted: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def take(i: int) -> None:
        barrier.wait()
        decision = leases[i % 4].acquire(
            node=f"node-{i}", run_id=f"run-{i}", gpus=[0], manual=False, now=NOW
        )
        if decision.granted:
            with lock:
                granted.append(f"run-{i}")

    threads = [threading.Thread(target=take, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 3
    assert leases[0].out_of_service() == 3
    leases[1].release(granted[0])
    assert leases[2].acquire(node="x", run_id="late", gpus=[1], manual=False, now=NOW).granted
    for lease in leases:
        lease.dispose()


def test_breaker_is_shared_and_needs_a_person(pg_url: str) -> None:
    cfg = FleetConfig(max_gpus_out=64, breaker=BreakerConfig(max_failures=3, window=300.0))
    one, two = SqlFleetLease.shared(pg_url, cfg), SqlFleetLease.shared(pg_url, cfg)
    assert not one.record_failure(node="a", gpu=0, run_id=None, now=NOW).tripped
    assert not two.record_failure(node="b", gpu=0, run_id=None, now=NOW + 1).tripped
    assert not two.record_failure(node="b", gpu=0, run_id=None, now=NOW + 2).tripped  # same GPU
    status = one.record_failure(node="c", gpu=5, run_id=None, now=NOW + 3)
    assert status.tripped and status.just_tripped and "3 GPUs failed" in (status.reason or "")
    assert two.breaker().tripped  # fleet-wide
    denied = two.acquire(node="d", run_id="r1", gpus=[0], manual=False, now=NOW + 4)
    assert not denied.granted and "circuit breaker open (fleet)" in denied.reason
    assert two.acquire(node="d", run_id="r2", gpus=[0], manual=True, now=NOW + 4).granted
    assert two.breaker().tripped  # never closes by itself, even after the window
    assert not one.record_failure(node="e", gpu=1, run_id=None, now=NOW + 9999).just_tripped
    two.reset_breaker(who="oncall", now=NOW + 10_000)
    assert not one.breaker().tripped
    # failures before the reset no longer count
    assert not one.record_failure(node="f", gpu=1, run_id=None, now=NOW + 10_001).tripped
    one.dispose()
    two.dispose()


def test_a_registry_outage_delays_a_run_by_one_retry_not_the_lease_timeout(
    tmp_path: Path, clock: FakeClock, pg_url: str
) -> None:
    """The shared database goes away (here: its tables do) while a run waits for its lease:
    the run retries every ``lease_retry_interval`` and proceeds once the registry is back."""
    from sqlalchemy import create_engine, text

    fleet = FleetConfig(max_gpus_out=8, lease_retry_interval=2.0, lease_timeout=1800.0)
    lease = SqlFleetLease.shared(pg_url, fleet)
    rig = make_rig(tmp_path, clock, workers_on=(3,), lease=lease, own_systemctl=True)
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE remedy_fleet_leases RENAME TO leases_away"))
        [run_id] = rig.fault(3)
        for _ in range(5):
            clock.advance(1)
            rig.remediation.tick(clock.now())
        assert rig.run(run_id).state is m.RunState.PLANNED  # waiting, not failed, not stuck
        waits = [e for e in rig.sink.events if e.kind == "lease_waiting"]
        assert waits and "fleet lease unavailable" in waits[0].message
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE leases_away RENAME TO remedy_fleet_leases"))
        rig.run_until_settled(limit=300)
        assert rig.run(run_id).state is m.RunState.DONE and rig.sim.reset_count() == 1
    finally:
        engine.dispose()
        rig.close()
