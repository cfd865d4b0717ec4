"""Real remediation runs under a percentage cap per cluster: three agents' executors (the
remediation rig: simulator, stand-in workers, systemctl) take their leases from the local
PostgreSQL. Two nodes of one cluster whose cap is half its GPUs reset one after the other;
the node of another cluster (two nodes registered, one faulting) goes at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.registry.drift import NodeVersions
from fleetd.registry.store import RegistryPublisher
from fleetd.remedy import machine as m
from fleetd.remedy.config import FleetConfig
from fleetd.remedy.lease import SqlFleetLease
from tests.registry.test_registry import fake_status
from tests.remedy.rig import make_rig

pytestmark = pytest.mark.postgres

CLUSTERS = {"node-a": "eu1", "node-b": "eu1", "node-c": "us2"}


def test_a_cluster_at_its_cap_waits_while_another_cluster_goes(
    tmp_path: Path, clock: FakeClock, pg_url: str
) -> None:
    publisher = RegistryPublisher(pg_url)  # the group sizes, as the heartbeats publish them
    try:
        for name, cluster in {**CLUSTERS, "node-d": "us2"}.items():  # d: us2 has 16 GPUs too
            status = {**fake_status(name), "labels": {"cluster": cluster}}
            publisher.publish(status, time.time(), versions=NodeVersions("MI355X", gpus_physical=8))
    finally:
        publisher.close()
    fleet = FleetConfig.model_validate(
        {
            "max_gpus_out": 64,
            "lease_retry_interval": 2.0,
            "caps": [{"group_by": ["cluster"], "max": "50%"}],
        }
    )
    rigs, leases = {}, []
    try:
        for name, cluster in CLUSTERS.items():
            lease = SqlFleetLease.shared(
                pg_url, fleet, node=name, labels={"cluster": cluster}, stale_after=1e10
            )
            leases.append(lease)
            rigs[name] = make_rig(
                tmp_path / name,
                clock,
                workers_on=(3,),
                node_name=name,
                lease=lease,
                own_systemctl=True,
            )
        runs = {name: rig.fault(3)[0] for name, rig in rigs.items()}
        most_out = {"eu1": 0, "us2": 0}
        together = False
        for _ in range(900):
            clock.advance(1)
            out = {"eu1": 0, "us2": 0}
            for name, rig in rigs.items():
                rig.remediation.tick(clock.now())
                state = rig.run(runs[name]).state
                if state not in (m.RunState.PLANNED, *m.TERMINAL):
                    out[CLUSTERS[name]] += 1
            most_out = {k: max(v, out[k]) for k, v in most_out.items()}
            together = together or (out["eu1"] == 1 and out["us2"] == 1)
            if all(rig.run(runs[n]).state.terminal for n, rig in rigs.items()):
                break
        assert most_out == {"eu1": 1, "us2": 1}  # eu1: one hive of its 16 GPUs at a time
        assert together  # the other cluster did not wait for eu1
        for name, rig in rigs.items():
            assert rig.run(runs[name]).state is m.RunState.DONE, name
            assert rig.sim.reset_count() == 1
        waited = [
            e.message for r in rigs.values() for e in r.sink.events if e.kind == "lease_waiting"
        ]
        assert len(waited) == 1
        assert "cap 50% of cluster=eu1 (8 of 16 GPUs): 8 out, 8 more would exceed 8" in waited[0]
    finally:
        for rig in rigs.values():
            rig.close()
        for lease in leases:
            lease.dispose()
