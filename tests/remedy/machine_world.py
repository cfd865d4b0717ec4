"""A tiny pure world for driving the machine in tests: answers every command with an outcome.

Defaults are the happy path; a test overrides single answers (a worker that never idles, a
reset that fails, …) through ``World`` fields.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetd.remedy import machine as m

NOW = 1_767_225_600.0


def settings(**overrides: object) -> m.RunSettings:
    base = {
        "balancer_delay": 15.0,
        "drain_poll_interval": 1.0,
        "idle_reads": 2,
        "drain_timeout": 60.0,
        "release_timeout": 10.0,
        "release_poll_interval": 2.0,
        "verify_polls": 3,
        "verify_poll_interval": 5.0,
        "verify_timeout": 120.0,
        "ready_timeout": 60.0,
        "ready_poll_interval": 5.0,
        "lease_timeout": 100.0,
        "lease_retry_interval": 10.0,
        "reboot_timeout": 600.0,
    }
    base.update(overrides)
    return m.RunSettings(**base)  # type: ignore[arg-type]


def new_run(
    plan: m.Plan = m.Plan.RESET,
    workers: tuple[str, ...] = ("w0", "w1"),
    gpus: tuple[int, ...] = (0, 1, 2, 3),
    now: float = NOW,
    **overrides: object,
) -> m.Step:
    trigger = m.Trigger(kind="alert", at=now, rule="GpuUncorrectableEcc", gpu=3, value=1.0)
    return m.plan_run(
        run_id="r1",
        node="node-a",
        plan=plan,
        trigger=trigger,
        gpus=tuple(m.UnitGpu(i, f"uuid-{i}") for i in gpus),
        workers=workers,
        settings=settings(**overrides),
        now=now,
    )


@dataclass
class World:
    """Answers commands; each field can be a constant or a function of the time."""

    lease: Callable[[float], m.LeaseResult] = lambda now: m.LeaseResult(True)
    busy_until: float = 0.0  # workers report in-flight requests before this time
    holders: Callable[[float], tuple[str, ...]] = lambda now: ()
    reset_error: str | None = None
    present: Callable[[float], tuple[str, ...]] | None = None
    # a driver that keeps its RAS counts across the reset: GPU 3's 5 old uncorrectable errors
    # and its 40 correctable ones read the same before and after
    health: Callable[[float], m.HealthResult] = lambda now: m.HealthResult(
        (), ((3, 5.0),), ((3, 40.0),)
    )
    baseline: Callable[[float], m.BaselineResult] = lambda now: m.BaselineResult(
        ((3, 5.0),), ((3, 40.0),)
    )
    ready_after: float = 0.0
    never_ready: frozenset[str] = frozenset()
    # the benchmark gate's answer per worker once ready: (detail, below its baseline)
    benchmark: dict[str, tuple[str, bool]] = field(default_factory=dict)
    unroute_error: dict[str, str] = field(default_factory=dict)
    stop_error: dict[str, str] = field(default_factory=dict)
    start_error: dict[str, str] = field(default_factory=dict)
    reroute_error: dict[str, str] = field(default_factory=dict)
    burn_in_error: str | None = None
    reboot_error: str | None = None
    evidence_error: str | None = None
    log: list[object] = field(default_factory=list)

    def answer(self, cmd: m.Command, run: m.Run, now: float) -> m.Event | None:
        self.log.append(cmd)
        if isinstance(cmd, m.AcquireLease):
            return self.lease(now)
        if isinstance(cmd, m.Unroute):
            return m.UnrouteResult(cmd.worker, self.unroute_error.get(cmd.worker))
        if isinstance(cmd, m.ReadLoad):
            busy = now < self.busy_until
            return m.LoadResult(cmd.worker, running=2.0 if busy else 0.0, waiting=0.0)
        if isinstance(cmd, m.StopUnit):
            return m.StopResult(cmd.worker, self.stop_error.get(cmd.worker))
        if isinstance(cmd, m.CheckProcesses):
            return m.ProcessResult(self.holders(now))
        if isinstance(cmd, m.CaptureBaseline):
            return self.baseline(now)
        if isinstance(cmd, m.CaptureEvidence):
            if self.evidence_error is not None:
                return m.EvidenceResult(cmd.phase, cmd.attempt, error=self.evidence_error)
            path = f"/state/evidence/{run.run_id}.{cmd.phase}.{cmd.attempt}.json.gz"
            return m.EvidenceResult(cmd.phase, cmd.attempt, path, "ab" * 32, 1234)
        if isinstance(cmd, m.ResetGpu):
            return m.ResetResult(self.reset_error)
        if isinstance(cmd, m.RequestReboot):
            return m.RebootResult(self.reboot_error)
        if isinstance(cmd, m.Rediscover):
            present = self.present(now) if self.present else tuple(g.key for g in run.gpus)
            return m.RediscoverResult(present)
        if isinstance(cmd, m.PollHealth):
            return self.health(now)
        if isinstance(cmd, m.RunBurnIn):
            return m.BurnInResult(self.burn_in_error)
        if isinstance(cmd, m.StartUnit):
            return m.StartResult(cmd.worker, self.start_error.get(cmd.worker))
        if isinstance(cmd, m.CheckReady):
            ok = now >= self.ready_after and cmd.worker not in self.never_ready
            if ok and cmd.worker in self.benchmark:
                detail, slow = self.benchmark[cmd.worker]
                return m.ReadyResult(cmd.worker, True, "", detail, slow)
            return m.ReadyResult(cmd.worker, ok, "" if ok else "health 503")
        if isinstance(cmd, m.Reroute):
            return m.RerouteResult(cmd.worker, self.reroute_error.get(cmd.worker))
        return None  # Record, ReleaseLease, ReleaseHolds: nothing comes back


def settle(world: World, step: m.Step, now: float) -> tuple[m.Run, list[m.Command]]:
    """Carry out commands until none is left; return the run and every command issued."""
    run, cmds = step
    issued = list(cmds)
    queue: deque[m.Command] = deque(cmds)
    while queue:
        answer = world.answer(queue.popleft(), run, now)
        if answer is None:
            continue
        run, more = m.step(run, answer, now)
        issued += more
        queue.extend(more)
    return run, issued


def drive(
    world: World, step: m.Step, now: float, *, dt: float = 1.0, limit: float = 10_000.0
) -> tuple[m.Run, list[m.Command], float]:
    """Tick the run forward in ``dt`` steps until it is terminal or ``limit`` seconds passed."""
    run, issued = settle(world, step, now)
    end = now + limit
    while not run.terminal and now < end:
        now += dt
        if m.due(run, now):
            run, more = settle(world, m.step(run, m.Tick(), now), now)
            issued += more
    return run, issued, now


def records(cmds: list[m.Command]) -> list[m.Record]:
    return [c for c in cmds if isinstance(c, m.Record)]


def kinds(cmds: list[m.Command]) -> list[str]:
    return [r.kind for r in records(cmds)]
