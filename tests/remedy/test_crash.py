"""The daemon dies at every step of a run and restarts from the same database.

A ``Crash`` (a BaseException, so no ``except Exception`` in fleetd can swallow it) is raised
just before or just after the executor carries out one kind of command — the moment a
SIGKILL would leave the world half-changed. Then every object is dropped and built again
from the same SQLite file, while the simulated hardware and the stand-in workers carry on.
The run must conclude exactly once: one run, at most one reset, every worker back — except
when the reset call itself never happened: then the fault is still there and the run must
not pass it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from fleetd.clock import FakeClock
from fleetd.remedy import machine as m
from fleetd.remedy.events import RemediationEvent

from .rig import Rig, make_rig, path_with


class Crash(BaseException):
    """The daemon process dies here."""


When = Literal["before", "after"]


def arm(rig: Rig, kind: type, when: When) -> list[bool]:
    """Make the executor die at the first command of ``kind``; returns a 'fired' flag."""
    executor = rig.remediation.executor
    original = executor._carry_out
    fired = [False]

    def carry_out(run: m.Run, cmd: m.Command, now: float) -> m.Event | None:
        hit = isinstance(cmd, kind) and not fired[0]
        if hit and when == "before":
            fired[0] = True
            raise Crash(f"before {kind.__name__}")
        result = original(run, cmd, now)
        if hit and when == "after":
            fired[0] = True
            raise Crash(f"after {kind.__name__}")
        return result

    executor._carry_out = carry_out  # type: ignore[method-assign]
    return fired


@pytest.fixture
def rig(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    r = make_rig(tmp_path, clock, workers_on=(3,))
    monkeypatch.setenv("PATH", path_with(r.fleet.bin_dir))
    try:
        yield r
    finally:
        r.close()


KINDS = [
    m.AcquireLease,
    m.Unroute,
    m.ReadLoad,
    m.StopUnit,
    m.CheckProcesses,
    m.ResetGpu,
    m.Rediscover,
    m.PollHealth,
    m.StartUnit,
    m.CheckReady,
    m.Reroute,
    m.ReleaseLease,
]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_killed_at_each_step_the_run_completes_exactly_once(
    rig: Rig, kind: type, when: When
) -> None:
    rig.sim.inject(3, "ecc_uncorrectable")
    rig.fleet.workers["gpu3"].add_requests(1, duration_s=3.0)
    fired = arm(rig, kind, when)
    try:
        rig.fault(3)
        rig.run_until_settled()
    except Crash:
        pass
    assert fired[0], f"the run never reached {kind.__name__}"

    rig.restart_daemon()  # a new process: everything rebuilt from the database
    rig.clock.advance(1)
    rig.run_until_settled()

    [run] = rig.remediation.runs()
    assert run.resumed == 1 or kind is m.ReleaseLease  # concluded before the lease went
    resets = rig.sim.reset_count()
    worker = rig.fleet.workers["gpu3"]
    if kind is m.ResetGpu and when == "before":
        # the intent was journaled but the call never made: the GPU was never reset and its
        # error is still counted, so the run must not pass it — out of service, a human told
        assert resets == 0
        assert run.state is m.RunState.QUARANTINED, (run.state, run.outcome)
        assert "still counted after the reset" in (run.outcome or "")
        assert not worker.in_rotation
    else:
        assert run.state is m.RunState.DONE, (run.state, run.outcome)
        assert resets == 1
        assert worker.state() == "active" and worker.in_rotation
        assert rig.remediation.status().gpus_out_of_service == 0
    assert worker.aborted == 0
    events = rig.remediation.events(run.run_id)
    assert [e.kind for e in events].count("reset_intent") == 1
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # no gap, no repeat
    # every journaled event reached the notifier (at least once), none is pending
    delivered = {e.event_id for e in rig.sink.events}
    assert {e.event_id for e in events} <= delivered
    assert rig.remediation._journal.undelivered(rig.node_name) == []


def test_notifier_outage_loses_no_event(rig: Rig) -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls = 0
            self.events: list[RemediationEvent] = []

        def submit_change(self, event: RemediationEvent, now: float) -> None:
            self.calls += 1
            if self.calls % 3 == 0:
                raise ConnectionError("dispatcher down")
            self.events.append(event)

    flaky = Flaky()
    rig.remediation.executor._sink = flaky
    [run_id] = rig.fault(3)
    rig.run_until_settled()
    for _ in range(50):  # later ticks hand out what failed
        rig.clock.advance(1)
        rig.remediation.tick(rig.clock.now())
    journaled = [e.event_id for e in rig.remediation.events(run_id)]
    got = [e.event_id for e in flaky.events if e.run_id == run_id]
    assert set(journaled) == set(got)
    assert len(got) == len(set(got))  # each handed over once after its failure
    assert got == sorted(got, key=lambda i: int(i.split(":")[1]))  # in order
