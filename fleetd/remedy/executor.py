"""Carries out what the machine asks, feeds the outcomes back, journals before acting.

For each run the loop is: step the pending events → write the new run and its events to the
journal in one transaction → hand the events to the notifiers → only then execute the
commands that state allows → their outcomes become the next events. A run whose next step
waits for time is left alone until ``tick(now)`` finds it due. Runs found unfinished when the
executor is built get ``Resumed`` on the first tick.

Every command is idempotent (unroute, stop, start, reroute, checks, polls). The single one
that is not — the reset — is issued only after its intent is journaled, and the machine never
issues it again for a run that has been resumed.

In dry-run every command is answered with a synthetic success and nothing is touched: the
journal and the events show exactly what would have been done.

Each kind of command is one row of ``_WAYS``: how it is carried out, its dry-run answer,
whether it changes the world (then the journal is written first) and whether it runs side by
side with the same command for the other workers.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any, Generic, TypeVar

from fleetd.clock import Clock
from fleetd.logs import get_logger
from fleetd.remedy import machine as m
from fleetd.remedy import validators, verify
from fleetd.remedy.commands import run_command, unit_command
from fleetd.remedy.config import RemediationConfig
from fleetd.remedy.events import ChangeSink, EventSink, RemediationEvent, alert_key
from fleetd.remedy.evidence import EvidenceCapture
from fleetd.remedy.holders import KfdInspector, KfdProcess, judge, matching_agent
from fleetd.remedy.journal import RunJournal
from fleetd.remedy.lease import FleetLease
from fleetd.remedy.ports import (
    AlertView,
    FaultEvents,
    GpuControl,
    HealthPoller,
    PartitionControl,
)
from fleetd.remedy.rma import RmaBook, RmaUpdate
from fleetd.remedy.workers.base import WorkerAdapter
from fleetd.vllm.benchmark import BenchmarkGate
from fleetd.vllm.client import WorkerGone
from fleetd.vllm.config import VllmWorkerConfig

log = get_logger("remedy.executor")

PASSING_OUTPUT_BYTES = 2048  # of a passing validator's output; a failing one keeps more
_MAX_TICKS_PER_RUN = 64  # zero-wait runs advance many steps per tick; a stuck one cannot spin


@dataclass(frozen=True, slots=True, kw_only=True)
class RemediationParts:
    """What one node's remediation is built from (``fleetd.remedy_wiring`` fills it): the
    ``Remediation`` facade and its ``Executor`` are given the same parts."""

    node: str
    config: RemediationConfig
    workers: Sequence[VllmWorkerConfig]
    backend: GpuControl
    poller: HealthPoller
    adapter: WorkerAdapter
    journal: RunJournal
    lease: FleetLease
    clock: Clock
    sink: ChangeSink | None = None
    events: EventSink | None = None
    alerts: AlertView | None = None
    kfd: KfdInspector | None = None
    evidence: EvidenceCapture | None = None
    benchmark: BenchmarkGate | None = None
    rma: RmaBook | None = None


class Executor:
    """Drives this node's runs; one instance per daemon, ticked from one thread."""

    def __init__(self, parts: RemediationParts, *, own_pid: int | None = None) -> None:
        self.node = parts.node
        self.evidence = parts.evidence
        self.rma = parts.rma
        self._rma_done: set[str] = set()  # runs whose RMA records this process wrote
        self._rma_checked = parts.rma is None
        self._benchmark = parts.benchmark
        self._cfg = parts.config
        self._kfd = parts.kfd or KfdInspector()
        self._own_pid = os.getpid() if own_pid is None else own_pid
        self._alerts = parts.alerts
        self._fault_events: FaultEvents | None = None
        self._journal = parts.journal
        self._backend = parts.backend
        self._modes_before: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        """Partition modes per physical GPU read just before each run's reset (in memory: a
        run resumed after a restart re-enumerates without the mode check)."""
        self._poller = parts.poller
        self._adapter = parts.adapter
        self._workers: Mapping[str, VllmWorkerConfig] = {w.name: w for w in parts.workers}
        self._lease = parts.lease
        self._clock = parts.clock
        self._sink = parts.sink
        self._event_sink = parts.events
        self._runs: dict[str, m.Run] = {}
        self._seq: dict[str, int] = {}
        self._resume: set[str] = set()
        self.busy_s = 0.0  # time spent outside fleetd: adapters, backend, commands (bench)
        self.validators_s = 0.0  # of which the validators' own runtime (bench)
        self.validate_s = 0.0  # the validator commands' carrying out, parsing included (bench)
        self._redeliver = True  # events of a previous life may still be undelivered
        for run in self._journal.active(self.node):
            self._runs[run.run_id] = run
            self._seq[run.run_id] = self._journal.last_seq(run.run_id)
            self._resume.add(run.run_id)
            log.info("remediation_run_resumed", run_id=run.run_id, state=run.state.value)
        self._stale_leases_checked = False
        self._lease_unreadable_logged = False
        self._release_stale_leases()

    def configure(self, config: RemediationConfig) -> None:
        """A new mode from the registry (the rest of the section is unchanged)."""
        self._cfg = config

    def _release_stale_leases(self) -> None:
        """A daemon killed between concluding a run and releasing its lease leaves the lease
        behind; the journal says whether its run still needs it. A fleet registry that is
        down must not stop the agent from starting: then the next tick tries again."""
        if self._stale_leases_checked:
            return
        try:
            held = self._lease.leases(self.node)
        except Exception as exc:
            if not self._lease_unreadable_logged:  # once, not every tick of an outage
                log.warning("remediation_leases_unreadable", error=_describe(exc))
                self._lease_unreadable_logged = True
            return
        self._stale_leases_checked = True
        for run_id in held:
            run = self._runs.get(run_id) or self._journal.get(run_id)
            if run is None or (run.terminal and not run.holding):
                self._lease.release(run_id)
                log.info("remediation_stale_lease_released", run_id=run_id)

    # ---- public ------------------------------------------------------------------------
    def attach_events(self, events: FaultEvents) -> None:
        """Verification reads the driver's reset evidence (post-reset events, kernel lines)."""
        self._fault_events = events

    def active(self) -> list[m.Run]:
        """The runs in progress, oldest first (a copy: other threads read it while we tick)."""
        runs = list(self._runs.values())
        return sorted(runs, key=lambda r: (r.created_at, r.run_id))

    def get(self, run_id: str) -> m.Run | None:
        return self._runs.get(run_id) or self._journal.get(run_id)

    def start(self, run: m.Run, commands: list[m.Command], now: float) -> m.Run:
        """Journal a freshly planned run; the next ``tick`` starts carrying it out.

        Only the plan's records are kept from ``commands``: every action waits for a tick,
        so a caller (the rules job, an API request) never blocks on a worker or the GPU.
        """
        self._seq.setdefault(run.run_id, 0)
        events = [self._event(run, c, now) for c in commands if isinstance(c, m.Record)]
        self._journal.save(run, events)
        self._runs[run.run_id] = run
        self._journal.mark_delivered(self._hand_out(events, now))
        return run

    def feed(self, run_id: str, event: m.Event, now: float) -> m.Run:
        """Deliver one event (e.g. a Cancel from a person) to an active run."""
        run = self._runs.get(run_id)
        if run is None:
            found = self._journal.get(run_id)
            if found is None:
                raise KeyError(run_id)
            return found
        self._resume.discard(run_id)
        return self._advance(run, deque([event]), now)

    def note(self, run: m.Run, record: m.Record, now: float) -> None:
        """Add an event to a run without changing it (a further trigger, a human's remark)."""
        event = self._event(run, record, now)
        self._journal.append_events([event])
        self._journal.mark_delivered(self._hand_out([event], now))

    def tick(self, now: float) -> None:
        """Resume restarted runs, advance every run whose wait is over, retry deliveries."""
        self._release_stale_leases()
        self._rma_catch_up(now)
        self.redeliver(now)
        for run in self.active():
            if run.run_id in self._resume:
                self._resume.discard(run.run_id)
                run = self._advance(run, deque([m.Resumed()]), now)
            ticks = 0
            while not run.terminal and m.due(run, now) and ticks < _MAX_TICKS_PER_RUN:
                before = _progress(run)
                run = self._advance(run, deque([m.Tick()]), now)
                ticks += 1
                if _progress(run) == before:
                    break

    def redeliver(self, now: float, *, force: bool = False) -> None:
        """Hand out events journaled but not yet delivered (after a restart or an outage)."""
        if not (self._redeliver or force):
            return
        self._redeliver = False
        pending = self._journal.undelivered(self.node)
        if pending:
            self._journal.mark_delivered(self._deliver(pending, now))

    # ---- the loop ----------------------------------------------------------------------
    def _advance(self, run: m.Run, events: deque[m.Event], now: float) -> m.Run:
        saved = run
        commands: list[m.Command] = []
        unsaved: list[RemediationEvent] = []
        delivered: list[str] = []
        while True:
            for event in list(events):
                run, more = m.step(run, event, now)
                commands += more
            events.clear()
            unsaved += [self._event(run, c, now) for c in commands if isinstance(c, m.Record)]
            actions = [c for c in commands if not isinstance(c, m.Record)]
            commands = []
            acts = not run.dry_run and any(_way(a).acts for a in actions)
            if (run is not saved or unsaved) and (acts or not actions):
                # journal first: nothing that changes the world happens before this write;
                # a run concluding writes its GPUs' RMA records (and tickets) with it
                also = None
                if self._rma_due(run):
                    update = self._rma_update(run, now)
                    unsaved += [self._event(run, t, now) for t in update.tickets]
                    also = update.write
                self._journal.save(run, unsaved, also=also)
                saved = run
                if self._redeliver and delivered:  # settle before re-reading what is pending
                    self._journal.mark_delivered(delivered)
                    delivered = []
                delivered += self._hand_out(unsaved, now)
                unsaved = []
            if run.terminal:
                self._runs.pop(run.run_id, None)
            else:
                self._runs[run.run_id] = run
            if not actions:
                self._journal.mark_delivered(delivered)
                return run
            events.extend(self._carry_out_all(run, actions, now))
            now = max(now, self._clock.now())

    def _rma_due(self, run: m.Run) -> bool:
        """A real run that has concluded (its last bundle taken) and has no RMA entry yet."""
        return (
            self.rma is not None
            and run.terminal
            and not run.dry_run
            and not run.capturing
            and run.run_id not in self._rma_done
        )

    def _rma_update(self, run: m.Run, now: float) -> RmaUpdate:
        assert self.rma is not None
        self._rma_done.add(run.run_id)
        try:
            return self.rma.plan(run, now)
        except Exception as exc:  # the record is bookkeeping: never a reason to stall a run
            log.warning("rma_record_failed", run_id=run.run_id, error=_describe(exc))
            return RmaUpdate()

    def _rma_catch_up(self, now: float) -> None:
        """Concluded runs a killed daemon left without their RMA records (once per start)."""
        if self._rma_checked or self.rma is None:
            return
        try:
            recent = self._journal.runs(self.node, limit=50)
            for run in recent:
                if not run.terminal or run.dry_run or self.rma.applied(run):
                    continue
                self._seq[run.run_id] = self._journal.last_seq(run.run_id)
                update = self._rma_update(run, now)
                events = [self._event(run, t, now) for t in update.tickets]
                self._journal.save(run, events, also=update.write)
                if events:
                    self._redeliver = True
        except Exception as exc:
            log.warning("rma_catch_up_failed", error=_describe(exc))
            return
        self._rma_checked = True

    def _event(self, run: m.Run, record: m.Record, now: float) -> RemediationEvent:
        if run.run_id not in self._seq:  # a concluded run of an earlier life (a note on it)
            self._seq[run.run_id] = self._journal.last_seq(run.run_id)
        seq = self._seq.get(run.run_id, 0) + 1
        self._seq[run.run_id] = seq
        return RemediationEvent(
            event_id=f"{run.run_id}:{seq}",
            node=run.node,
            kind=record.kind,
            message=record.message,
            at=now,
            severity=record.severity,
            run_id=run.run_id,
            seq=seq,
            state=run.state.value,
            phase=run.state.phase,
            plan=run.plan.value,
            dry_run=run.dry_run,
            gpus=run.gpu_indices,
            workers=run.worker_names,
            trigger=run.trigger,
            evidence=record.evidence,
            raise_alert=record.raise_alert,
            resolve_alert=record.resolve_alert,
            alert_key=alert_key(run.node, run.gpu_indices),
            actor=run.trigger.who,
            outcome=run.outcome if run.terminal else None,
            details=record.details,
        )

    def _hand_out(self, events: Sequence[RemediationEvent], now: float) -> list[str]:
        """Deliver new events, unless older ones still wait: then all go in journal order."""
        if self._redeliver:
            self.redeliver(now)
            return []
        return self._deliver(events, now)

    def _deliver(self, events: Sequence[RemediationEvent], now: float) -> list[str]:
        """Hand events to the notifiers in order; return the ids that went out."""
        delivered: list[str] = []
        for event in events:
            log.info(
                "remediation_step",
                run_id=event.run_id,
                kind=event.kind,
                state=event.state,
                dry_run=event.dry_run,
                message=event.message,
            )
            try:
                if self._sink is not None:
                    self._sink.submit_change(event, now)
                if self._event_sink is not None:
                    self._event_sink.record(event)
            except Exception as exc:  # a notifier outage never stops a run; retried next tick
                log.warning(
                    "remediation_event_delivery_failed",
                    event_id=event.event_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                self._redeliver = True
                break
            delivered.append(event.event_id)
        return delivered

    # ---- commands ----------------------------------------------------------------------
    def _carry_out_all(self, run: m.Run, actions: Sequence[m.Command], now: float) -> list[m.Event]:
        """Carry out a step's commands, in order; each worker's commands of one kind (stop
        eight units, read eight loads) run side by side, so one slow worker never stretches
        the others' cadence or a drain's length. Outcomes come back in command order."""
        outcomes: list[m.Event | None] = []
        for _, group in groupby(enumerate(actions), key=_batch_key):
            outcomes += self._carry_out_batch(run, [cmd for _, cmd in group], now)
        return [o for o in outcomes if o is not None]

    def _carry_out_batch(
        self, run: m.Run, batch: Sequence[m.Command], now: float
    ) -> list[m.Event | None]:
        if len(batch) <= 1 or run.dry_run:
            return [self._carry_out(run, cmd, now) for cmd in batch]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(len(batch), _MAX_PARALLEL)) as pool:
            results = list(pool.map(lambda cmd: _way(cmd).carry_out(self, run, cmd, now), batch))
        self.busy_s += time.perf_counter() - started
        return results

    def _carry_out(self, run: m.Run, cmd: m.Command, now: float) -> m.Event | None:
        way = _way(cmd)
        if run.dry_run:
            return way.pretend(run, cmd)
        if way.own:
            return way.carry_out(self, run, cmd, now)
        started = time.perf_counter()
        try:
            return way.carry_out(self, run, cmd, now)
        finally:
            self.busy_s += time.perf_counter() - started

    # Each command's carrying out, named in ``_WAYS``; all take (run, command, now).
    def _acquire(self, run: m.Run, cmd: m.AcquireLease, now: float) -> m.LeaseResult:
        """At most one run per node (oldest first), then the pause switch, then the lease."""
        for other in self._runs.values():
            if other.run_id == run.run_id or other.dry_run:
                continue
            if other.lease_held or other.state is not m.RunState.PLANNED:
                return m.LeaseResult(False, f"run {other.run_id} is active on this node")
            if (other.created_at, other.run_id) < (run.created_at, run.run_id):
                return m.LeaseResult(False, f"queued behind run {other.run_id}")
        manual = run.plan in m.MANUAL_PLANS
        if not manual:
            pause = self._journal.pause_state(self.node)
            if pause.paused:
                return m.LeaseResult(False, f"remediation paused by {pause.by}: {pause.reason}")
            if self._cfg.mode == "off":
                return m.LeaseResult(False, "remediation is off", final=True)
        try:
            decision = self._lease.acquire(  # held GPUs are already counted by their holder
                node=self.node,
                run_id=run.run_id,
                gpus=self._physical(run.verify_gpus),
                manual=manual,
                now=now,
            )
        except Exception as exc:  # the registry is unreachable: a denial, retried as usual
            log.warning("remediation_lease_unavailable", run_id=run.run_id, error=repr(exc))
            return m.LeaseResult(False, f"fleet lease unavailable: {type(exc).__name__}")
        return m.LeaseResult(decision.granted, decision.reason)

    def _physical(self, indices: Sequence[int]) -> list[int]:
        """The GPUs the cap counts: physical GPUs, i.e. the partition-0 devices of the
        indices (every index on an unpartitioned node; an unknown index counts itself)."""
        known = {g.index: g for g in self._backend.gpus()}
        return [i for i in indices if i not in known or known[i].primary]

    def _release_lease(self, run: m.Run, cmd: m.ReleaseLease, now: float) -> None:
        try:
            self._lease.release(run.run_id)
        except Exception as exc:  # released with the stale leases at a later tick
            log.warning("remediation_lease_release_failed", run_id=run.run_id, error=repr(exc))

    def _release_holds(self, run: m.Run, cmd: m.ReleaseHolds, now: float) -> None:
        mine = set(run.gpu_indices)
        for held in self._journal.holding(self.node):
            if held.run_id == run.run_id or not mine & set(held.gpu_indices):
                continue
            released = replace(held, holding=False, lease_held=False)
            record = m.Record(
                "hold_released",
                f"GPUs {', '.join(map(str, held.gpu_indices))} back in service "
                f"(undrain run {run.run_id}, {run.trigger.describe()})",
                resolve_alert=True,
            )
            self._seq.setdefault(held.run_id, self._journal.last_seq(held.run_id))
            event = self._event(released, record, now)
            self._journal.save(released, [event])
            self._lease.release(held.run_id)
            self._journal.mark_delivered(self._hand_out([event], now))

    def _worker(self, name: str) -> VllmWorkerConfig:
        worker = self._workers.get(name)
        if worker is None:
            raise KeyError(f"worker {name} is no longer configured")
        return worker

    def _worker_call(self, name: str, call: Callable[[VllmWorkerConfig], None]) -> str | None:
        return _error_of(lambda: call(self._worker(name)))

    def _unroute(self, run: m.Run, cmd: m.Unroute, now: float) -> m.UnrouteResult:
        return m.UnrouteResult(cmd.worker, self._worker_call(cmd.worker, self._adapter.unroute))

    def _start(self, run: m.Run, cmd: m.StartUnit, now: float) -> m.StartResult:
        return m.StartResult(cmd.worker, self._worker_call(cmd.worker, self._adapter.start))

    def _reroute(self, run: m.Run, cmd: m.Reroute, now: float) -> m.RerouteResult:
        return m.RerouteResult(cmd.worker, self._worker_call(cmd.worker, self._adapter.reroute))

    def _stop(self, run: m.Run, cmd: m.StopUnit, now: float) -> m.StopResult:
        name = cmd.worker
        try:
            note = self._adapter.stop(self._worker(name))
        except Exception as exc:
            log.warning("remediation_command_failed", error=_describe(exc), worker=name)
            return m.StopResult(name, _describe(exc))
        return m.StopResult(name, note=note)

    def _read_load(self, run: m.Run, cmd: m.ReadLoad, now: float) -> m.LoadResult:
        name = cmd.worker
        try:
            load = self._adapter.load(self._worker(name))
        except WorkerGone as exc:
            return m.LoadResult(name, error=_describe(exc), gone=True)
        except Exception as exc:
            return m.LoadResult(name, error=_describe(exc))
        return m.LoadResult(name, running=load.running, waiting=load.waiting)

    def _check_ready(self, run: m.Run, cmd: m.CheckReady, now: float) -> m.ReadyResult:
        name = cmd.worker
        try:
            readiness = self._adapter.ready(self._worker(name))
        except Exception as exc:
            return m.ReadyResult(name, False, _describe(exc))
        if not readiness.ready or self._benchmark is None:
            return m.ReadyResult(name, readiness.ready, readiness.detail)
        # after the 1-token completion: the probe against the baseline captured when healthy
        verdict = self._benchmark.check(self._worker(name), readiness.model)
        if verdict is None:
            return m.ReadyResult(name, True, readiness.detail)
        if not verdict.ok and getattr(self._adapter, "undrained_when_ready", False):
            # the command adapter's probe undrained it already: out again before it is held
            error = self._worker_call(name, self._adapter.unroute)
            if error is not None:
                verdict = replace(verdict, detail=f"{verdict.detail}; drain again failed: {error}")
        return m.ReadyResult(
            name, True, readiness.detail, benchmark=verdict.detail, below_baseline=not verdict.ok
        )

    def _check_processes(self, run: m.Run, cmd: m.CheckProcesses, now: float) -> m.ProcessResult:
        """Who still holds the unit's GPUs (and, before a reset, any KFD process on the node);
        fleetd itself and monitoring agents never count (docs/remediation.md, "Holders")."""
        drain = self._cfg.drain
        holders: list[str] = []
        seen: set[int] = {self._own_pid}
        try:
            for gpu in run.gpu_indices:
                for proc in self._backend.processes(gpu):
                    if proc.pid in seen:
                        continue
                    seen.add(proc.pid)
                    agent = matching_agent(KfdProcess(proc.pid, proc.name), drain.monitoring_agents)
                    if agent is None:
                        holders.append(f"GPU {gpu}: pid {proc.pid} ({proc.name})")
            if drain.refuse_if_kfd_processes and run.plan is m.Plan.RESET:
                pids = set(self._backend.compute_processes()) | set(self._kfd.kfd_pids())
                verdict = judge(
                    (self._kfd.inspect(pid) for pid in sorted(pids - seen)),
                    own_pid=self._own_pid,
                    agents=drain.monitoring_agents,
                )
                holders += [
                    f"KFD process {p.describe()} (a hive reset would kill it)"
                    for p in verdict.holders
                ]
                for proc, why in verdict.ignored:
                    log.info("kfd_process_ignored", run_id=run.run_id, pid=proc.pid, why=why)
        except Exception as exc:
            return m.ProcessResult(error=f"cannot list processes: {_describe(exc)}")
        return m.ProcessResult(tuple(holders))

    def _baseline(self, run: m.Run, cmd: m.CaptureBaseline, now: float) -> m.BaselineResult:
        try:
            snapshot = self._poller.poll(now)
        except Exception as exc:
            return m.BaselineResult(error=f"poll failed: {_describe(exc)}")
        health = verify.assess(snapshot, run.verify_gpus)
        return m.BaselineResult(health.ue_counts, health.ce_counts)

    def _capture(self, run: m.Run, cmd: m.CaptureEvidence, now: float) -> m.EvidenceResult:
        """The bundle, within the configured time; a failure is an outcome, never raised."""
        if self.evidence is None:
            return m.EvidenceResult(cmd.phase, cmd.attempt, error="no evidence store configured")
        return self.evidence.capture(run, cmd, now)

    def _reset(self, run: m.Run, cmd: m.ResetGpu, now: float) -> m.ResetResult:
        if isinstance(self._backend, PartitionControl):  # what the check after it compares
            try:
                self._modes_before[run.run_id] = self._backend.partition_modes()
            except Exception as exc:
                log.warning("remediation_partition_modes_unreadable", error=_describe(exc))
        return m.ResetResult(_error_of(lambda: self._backend.reset_gpu(cmd.index)))

    def _partition_check(self, run: m.Run) -> tuple[str | None, bool]:
        """Compare the physical GPUs' partition modes with those before the reset; re-apply a
        changed one when configured (the caller re-enumerates: the handle set changes).
        Returns what is still wrong (or None) and whether a mode was re-applied. Modes
        unknown before the reset (a restart since) are not checked: the rediscovery then
        sees every partition or reports the missing ones."""
        before = self._modes_before.get(run.run_id)
        backend = self._backend
        if not before or not isinstance(backend, PartitionControl):
            return None, False
        now_modes = backend.partition_modes()
        changed = {b: m_ for b, m_ in before.items() if now_modes.get(b, m_) != m_}
        if not changed:
            return None, False
        problems: list[str] = []
        for bdf, (compute, memory) in sorted(changed.items()):
            seen = "/".join(str(x) for x in now_modes.get(bdf, (None, None)))
            if not self._cfg.verify.reapply_partitions or compute is None or memory is None:
                problems.append(f"{bdf} came back in {seen}, was {compute}/{memory}")
                continue
            try:
                backend.set_partition_modes(bdf, compute, memory)
            except Exception as exc:
                problems.append(
                    f"{bdf} came back in {seen} and {compute}/{memory} will not re-apply: "
                    f"{_describe(exc)}"
                )
        if problems:
            return "partition mode lost in the reset: " + "; ".join(problems), False
        log.warning("remediation_partition_reapplied", run_id=run.run_id, gpus=sorted(changed))
        return None, True

    def _reboot(self, run: m.Run, cmd: m.RequestReboot, now: float) -> m.RebootResult:
        reboot = self._cfg.reboot
        if reboot is None:
            return m.RebootResult("no reboot command configured")
        return m.RebootResult(
            _error_of(
                lambda: run_command(
                    unit_command(reboot.command, node=self.node, gpus=run.gpu_indices),
                    timeout=reboot.timeout,
                )
            )
        )

    def _rediscover(self, run: m.Run, cmd: m.Rediscover, now: float) -> m.RediscoverResult:
        try:
            found = self._backend.rediscover()
            lost, reapplied = self._partition_check(run)
            if lost is not None:
                return m.RediscoverResult(error=lost)
            if reapplied:  # the handle set changes with the mode
                found = self._backend.rediscover()
        except Exception as exc:
            return m.RediscoverResult(error=f"re-enumeration failed: {_describe(exc)}")
        keys = {g.uuid for g in found} | {f"index:{g.index}" for g in found}
        return m.RediscoverResult(tuple(sorted(keys)))

    def _poll(self, run: m.Run, cmd: m.PollHealth, now: float) -> m.HealthResult:
        try:
            snapshot = self._poller.poll(now)
        except Exception as exc:
            return m.HealthResult((f"poll failed: {_describe(exc)}",))
        health = verify.assess(snapshot, run.verify_gpus)
        health = self._with_reset_evidence(run, health)
        if self._alerts is None:
            return health
        held = verify.alert_problems(
            self._alerts.health_alerts(),
            run.verify_gpus,
            trigger_fingerprint=run.trigger.fingerprint,
            since=run.entered_at,
            evaluated_at=self._alerts.last_eval_at,
            counted=verify.judged_by_counts(health.ue_counts, run.ue_baseline),
        )
        return replace(health, problems=(*health.problems, *held))

    def _with_reset_evidence(self, run: m.Run, health: m.HealthResult) -> m.HealthResult:
        if self._fault_events is None or run.reset_at is None:
            return health
        try:
            found = self._fault_events.reset_evidence(run.verify_gpus, run.reset_at)
        except Exception as exc:
            log.warning("remediation_reset_evidence_unreadable", error=_describe(exc))
            return health
        return replace(
            health,
            reset_succeeded=tuple(sorted(found.succeeded.items())),
            reset_failed=tuple(sorted(found.failed.items())),
        )

    def _validate(self, run: m.Run, cmd: m.RunValidator, now: float) -> m.ValidatorResult:
        """One command validator of the ladder, killed (with its process group) at its
        timeout; its verdict parsed from its output. Never raises."""
        started = time.perf_counter()
        try:
            return self._validate_once(run, cmd)
        finally:
            self.validate_s += time.perf_counter() - started

    def _validate_once(self, run: m.Run, cmd: m.RunValidator) -> m.ValidatorResult:
        section = self._cfg.validation
        spec = section.validator(cmd.name)
        if spec is None:
            return m.ValidatorResult(
                cmd.name,
                cmd.attempt,
                False,
                "no longer configured under remediation.validation.validators: not validated",
                kind="missing",
            )
        try:
            argv = unit_command(spec.command, node=self.node, gpus=run.verify_gpus)
        except Exception as exc:
            return m.ValidatorResult(cmd.name, cmd.attempt, False, _describe(exc), kind=spec.kind)
        ran = validators.execute(argv, timeout=spec.timeout)
        self.validators_s += ran.duration
        verdict = validators.judge(
            spec.kind,
            ran,
            timeout=spec.timeout,
            min_average_gbps=spec.min_average_gbps,
            min_rtotal_gbps=spec.min_rtotal_gbps,
        )
        keep = section.output_bytes if not verdict.ok else PASSING_OUTPUT_BYTES
        log.info(
            "remediation_validator",
            run_id=run.run_id,
            validator=cmd.name,
            ok=verdict.ok,
            summary=verdict.summary,
            duration=round(ran.duration, 3),
        )
        return m.ValidatorResult(
            cmd.name,
            cmd.attempt,
            verdict.ok,
            verdict.summary,
            kind=verdict.kind,
            exit_code=verdict.exit_code,
            timed_out=verdict.timed_out,
            duration=verdict.duration,
            output=validators.tail(verdict.output, keep),
        )

    def _burn_in(self, run: m.Run, cmd: m.RunBurnIn, now: float) -> m.BurnInResult:
        burn = self._cfg.verify.burn_in
        if burn is None:
            return m.BurnInResult(None, "no burn-in configured")
        try:
            argv = unit_command(burn.command, node=self.node, gpus=run.gpu_indices)
            result = run_command(argv, timeout=burn.timeout)
        except Exception as exc:
            return m.BurnInResult(_describe(exc))
        return m.BurnInResult(None, result.stdout.strip()[-200:])


# ------------------------------------------------------------------------------------ the table
C = TypeVar("C", bound=m.Command)


@dataclass(frozen=True, slots=True)
class _Way(Generic[C]):
    """How the executor handles one kind of command."""

    carry_out: Callable[[Executor, m.Run, C, float], m.Event | None]
    pretend: Callable[[m.Run, C], m.Event | None]
    """Dry-run: the outcome a healthy world would give, without touching anything."""
    acts: bool
    """It changes the world: the journal is written before it runs (checks and polls only
    read, and wait for the journal only when the run changed)."""
    per_worker: bool
    """A ``WorkerCommand``: one worker each, independent of the others: a step's batch of one
    kind runs in parallel."""
    own: bool
    """fleetd's own bookkeeping (the lease): not time spent outside fleetd (``busy_s``)."""


def _row(
    kind: type[C],
    carry_out: Callable[[Executor, m.Run, C, float], m.Event | None],
    pretend: Callable[[m.Run, C], m.Event | None],
    *,
    acts: bool = True,
    own: bool = False,
) -> tuple[type[object], _Way[Any]]:
    """One command's row: a command changes the world unless it says otherwise."""
    return kind, _Way(carry_out, pretend, acts, issubclass(kind, m.WorkerCommand), own)


def _answer(event: m.Event | None) -> Callable[[m.Run, object], m.Event | None]:
    """A dry-run answer that depends on nothing."""
    return lambda run, cmd: event


def _for_worker(answer: Callable[[str], m.Event]) -> Callable[[m.Run, m.WorkerCommand], m.Event]:
    """A dry-run answer naming the command's worker and nothing else."""
    return lambda run, cmd: answer(cmd.worker)


_WAYS: dict[type[object], _Way[Any]] = dict(
    [
        _row(m.AcquireLease, Executor._acquire, _answer(m.LeaseResult(True, "dry-run")), own=True),
        _row(m.ReleaseLease, Executor._release_lease, _answer(None), own=True),
        _row(m.ReleaseHolds, Executor._release_holds, _answer(None), own=True),
        _row(m.Unroute, Executor._unroute, _for_worker(m.UnrouteResult)),
        _row(
            m.ReadLoad,
            Executor._read_load,
            lambda run, cmd: m.LoadResult(cmd.worker, 0.0, 0.0),
            acts=False,
        ),
        _row(m.StopUnit, Executor._stop, _for_worker(m.StopResult)),
        _row(m.CheckProcesses, Executor._check_processes, _answer(m.ProcessResult(())), acts=False),
        _row(m.CaptureBaseline, Executor._baseline, _answer(m.BaselineResult()), acts=False),
        _row(
            m.CaptureEvidence,
            Executor._capture,
            lambda run, cmd: m.EvidenceResult(
                cmd.phase, cmd.attempt, note="dry-run: nothing captured"
            ),
        ),
        _row(m.ResetGpu, Executor._reset, _answer(m.ResetResult())),
        _row(m.RequestReboot, Executor._reboot, _answer(m.RebootResult())),
        _row(
            m.Rediscover,
            Executor._rediscover,
            lambda run, cmd: m.RediscoverResult(tuple(g.key for g in run.gpus)),
            acts=False,
        ),
        _row(m.PollHealth, Executor._poll, _answer(m.HealthResult()), acts=False),
        _row(m.RunBurnIn, Executor._burn_in, _answer(m.BurnInResult(None, "dry-run"))),
        _row(
            m.RunValidator,
            Executor._validate,
            lambda run, cmd: m.ValidatorResult(
                cmd.name, cmd.attempt, True, "dry-run: not run", kind="dry-run"
            ),
        ),
        _row(m.StartUnit, Executor._start, _for_worker(m.StartResult)),
        _row(
            m.CheckReady,
            Executor._check_ready,
            lambda run, cmd: m.ReadyResult(cmd.worker, True, "dry-run"),
            acts=False,
        ),
        _row(m.Reroute, Executor._reroute, _for_worker(m.RerouteResult)),
    ]
)
"""Every command the machine can give (but ``Record``, which the journal keeps): a new
command is one row here."""
_MAX_PARALLEL = 16


def _way(cmd: m.Command) -> _Way[Any]:
    way = _WAYS.get(type(cmd))
    if way is None:
        raise TypeError(f"unknown command {cmd!r}")
    return way


def _batch_key(item: tuple[int, m.Command]) -> object:
    """Consecutive per-worker commands of one kind share a key; any other command is alone."""
    index, cmd = item
    return type(cmd) if _way(cmd).per_worker else index


def _progress(run: m.Run) -> tuple[object, ...]:
    return (
        run.state,
        tuple((w.phase, w.idle_reads) for w in run.workers),
        run.healthy_polls,
        run.rediscovered,
        run.next_at,
        run.validating,
        len(run.validation),
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def _error_of(call: Callable[[], object]) -> str | None:
    """Run ``call``; None on success, the error text otherwise (never raises)."""
    try:
        call()
    except Exception as exc:
        log.warning("remediation_command_failed", error=_describe(exc), kind=type(exc).__name__)
        return _describe(exc)
    return None
