"""The remediation facade: what the daemon, the HTTP API and fleetctl call.

``handle(transitions, now)`` turns alerts into runs through the policy (it only journals the
plan, so the rules job never waits on a worker); ``tick(now)`` drives them. People can
``drain``, ``undrain``, ``cancel``, ``pause``/``resume`` and reset the circuit breaker at any
time (it takes effect between two steps of a run). Every decision, including a decision *not*
to act, is an event with what triggered it.

Mode ``off`` opens no automatic run, ``dry-run`` (the default) opens runs that act on
nothing, ``on`` acts. Requests from a person always act: a human can always drain, undrain
or cancel. Pausing stops new automatic runs from starting; a run already past its start
finishes or concludes safely, because half a drained hive is worse than either.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fleetd.errors import RemedyError
from fleetd.events.afid import AfidTable
from fleetd.logs import get_logger
from fleetd.model import AlertState, GpuIdentity, Reading, Transition, make_labels
from fleetd.query import Query
from fleetd.remedy import machine as m
from fleetd.remedy.codec import run_to_dict
from fleetd.remedy.events import RemediationEvent, alert_key
from fleetd.remedy.executor import Executor, RemediationParts
from fleetd.remedy.journal import PauseState, RunJournal
from fleetd.remedy.lease import BreakerStatus
from fleetd.remedy.policy import (
    PLAN_RANK,
    Decision,
    decide,
    incident_decision,
    joined_reason,
    merge_incident,
    reboot_available,
    settings_for,
    shipped_afid_table,
    trigger_of,
    wants_remediation,
)
from fleetd.remedy.ports import FaultEvents
from fleetd.remedy.proactive import ProactiveScheduler, hives
from fleetd.remedy.rma import RmaRecord
from fleetd.remedy.validation_config import ladder_for
from fleetd.vllm.benchmark import Baseline, ProbeError
from fleetd.vllm.config import VllmWorkerConfig

log = get_logger("remedy")


@dataclass(frozen=True, slots=True)
class HeldGpus:
    """GPUs kept out of service after a run ended (quarantined, drained, aborted mid-way)."""

    run_id: str
    gpus: tuple[int, ...]
    workers: tuple[str, ...]
    state: str
    reason: str
    since: float


@dataclass(frozen=True, slots=True)
class RemediationHolds:
    """The runs that hold GPUs or may take them out: what the rules' service view needs of
    ``RemediationStatus`` every evaluation, read without the lease (which may live in the
    fleet registry)."""

    active: tuple[m.Run, ...]
    held: tuple[HeldGpus, ...]


@dataclass(frozen=True, slots=True)
class EvidenceFile:
    """One evidence bundle as the API serves it; ``sha256`` is the digest journaled when it
    was written (a copy that differs was changed since)."""

    run_id: str
    phase: str
    name: str
    data: bytes
    sha256: str


@dataclass(frozen=True, slots=True)
class RemediationStatus:
    node: str
    mode: str
    paused: PauseState
    breaker: BreakerStatus
    lease_scope: str
    gpus_out_of_service: int
    active: tuple[m.Run, ...]
    held: tuple[HeldGpus, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for the API and ``fleetctl``."""
        return {
            "node": self.node,
            "mode": self.mode,
            "paused": asdict(self.paused),
            "breaker": asdict(self.breaker),
            "lease_scope": self.lease_scope,
            "gpus_out_of_service": self.gpus_out_of_service,
            "active": [run_summary(r) for r in self.active],
            "held": [asdict(h) for h in self.held],
        }


def run_summary(run: m.Run) -> dict[str, Any]:
    """A run as the API shows it: the journal form plus its coarse phase."""
    return {**run_to_dict(run), "phase": run.state.phase, "terminal": run.terminal}


class Remediation:
    """One node's remediation: policy, executor, journal and the manual controls."""

    def __init__(self, parts: RemediationParts, *, new_id: Callable[[], str] | None = None) -> None:
        self.node = parts.node
        self.config = parts.config
        self.benchmark = parts.benchmark
        self._local_mode = parts.config.mode  # fleetd.yaml's; a registry wave may set another
        self._workers = list(parts.workers)
        self._backend = parts.backend
        self._journal = parts.journal
        self._lease = parts.lease
        self._new_id = new_id or (lambda: uuid.uuid4().hex[:16])
        self._lock = threading.RLock()
        self._events: FaultEvents | None = None
        self._classified: set[str] = set()  # runs whose incident's AFID class was noted
        self.executor = Executor(parts)

        self._alerts = parts.alerts
        self.proactive = ProactiveScheduler(self)

    def attach_query(self, query: Query) -> None:
        """Read the node's load (vLLM requests, GPU activity) through the rules' query: the
        headroom a proactive validation needs (``fleetd.remedy.proactive``)."""
        self.proactive.query = query

    def attach_events(self, events: FaultEvents) -> None:
        """Read fault incidents (one plan per incident), the AFID table in force and the reset
        evidence from the event sources (fleetd.events_wiring)."""
        self._events = events
        self.executor.attach_events(events)

    # ---- automatic --------------------------------------------------------------------
    def set_fleet_mode(self, mode: str | None) -> None:
        """The mode a registry wave sets for this node (None: fleetd.yaml's). A node whose
        fleetd.yaml says ``off`` stays off. A run under way keeps the dry-run or real mode it was
        planned in; one still waiting for its lease ends if the mode becomes ``off``."""
        effective = self._local_mode if self._local_mode == "off" or mode is None else mode
        if effective == self.config.mode:
            return
        with self._lock:
            self.config = self.config.model_copy(update={"mode": effective})
            self.executor.configure(self.config)

    def handle(self, transitions: Iterable[Transition], now: float) -> list[str]:
        """Open runs for alerts that start firing with a remediation plan; return their ids."""
        opened = []
        with self._lock:
            for transition in transitions:
                if wants_remediation(transition):
                    run_id = self._handle_one(transition, now)
                    if run_id is not None:
                        opened.append(run_id)
        return opened

    def try_handle(self, transitions: Iterable[Transition], now: float) -> list[str] | None:
        """Like ``handle``, but None at once, having done nothing, while a run's step holds
        remediation (a ``systemctl stop`` or a burn-in can take minutes): the poll that calls
        this must keep its cadence, so it keeps the transitions and hands them over later."""
        wanted = [t for t in transitions if wants_remediation(t)]
        if not wanted:
            return []
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self.handle(wanted, now)
        finally:
            self._lock.release()

    def _handle_one(self, transition: Transition, now: float) -> str | None:
        trigger = trigger_of(transition)
        gpu = trigger.gpu
        for run in [*self.executor.active(), *self._journal.holding(self.node)]:
            if gpu is None or gpu in run.gpu_indices:
                if run.plan is m.Plan.PROACTIVE and not run.terminal:
                    # a fault outranks a check-up: it re-admits, this run waits for the slot
                    self.executor.feed(run.run_id, m.Abandon(trigger.describe()), now)
                    continue
                what = "held out of service" if run.holding else f"in run ({run.state.value})"
                self.executor.note(
                    run,
                    m.Record(
                        "further_trigger",
                        f"{trigger.describe()} while GPUs {_gpus(run.gpu_indices)} are {what}",
                    ),
                    now,
                )
                return None
        history = self._journal.runs(self.node, since=now - self._history_window())
        afids = self._events.afids if self._events is not None else None
        decision = decide(
            transition.alert, config=self.config, history=history, now=now, afids=afids
        )
        settle = 0.0
        incident = (
            self._events.incident(gpu) if self._events is not None and gpu is not None else None
        )
        if incident is not None and decision.plan is not None:
            decision = merge_incident(decision, self._incident_decision(incident, history, now))
            settle = max(0.0, incident.opened_at + self._settle() - now)
        if decision.plan is None:
            self._node_event("not_remediated", decision.reason, now, trigger=trigger)
            return None
        dry_run = self.config.mode == "dry-run"
        run_id = self._new_id()
        if not dry_run:
            pause = self._journal.pause_state(self.node)
            if pause.paused:
                why = f"remediation paused by {pause.by}: {pause.reason}"
                self._node_event("not_remediated", why, now, trigger=trigger)
                return None
            status = self._lease.record_failure(node=self.node, gpu=gpu, run_id=run_id, now=now)
            if status.just_tripped:
                self._node_event(
                    "breaker_tripped",
                    f"circuit breaker open ({status.scope or self._lease.scope}): "
                    f"{status.reason}; automatic "
                    "remediation is paused until a person resets it",
                    now,
                    trigger=trigger,
                    severity="critical",
                    raise_alert=True,
                    key=f"fleetd-remediation/{self._lease.scope}/breaker",
                )
            if status.tripped:
                why = f"circuit breaker open ({status.scope or self._lease.scope}): {status.reason}"
                self._node_event("not_remediated", why, now, trigger=trigger)
                return None
        plan = decision.plan
        gpus = self._unit(plan, gpu)
        why = decision.reason
        note = self._unit_note(plan, gpu)
        if note is not None:
            why = f"{why}; {note}"
            log.warning("reset_unit_whole_node", gpu=gpu, detail=note)
        escalate = (
            plan is m.Plan.RESET
            and reboot_available(self.config, history, now)
            and set(gpus) == {g.index for g in self._identities().values()}
        )
        settings = self._automatic_settings(plan, trigger, dry_run=dry_run, escalate=escalate)
        return self._open(
            run_id,
            plan,
            trigger,
            gpus,
            settings,
            now,
            dry_run=dry_run,
            why=why,
            escalated=decision.escalated,
            settle=settle,
        )

    def _automatic_settings(
        self, plan: m.Plan, trigger: m.Trigger, *, dry_run: bool, escalate: bool = False
    ) -> m.RunSettings:
        """The settings of a run fleetd opens itself, with the validators a run of ``plan``
        for ``trigger`` must pass (by fault class, else by plan) frozen into them."""
        settings = settings_for(self.config, dry_run=dry_run, escalate_to_reboot=escalate)
        afids = self._events.afids if self._events is not None else None
        ladder = ladder_for(self.config.validation, plan.value, trigger, afids)
        return replace(settings, validators=ladder)

    def afid_table(self) -> AfidTable | None:
        """The AFID table in force (the RMA record reads categories and messages from it):
        the event sources' (shipped plus the operator's), else the shipped one."""
        return self._events.afids if self._events is not None else shipped_afid_table()

    def _settle(self) -> float:
        return self._events.settle if self._events is not None else 0.0

    def _incident_decision(
        self, incident: Any, history: Sequence[m.Run], now: float
    ) -> Decision | None:
        return incident_decision(
            incident.action, incident.why, config=self.config, history=history, now=now
        )

    def _replan(self, now: float) -> None:
        """Runs still waiting for their incident's other reports take the furthest plan any
        of them calls for (a CPER record read a second after the counters said "reset" may
        say "replace the OAM"): one incident, one plan."""
        if self._events is None:
            return
        for run in self.executor.active():
            gpu = run.trigger.gpu
            if run.state is not m.RunState.PLANNED or gpu is None or run.plan in m.MANUAL_PLANS:
                continue
            incident = self._events.incident(gpu)
            if incident is None:
                continue
            if incident.classified and run.run_id not in self._classified:
                self._classified.add(run.run_id)
                text = f"the fault's CPER record: {incident.classified}"
                self.executor.note(run, m.Record("classified", text), now)
            history = self._journal.runs(self.node, since=now - self._history_window())
            better = self._incident_decision(incident, history, now)
            if better is None or better.plan is None:
                continue
            if PLAN_RANK.get(better.plan, 0) > PLAN_RANK.get(run.plan, 0):
                why = better.reason
            else:  # the same quarantine may still add its reason (the AFID's physical call)
                joined = joined_reason(run.plan, run.outcome or "", better)
                if joined is None:
                    continue
                why = joined
            gpus = self._unit(better.plan, gpu)
            identities = self._identities()
            unit = tuple(
                (i, identities[i].uuid, identities[i].bdf) if i in identities else (i, None, None)
                for i in gpus
            )
            # a dry run's hold is pretended: its GPUs still serve
            held = {
                i for r in self._journal.holding(self.node) if not r.dry_run for i in r.gpu_indices
            }
            workers = tuple(
                w.name for w in self._workers if set(w.gpus) & set(gpus) and not set(w.gpus) & held
            )
            replan = m.Replan(better.plan.value, unit, workers, tuple(sorted(held)), why)
            self.executor.feed(run.run_id, replan, now)

    def _history_window(self) -> float:
        reboot = self.config.reboot.window if self.config.reboot is not None else 0.0
        return max(self.config.budget.window, self.config.probation, reboot)

    # ---- manual -----------------------------------------------------------------------
    def drain(self, gpu: int, *, who: str, why: str, now: float) -> str:
        """Take GPU ``gpu``'s workers out of service and keep them out (until undrain). A
        dry run on the GPU acted on nothing, so it yields: one under way is cancelled, saying
        why, and a finished one's pretended hold (a dry quarantine) holds nothing."""
        with self._lock:
            self._check_gpu(gpu)
            for run in [*self.executor.active(), *self._journal.holding(self.node)]:
                if gpu in run.gpu_indices and not run.dry_run:
                    raise RemedyError(f"GPU {gpu} is already in run {run.run_id} ({run.state})")
            for run in self.executor.active():
                if gpu in run.gpu_indices and run.dry_run:
                    self.executor.feed(run.run_id, m.Cancel(who, f"a person drains GPU {gpu}"), now)
            trigger = m.Trigger(kind="manual", at=now, gpu=gpu, who=who, why=why)
            return self._open(
                self._new_id(),
                m.Plan.DRAIN,
                trigger,
                (gpu,),
                self._manual_settings(),
                now,
                dry_run=False,
                why=f"drain requested by {who}",
            )

    def undrain(self, gpu: int, *, who: str, why: str, now: float) -> str:
        """Bring back every worker held out of service on the unit that holds ``gpu``."""
        with self._lock:
            held = [r for r in self._journal.holding(self.node) if gpu in r.gpu_indices]
            if not held:
                raise RemedyError(f"GPU {gpu} is not held out of service")
            for run in self.executor.active():
                if run.plan is m.Plan.UNDRAIN and gpu in run.gpu_indices:
                    raise RemedyError(f"undrain of GPU {gpu} already under way: {run.run_id}")
            gpus = tuple(sorted({i for r in held for i in r.gpu_indices}))
            trigger = m.Trigger(kind="manual", at=now, gpu=gpu, who=who, why=why)
            names = {w for r in held for w in r.worker_names}
            return self._open(
                self._new_id(),
                m.Plan.UNDRAIN,
                trigger,
                gpus,
                self._manual_settings(),
                now,
                dry_run=False,
                why=f"undrain requested by {who}",
                workers=tuple(w.name for w in self._workers if w.name in names),
            )

    def cancel(self, run_id: str, *, who: str, why: str, now: float) -> m.Run:
        """Stop a run between two steps; what is still drained stays drained and alerted.
        A run that already ended is refused (a person must not read "done" as "cancelled")."""
        with self._lock:
            ended = self._journal.get(run_id)
            if ended is not None and ended.terminal:
                raise RemedyError(f"run {run_id} already ended ({ended.state}): nothing to cancel")
            try:
                return self.executor.feed(run_id, m.Cancel(who, why), now)
            except KeyError:
                raise RemedyError(f"no run {run_id}") from None

    def pause(self, *, who: str, why: str, now: float) -> None:
        with self._lock:
            self._journal.set_paused(self.node, PauseState(True, who, why, now))
            self._node_event(
                "paused", f"automatic remediation paused by {who}: {why}", now, actor=who
            )

    def resume(self, *, who: str, why: str, now: float) -> None:
        with self._lock:
            self._journal.set_paused(self.node, PauseState(False, who, why, now))
            self._node_event(
                "resumed", f"automatic remediation resumed by {who}: {why}", now, actor=who
            )

    def reset_breaker(self, *, who: str, now: float) -> None:
        with self._lock:
            self._lease.reset_breaker(who=who, now=now)
            self._node_event(
                "breaker_reset",
                f"circuit breaker ({self._lease.scope}) reset by {who}",
                now,
                resolve_alert=True,
                key=f"fleetd-remediation/{self._lease.scope}/breaker",
                actor=who,
            )

    # ---- driving and reading ------------------------------------------------------------
    def held_triggers(self) -> frozenset[str]:
        """Fingerprints of the alerts whose real runs are under way: the rules engine keeps
        them firing until their run concludes, so the page they caused is never lost to a
        reset that clears the counter before the alert's group is notified, and the incident
        closes when the GPUs are back in service."""
        return frozenset(
            run.trigger.fingerprint
            for run in self.executor.active()
            if not run.dry_run and run.trigger.fingerprint is not None
        )

    def tick(self, now: float) -> None:
        with self._lock:
            self._replan(now)
            self.proactive.tick(now)
            self.executor.tick(now)

    # ---- proactive validation (fleetd.remedy.proactive) ------------------------------------
    @property
    def journal(self) -> RunJournal:
        return self._journal

    @property
    def workers(self) -> Sequence[VllmWorkerConfig]:
        return self._workers

    def hives(self) -> list[tuple[int, ...]]:
        """The node's GPUs grouped by what one reset reaches (each its own with ``gpu``)."""
        gpus = sorted(self._identities())
        if self.config.reset_unit != "hive":
            return [(g,) for g in gpus]
        return hives(gpus, self._backend.reset_unit)

    def breaker(self) -> BreakerStatus:
        return self._lease.breaker()

    def firing_alerts(self) -> list[str]:
        """The health alerts firing on this node (an incident: no validation meanwhile)."""
        if self._alerts is None:
            return []
        return sorted(
            {a.key.rule for a in self._alerts.health_alerts() if a.state is AlertState.FIRING}
        )

    def open_proactive(self, gpus: tuple[int, ...], why: str, now: float) -> str:
        """Open a proactive validation of ``gpus`` (a hive) in the configured mode."""
        trigger = m.Trigger(kind="schedule", at=now, why=why)
        dry_run = self.config.mode == "dry-run"
        settings = self._automatic_settings(m.Plan.PROACTIVE, trigger, dry_run=dry_run)
        return self._open(
            self._new_id(),
            m.Plan.PROACTIVE,
            trigger,
            gpus,
            settings,
            now,
            dry_run=dry_run,
            why=f"proactive validation of GPUs {_gpus(gpus)} ({why})",
        )

    def status(self) -> RemediationStatus:
        """What runs and what is held, read without waiting for a step in progress (the API,
        the fleet heartbeat and /metrics must answer while a drain takes minutes)."""
        holds = self.holds()
        return RemediationStatus(
            node=self.node,
            mode=self.config.mode,
            paused=self._journal.pause_state(self.node),
            breaker=self._lease.breaker(),
            lease_scope=self._lease.scope,
            gpus_out_of_service=self._lease.out_of_service(),
            active=holds.active,
            held=holds.held,
        )

    def holds(self) -> RemediationHolds:
        """The active runs and the GPUs finished runs hold, as ``status`` has them, without
        reading the lease: the rules' service view asks every evaluation, and the journal
        answers it from memory between its writes."""
        held = tuple(
            HeldGpus(
                r.run_id,
                r.gpu_indices,
                r.out_of_rotation() or r.worker_names,
                r.state.value,
                r.outcome or "",
                r.entered_at,
            )
            for r in self._journal.holding(self.node)
        )
        return RemediationHolds(active=tuple(self.executor.active()), held=held)

    # ---- the readmission benchmark ------------------------------------------------------
    def baselines(self) -> list[Baseline]:
        """The benchmark baselines this node holds, one per worker."""
        if self.benchmark is None:
            return []
        return sorted(self.benchmark.store.load().values(), key=lambda b: b.worker)

    def capture_baseline(self, *, who: str, why: str, now: float) -> list[Baseline]:
        """Probe every worker and store the figures re-admission compares against. Only on a
        healthy hive: refused while a run is active or GPUs are held out of service (a
        baseline taken on a degraded GPU would wave the same fault through later)."""
        if self.benchmark is None:
            raise RemedyError("the readmission benchmark is not available on this node")
        if not self._workers:
            raise RemedyError("no vLLM workers configured (vllm.workers)")
        status = self.status()
        if status.active or status.held:
            busy = [r.run_id for r in status.active] + [h.run_id for h in status.held]
            raise RemedyError(
                f"not a healthy hive: remediation runs active or holding GPUs ({', '.join(busy)})"
            )
        try:
            taken = self.benchmark.capture(self._workers, now)
        except ProbeError as exc:
            raise RemedyError(f"benchmark probe failed: {exc}") from None
        log.info("benchmark_baseline_captured", who=who, why=why, workers=len(taken))
        return taken

    def metrics(self, now: float) -> list[Reading]:
        """The ``fleetd_remediation_*`` series of the catalog (for the exporter's group)."""
        status = self.status()  # never waits for a step in progress, like ``status``
        counts, resets = self._journal.counts(self.node)

        def reading(metric: str, value: float, **labels: object) -> Reading:
            return Reading(metric, make_labels(labels), float(value), now)

        scope = status.lease_scope
        out = [
            reading("fleetd_remediation_mode", 1, mode=status.mode),
            reading("fleetd_remediation_paused", status.paused.paused),
            reading("fleetd_remediation_breaker_open", status.breaker.tripped, scope=scope),
            reading("fleetd_remediation_runs_active", len(status.active)),
            reading("fleetd_remediation_resets_total", resets),
            reading("fleetd_remediation_gpus_held", len({g for h in status.held for g in h.gpus})),
            reading(
                "fleetd_remediation_gpus_out_of_service", status.gpus_out_of_service, scope=scope
            ),
        ]
        # the reset plan's outcomes exist from 0, so rate()/increase() see the first run
        zeros = {
            (m.Plan.RESET.value, s.value): 0 for s in m.TERMINAL if s is not m.RunState.DRAINED
        }
        out += [
            reading("fleetd_remediation_runs_total", n, plan=plan, outcome=state)
            for (plan, state), n in sorted((zeros | dict(counts)).items())
        ]
        return out

    def evidence_readings(self, now: float) -> list[Reading]:
        """The evidence directory's health for the storage alert: 1 while the last bundle could
        not be written even after dropping the oldest, and how many were dropped for room."""
        evidence = self.executor.evidence
        if evidence is None:
            return []
        store = evidence.store
        failing = 1.0 if store.failing() else 0.0
        return [
            Reading("fleetd_evidence_write_failing", make_labels({}), failing, now),
            Reading(
                "fleetd_evidence_dropped_for_space_total",
                make_labels({}),
                float(store.dropped_for_space),
                now,
            ),
        ]

    def runs(self, *, limit: int = 50) -> list[m.Run]:
        return self._journal.runs(self.node, limit=limit)

    def run(self, run_id: str) -> m.Run | None:
        return self.executor.get(run_id)

    def events(self, run_id: str | None = None, *, limit: int = 1000) -> list[RemediationEvent]:
        return self._journal.events(run_id=run_id, node=self.node, limit=limit)

    def rma_records(self, *, physical_only: bool = False) -> list[RmaRecord]:
        """This node's RMA records, one per physical GPU (by serial), newest change first."""
        book = self.executor.rma
        return [] if book is None else book.records(physical_only=physical_only)

    def rma_record(self, serial: str) -> RmaRecord | None:
        book = self.executor.rma
        return None if book is None else book.record(serial)

    def evidence_bundle(self, run_id: str, phase: str | None = None) -> EvidenceFile | None:
        """A bundle the run's journal names (the newest, or that of ``phase``), read whole;
        None when the run has none or its file is gone (retention dropped it)."""
        run = self.run(run_id)
        if run is None:
            return None
        found = [b for b in run.bundles if phase is None or b.phase == phase]
        if not found:
            return None
        bundle = found[-1]
        path = Path(bundle.path)
        store = self.executor.evidence.store if self.executor.evidence is not None else None
        if store is not None and path.parent.resolve() != store.directory.resolve():
            return None  # only ever a file of the evidence directory
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return EvidenceFile(run_id, bundle.phase, path.name, data, bundle.sha256)

    # ---- helpers ------------------------------------------------------------------------
    def _open(
        self,
        run_id: str,
        plan: m.Plan,
        trigger: m.Trigger,
        gpus: tuple[int, ...],
        settings: m.RunSettings,
        now: float,
        *,
        dry_run: bool,
        why: str,
        escalated: bool = False,
        workers: tuple[str, ...] | None = None,
        settle: float = 0.0,
    ) -> str:
        identities = self._identities()
        unit = tuple(
            m.UnitGpu(i, identities[i].uuid, identities[i].bdf, identities[i].serial)
            if i in identities
            else m.UnitGpu(i)
            for i in gpus
        )
        held: set[int] = set()
        if plan is not m.Plan.UNDRAIN:
            # a dry run's hold is pretended: its GPUs still serve
            held = {
                i for r in self._journal.holding(self.node) if not r.dry_run for i in r.gpu_indices
            }
        if workers is None:
            # a worker on a held GPU stays out: this run must not bring it back
            workers = tuple(
                w.name for w in self._workers if set(w.gpus) & set(gpus) and not set(w.gpus) & held
            )
        run, commands = m.plan_run(
            run_id=run_id,
            node=self.node,
            plan=plan,
            trigger=trigger,
            gpus=unit,
            workers=workers,
            settings=settings,
            now=now,
            dry_run=dry_run,
            held_gpus=tuple(sorted(held)),
            settle=settle,
            outcome=why if plan is m.Plan.QUARANTINE else None,
        )
        note = m.Record("policy", why, severity="warning" if escalated else "info")
        first, *rest = commands
        self.executor.start(run, [first, note, *rest], now)
        return run_id

    def _unit(self, plan: m.Plan, gpu: int | None) -> tuple[int, ...]:
        if plan is m.Plan.REBOOT or gpu is None:
            return tuple(sorted(self._identities()))
        if plan is m.Plan.RESET and self.config.reset_unit == "hive":
            unit = set(self._backend.reset_unit(gpu)) | {gpu}
            return tuple(sorted(unit))
        return (gpu,)

    def _unit_note(self, plan: m.Plan, gpu: int | None) -> str | None:
        """The backend's reason for a reset unit wider than the hive (unknown topology)."""
        if plan is not m.Plan.RESET or gpu is None or self.config.reset_unit != "hive":
            return None
        explain = getattr(self._backend, "reset_unit_note", None)
        note = explain(gpu) if explain is not None else None
        return note if isinstance(note, str) else None

    def _identities(self) -> dict[int, GpuIdentity]:
        return {g.index: g for g in self._backend.gpus()}

    def _check_gpu(self, gpu: int) -> None:
        if gpu not in self._identities():
            raise RemedyError(f"no GPU {gpu} on {self.node}")

    def _manual_settings(self) -> m.RunSettings:
        return settings_for(self.config, dry_run=False, escalate_to_reboot=False)

    def _node_event(
        self,
        kind: str,
        message: str,
        now: float,
        *,
        trigger: m.Trigger | None = None,
        severity: m.Severity = "info",
        raise_alert: bool = False,
        resolve_alert: bool = False,
        key: str | None = None,
        actor: str | None = None,
    ) -> None:
        gpus = (trigger.gpu,) if trigger is not None and trigger.gpu is not None else ()
        event = RemediationEvent(
            event_id=f"{self.node}:{kind}:{self._new_id()}",
            node=self.node,
            kind=kind,
            message=message,
            at=now,
            severity=severity,
            dry_run=self.config.mode == "dry-run",
            gpus=gpus,
            trigger=trigger,
            raise_alert=raise_alert,
            resolve_alert=resolve_alert,
            alert_key=key or alert_key(self.node, gpus),
            actor=actor,
        )
        self._journal.append_events([event])
        self.executor.redeliver(now, force=True)


def _gpus(indices: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in indices)
