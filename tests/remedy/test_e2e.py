"""End to end on the simulator: fault → drain every hive worker → one reset → verify → re-admit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetd.clock import FakeClock
from fleetd.remedy import machine as m

from .rig import Rig, make_rig, path_with, remediation_config


@pytest.fixture
def rig(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    r = make_rig(tmp_path, clock)
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    try:
        yield r
    finally:
        r.close()


def test_uncorrectable_error_on_gpu3_drains_the_hive_resets_once_and_readmits(rig: Rig) -> None:
    for name, worker in rig.fleet.workers.items():
        worker.add_requests(2, duration_s=8.0)  # in flight when the fault hits
    rig.sim.inject(3, "ecc_uncorrectable", count=2)
    [run_id] = rig.fault(3)
    rig.run_until_settled()

    run = rig.run(run_id)
    assert run.state is m.RunState.DONE, run.outcome
    assert rig.sim.reset_count() == 1
    assert run.gpu_indices == tuple(range(8))  # the whole hive
    for name, worker in rig.fleet.workers.items():
        assert (name, "out") in rig.fleet.rotation_log and (name, "in") in rig.fleet.rotation_log
        assert worker.stops == 1 and worker.starts == 2, name
        assert worker.aborted == 0 and worker.completed == 2, name  # drained gracefully
        assert worker.state() == "active"
    # every worker was out of rotation and stopped before the one reset
    reset_at = rig.sim.resets[0].at
    assert rig.sim.resets[0].killed_pids == ()
    kinds = rig.sink.kinds()
    assert kinds.count("reset_intent") == 1 and kinds.count("worker_stopped") == 8
    assert kinds.index("reset_intent") > max(
        i for i, k in enumerate(kinds) if k == "worker_stopped"
    )
    assert kinds[-1] == "done" and rig.sink.events[-1].resolve_alert
    assert all(
        e.trigger is not None and e.trigger.rule == "GpuUncorrectableEcc"
        for e in rig.sink.events
        if e.run_id
    )
    assert reset_at >= run.created_at + 8 + 1  # the requests finished, then a second idle read
    # the journal holds the same story, and nothing is left undelivered
    journaled = [e.kind for e in rig.remediation.events(run_id)]
    assert journaled == [e.kind for e in rig.sink.events if e.run_id == run_id]
    assert rig.remediation.status().gpus_out_of_service == 0
