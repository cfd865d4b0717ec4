"""The daemon: builds every part from the config and runs the tick and the scheduled jobs.

This is the only module with threads, the job runner and the real clock. One tick:

    now = clock.now() → Poller.poll(now) → MemoryWindow + store (one transaction)
        → RuleEngine.evaluate(query, now) → transitions → Dispatcher.submit (durable)
                                                      → Remediation.handle

Other jobs (``fleetd.jobs``: one thread each on the monotonic clock, so a job never
overlaps itself, a late run is counted, not stacked, and wall-clock steps change nothing):
vLLM scrape, alert delivery, remediation, store maintenance, GPU rediscovery, fleet
heartbeat, the clock check, the watchdog. A failing job logs its failure; it never stops
the others.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

import requests
from prometheus_client import CollectorRegistry

from fleetd import __version__
from fleetd.alert.dispatch import Dispatcher
from fleetd.api.server import HttpServer, Router
from fleetd.clock import Clock, SteadyClock
from fleetd.clockwatch import check_clock, resume_after_restart
from fleetd.collect.abi import amdsmi_info
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.exporter import FleetdExporter
from fleetd.collect.rediscovery import REDISCOVER_INTERVAL_S, REDISCOVER_PERIOD_S, Rediscovery
from fleetd.config import FleetdConfig, absent_gpus, load_config
from fleetd.doctor import GPU_CATALOG, preflight
from fleetd.errors import ConfigError, Problem
from fleetd.events_wiring import EventWiring
from fleetd.fleet_wiring import start_heartbeat
from fleetd.gpu_wiring import SimContext, carry_over_uuids, open_backend
from fleetd.handoff import AlertStateKeeper, Handoff
from fleetd.http_wiring import serve_http
from fleetd.jobs import JobRunner
from fleetd.kpi_wiring import build_reliability
from fleetd.logs import get_logger
from fleetd.model import Reading, Snapshot, Transition
from fleetd.parts import build_dispatcher, build_engine, build_node_remediation, build_poller
from fleetd.polltiming import PollTiming
from fleetd.progress import PollProgress
from fleetd.reload import apply_reload, log_unknown_metrics, reload_logged
from fleetd.remedy.events import ChangeSink
from fleetd.remedy.reliability import REFRESH_S as KPI_REFRESH_S
from fleetd.remedy.reliability import ReliabilityReporter
from fleetd.remedy.service import Remediation
from fleetd.rules.alert_events import log_alert_events
from fleetd.rules.config import load_rules
from fleetd.rules.coverage import InputCoverage
from fleetd.rules.health import ServiceWatch, out_of_service, status_line
from fleetd.rules.state_store import AlertStateStore
from fleetd.rules.trust import log_shadow_events
from fleetd.sdnotify import SystemdNotify, watchdog_interval
from fleetd.selfmetrics import SelfMetrics
from fleetd.store.functions import at_ms
from fleetd.store.hybrid import HybridQuery, warm_memory
from fleetd.store.memory import MemoryWindow
from fleetd.store.resilient import ResilientStore
from fleetd.vllm_wiring import VllmWiring

if TYPE_CHECKING:  # loaded only with registry.url (fleetd/fleet_wiring.py)
    from fleetd.registry.heartbeat import RegistryHeartbeat

log = get_logger("daemon")

CLOCK_CHECK_INTERVAL_S = 1.0
__all__ = ["REDISCOVER_INTERVAL_S", "REDISCOVER_PERIOD_S", "Daemon", "SimContext", "open_backend"]


class Daemon:
    """Everything fleetd runs on one node; ``start`` → ``run_until_stopped`` → ``stop``."""

    def __init__(
        self,
        config: FleetdConfig,
        *,
        clock: Clock,
        config_path: Path | None = None,
        notifier: SystemdNotify | None = None,
        backend: AmdSmiBackend | None = None,
        sim: SimContext | None = None,
        time_scale: float = 1.0,
        on_tick: Callable[[Daemon, Snapshot, list[Transition]], None] | None = None,
        console_stream: TextIO | None = None,
        remediation_observer: ChangeSink | None = None,
        schedule_jobs: bool = True,
        loader: Callable[[Path], FleetdConfig] = load_config,
    ) -> None:
        self.config = config
        self.loader = loader  # how a reload reads config_path (``run`` adds --simulate)
        self.clock = clock
        self.config_path = config_path
        self.notifier = notifier or SystemdNotify()
        self.time_scale = time_scale
        self.on_tick = on_tick
        self.console_stream = console_stream
        self.remediation_observer = remediation_observer
        self.schedule_jobs = schedule_jobs  # tests drive the jobs by hand on a fake clock
        self.heartbeat: RegistryHeartbeat | None = None
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self._wake = threading.Event()  # the main thread sleeps until a signal or a stop
        self._reload_lock = threading.Lock()
        self._started = False
        self.progress = PollProgress(self.notifier, clock)  # READY, STATUS, WATCHDOG
        self.last_snapshot: Snapshot | None = None
        self._eval_lock = threading.Lock()  # one rules evaluation at a time (poll or event)
        self.events: EventWiring | None = None  # the kernel log and CPER sources (start)
        self._evaluated_at = 0.0

        rules = load_rules(config.rules)  # bad rule files fail before the GPUs are touched
        log_unknown_metrics(rules.unknown)  # rules that load and can never fire
        if backend is None:
            backend, sim = open_backend(config, clock)
        self.backend = backend
        self.sim = sim
        node = config.node.name
        self.poller = build_poller(config, backend, clock)
        self.rediscovery = Rediscovery(backend, self.poller, busy=self._remediation_active)
        self.registry = CollectorRegistry()
        self.exporter = FleetdExporter(
            self.registry, version=__version__, node=node, node_labels=config.node.labels
        )
        self.memory = MemoryWindow(config.store.memory_retention)
        self.coverage = InputCoverage(GPU_CATALOG)  # which rules can never fire here
        self.store = ResilientStore(
            config.store.database_url(config.state_dir), config.store, node=node
        )
        self.query: HybridQuery | None = None
        self.engine = build_engine(config, rules, clock)
        self.session = requests.Session()
        self.vllm = VllmWiring.build(config.vllm, self.session)
        self.dispatcher: Dispatcher | None = None
        self.remediation: Remediation | None = None
        self.service: ServiceWatch | None = None
        self.handoff: Handoff | None = None
        self.self_metrics: SelfMetrics | None = None
        self.reliability: ReliabilityReporter | None = None
        self.scheduler = JobRunner()
        self.router = Router()
        self.http: HttpServer | None = None

    @property
    def timing(self) -> PollTiming:
        poll = self.config.poll
        return PollTiming(poll.interval, poll.gpu_timeout, self.config.rules.stale_polls)

    # ------------------------------------------------------------------------------ start / stop
    def start(self) -> None:
        """Open storage, restore state, serve HTTP, run the first poll, start the jobs."""
        now = self.now()
        self.notifier.status("starting")
        try:
            self.config.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # the store says what it does without it (memory only)
            log.error("state_dir_unusable", path=str(self.config.state_dir), error=exc.strerror)
        self.store.start(now)
        db = self.store.db
        if db is None:
            raise SystemExit(
                f"fleetd: cannot open the state database: {self.store.health().reason}"
            )
        alert_state = AlertStateStore(db)
        entries, last_eval_at = alert_state.load()
        if last_eval_at is not None and isinstance(self.clock, SteadyClock):
            resume_after_restart(self.clock, last_eval_at, now)
            now = self.now()
        carry_over_uuids(self.config.state_dir, self.backend, self.store, now)
        if self.store.samples is not None:
            loaded = warm_memory(self.memory, self.store, now=now)
            log.info("memory_window_warmed", samples=loaded)
        self.query = HybridQuery(self.memory, self.store)
        self.engine.restore(entries, last_eval_at=last_eval_at, now=now)
        self.alert_state = AlertStateKeeper(alert_state, self.engine)
        self.dispatcher = build_dispatcher(
            self.config,
            db,
            now=now,
            session=self.session,
            stream=self.console_stream,
            backend=self.backend,
        )
        self.remediation = build_node_remediation(
            self.config,
            db,
            backend=self.backend,
            poller=self.poller,
            clock=self.clock,
            dispatcher=self.dispatcher,
            observer=self.remediation_observer,
            store=self.store,
            engine=self.engine,
        )
        remedy = self.remediation
        if remedy is not None:  # the headroom of a proactive validation: the rules' query
            remedy.attach_query(self.query)
        if remedy is not None:  # health says which GPUs remediation has out of service
            self.service = ServiceWatch(lambda: out_of_service(remedy.holds(), remedy.run))
            self.engine.service = self.service
        self.handoff = Handoff(self.dispatcher, remedy, self._storage_down)
        self.reliability = build_reliability(
            self.config, db, backend=self.backend, store=self.store, engine=self.engine
        )
        self.self_metrics = SelfMetrics(
            self.exporter,
            engine=self.engine,
            store=self.store,
            coverage=self.coverage,
            memory=self.memory,
            dispatcher=self.dispatcher,
            remediation=remedy,
            fleet=self._fleet_readings,
            kpi=self.reliability.readings,
        )
        self.events = EventWiring.build(self)
        self.services, self.http = serve_http(self)
        self.exporter.update_group("backend", [amdsmi_info(self.backend.abi, now)])
        rules = self.engine.rules
        self.exporter.update_group("doctor", preflight(self.config, self.backend, rules, now))
        self.tick()
        self._schedule()
        if self.events is not None:
            self.events.start()
        self._start_heartbeat()
        if self.schedule_jobs:
            self.scheduler.start()
        self._started = True
        gpus = self.backend.gpus()
        for warning in absent_gpus(self.config, {gpu.index for gpu in gpus}):
            log.warning("config_gpu_absent", detail=warning)  # not fatal: see absent_gpus
        log.info("fleetd_started", node=self.config.node.name, gpus=len(gpus))

    def job_interval(self, seconds: float) -> float:
        """A job's period in real seconds (the demo's clock runs ``time_scale`` times faster)."""
        return max(seconds / self.time_scale, 0.05)

    def _schedule(self) -> None:
        """The interval jobs (``fleetd.jobs``: monotonic, never overlapped, failures logged)."""
        cfg = self.config
        add, every = self.scheduler.add, self.job_interval
        add("poll", self.tick, every(cfg.poll.interval), on_missed=self._on_missed)
        add("deliver", self.deliver, every(1.0))
        add("remediate", self.remediate, every(1.0))
        add("store", self.maintain, every(cfg.store.maintenance_interval))
        add("kpi", self.refresh_kpi, every(KPI_REFRESH_S))
        if self.events is not None and self.events.service.cper is not None:
            add("cper", self.events.poll_cper, every(cfg.events.cper.interval))
        if self.vllm is not None:
            add("vllm", self.scrape_vllm, every(cfg.vllm.scrape_interval))
        if isinstance(self.clock, SteadyClock):  # real seconds: it watches the real clock
            self.check_clock()  # the offset is on /metrics from the first scrape
            add("clock", self.check_clock, CLOCK_CHECK_INTERVAL_S)
        keepalive = watchdog_interval()
        if keepalive is not None:  # polls slower than the watchdog still prove progress
            add("watchdog", self.watchdog, keepalive)

    def _on_missed(self, missed: int) -> None:
        for _ in range(missed):
            self.exporter.record_missed_poll()
        log.warning(
            "poll_overrun", skipped=missed, detail="previous poll still running; not stacked"
        )

    def check_clock(self) -> None:
        if isinstance(self.clock, SteadyClock):
            self.exporter.update_group("clock", check_clock(self.clock))

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads. Call before ``start``: systemd may signal as
        soon as READY=1 is out, and SIGHUP's default action would kill the process."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_signal)

    def run_until_stopped(self) -> None:
        """Serve until a stop is requested, handling reload requests. Main thread only; it
        sleeps until a signal or ``request_stop`` wakes it (no timer wake-ups)."""
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        (self._reload_requested if signum == signal.SIGHUP else self._stop).set()
        self._wake.set()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def stop(self) -> None:
        """Stop the jobs, let a running tick finish, close everything. Safe to call twice."""
        self.notifier.stopping()
        self.request_stop()
        if self.events is not None:
            self.events.stop()
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.http is not None:
            self.http.stop()
            self.http = None
        if self.dispatcher is not None:
            self.dispatcher.close()
        if self.heartbeat is not None:
            self.heartbeat.close()
            self.heartbeat = None
        self.poller.close()
        self.backend.close()
        self.store.close()
        self.session.close()
        log.info("fleetd_stopped")

    # ------------------------------------------------------------------------------ the jobs
    def now(self) -> float:
        """The clock on the millisecond grid stored timestamps use (see store.functions)."""
        return at_ms(self.clock.now())

    def tick(self) -> None:
        """One poll → rules → alerts and remediation → store (one transaction)."""
        now = self.now()
        if self.sim is not None and self.sim.runner is not None:
            for line in self.sim.runner.advance(now):
                log.info("scenario_step", step=line)
        snapshot = self.poller.poll(now)
        self.coverage.observe(snapshot.readings)
        # slow readings not read this poll come back with the time they were read: the window
        # and the store already hold them, once
        fresh = [r for r in snapshot.readings if r.ts >= snapshot.ts]
        self.memory.append(fresh)
        self.memory.prune(now)
        self.exporter.update(snapshot)
        self.exporter.update_group("amdsmi", self.backend.meter.readings(now))
        self.last_snapshot = snapshot
        with self._eval_lock:
            at = max(now, self._evaluated_at)  # an event's evaluation may have run meanwhile
            events = self.events
            event_series = events.readings(at, snapshot.readings) if events is not None else []
            transitions, derived = self._evaluate(at, event_series)
        self.store.append([*fresh, *derived, *event_series], now=now, also=self.alert_state)
        self.progress.poll_done(self.status_line(snapshot))
        if self.on_tick is not None:
            self.on_tick(self, snapshot, transitions)

    def evaluate_now(self) -> list[Transition]:
        """Evaluate the rules at once, between polls: an event arrived (fleetd.events). The
        alerts it starts are handed to the outbox and remediation, and delivered at once."""
        if self.query is None or self.dispatcher is None or self.events is None:
            return []
        with self._eval_lock:
            now = max(self.now(), self._evaluated_at)
            event_series = self.events.readings(now)
            transitions, _derived = self._evaluate(now, event_series)
        self.store.append(event_series, now=now, also=self.alert_state)
        if transitions:
            self.deliver()
        return transitions

    def _evaluate(self, now: float, extra: list[Reading]) -> tuple[list[Transition], list[Reading]]:
        """Rules → transitions → outbox, remediation, event log, alert state, self metrics
        (under ``_eval_lock``); ``extra`` readings (the event series) join the window first."""
        assert self.query is not None and self.handoff is not None
        assert self.self_metrics is not None
        self._evaluated_at = now
        if extra:
            self.memory.append(extra)
            self.exporter.update_group("events", extra)
        if self.service is not None:  # read before the engine's lock is taken
            self.service.refresh()
        held = self.remediation.held_triggers() if self.remediation is not None else ()
        transitions = self.engine.evaluate(self.query, now, held=held)
        # the outbox first: if we die before the state is saved, the restored engine sees the
        # transition again and the dispatcher (which already has it) does not send it twice.
        self.handoff.submit(transitions, now)
        if transitions:  # the outbox has them: deliver beside the writes below, not after
            self.scheduler.run_soon("deliver")
        log_alert_events(transitions, self.store.append_event)  # for history and explain
        log_shadow_events(self.engine.take_shadow(), self.engine.rules, self.store.append_event)
        # while the outbox holds notifications in memory only, so does the alert state: after a
        # crash the rules re-announce what the database never recorded (ride: see the keeper)
        self.alert_state.save(hold=self.handoff.pending() or self._storage_down(), ride=True)
        return transitions, self.self_metrics.publish(now)

    def _storage_down(self) -> bool:
        """The database cannot be written (as far as the store or the outbox know): the
        poll writes nothing it would wait for."""
        offline = self.dispatcher is not None and self.dispatcher.offline
        return offline or (self.store.health().degraded and self.store.memory_only is None)

    def _remediation_active(self) -> bool:
        return self.remediation is not None and bool(self.remediation.executor.active())

    def poll_age(self) -> float | None:
        """Seconds since the last poll finished (``PollProgress.age``); None before it."""
        return self.progress.age()

    def watchdog(self) -> None:
        """WATCHDOG=1 between polls, only while polls keep finishing on time."""
        self.progress.watchdog(self.timing)

    def status_line(self, snapshot: Snapshot) -> str:
        """One line for systemd's STATUS=: healthy count, problems, storage state."""
        return status_line(self.engine.health(), snapshot, self.store.health().degraded)

    def deliver(self) -> None:
        """Flush due alert groups and deliver the outbox (waits while storage is down)."""
        if self.dispatcher is not None:
            self._unless_storage_down(
                self.dispatcher.tick, self.now(), "alert_delivery_waiting_for_storage"
            )

    def refresh_kpi(self) -> None:
        """Recompute the reliability report /metrics and the heartbeat show (its own job:
        reading a window of history never lengthens a poll)."""
        if self.reliability is None:
            return
        try:
            self.reliability.refresh(self.now())
        except Exception as exc:  # storage down: the last report stays until it is back
            log.warning("kpi_refresh_failed", error=repr(exc))

    def remediate(self) -> None:
        """Advance remediation runs; a run never acts without its journal, so it waits too."""
        if self.remediation is None or self.handoff is None:
            return
        now = self.now()
        self.handoff.to_remediation(now, wait=True)
        self._unless_storage_down(self.remediation.tick, now, "remediation_waiting_for_storage")

    def _unless_storage_down(self, step: Callable[[float], object], now: float, event: str) -> None:
        """Run ``step(now)``; while storage is degraded its failure is logged, not raised."""
        try:
            step(now)
        except Exception as exc:
            if not self.store.health().degraded:
                raise
            log.warning(event, error=repr(exc))

    def maintain(self) -> None:
        """Store maintenance, and a re-enumeration of the GPUs when due (``rediscovery``)."""
        now = self.now()
        self.store.maintenance(now)
        self.rediscovery.maybe(now)

    def scrape_vllm(self) -> None:
        if self.vllm is not None:
            self.vllm.scrape(
                self.now(),
                memory=self.memory,
                store=self.store,
                exporter=self.exporter,
                last_snapshot=self.last_snapshot,
            )

    # ------------------------------------------------------------------------------ reload
    def reload(self) -> bool:
        """SIGHUP: re-read fleetd.yaml and the rules; never raises (``fleetd.reload``)."""
        return reload_logged(self)

    def reload_or_raise(self) -> None:
        """Re-read fleetd.yaml and the rules, all or nothing (SIGHUP and the API); any problem
        raises ConfigError and the old config and rules keep running (``fleetd.reload``)."""
        if self.config_path is None:
            raise ConfigError(
                [Problem("<built-in config>", None, None, "", "no config file to reload")]
            )
        with self._reload_lock:  # SIGHUP (main thread) and the API may ask at once
            apply_reload(self)

    def ready_again(self) -> None:
        snapshot = self.last_snapshot
        self.notifier.ready(self.status_line(snapshot) if snapshot is not None else "running")

    # ------------------------------------------------------------------------------ fleet
    def _start_heartbeat(self) -> None:
        self.heartbeat = start_heartbeat(
            self.config,
            self.services,
            backend=self.backend,
            poller=self.poller,
            remediation=self.remediation,
            serving=self.vllm.peers if self.vllm is not None else None,
        )
        if self.heartbeat is not None:
            interval = self.config.registry.heartbeat_interval
            self.scheduler.add("heartbeat", self.beat, self.job_interval(interval))

    def _fleet_readings(self, now: float) -> list[Reading]:
        return self.heartbeat.readings(now) if self.heartbeat is not None else []

    def beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat(self.now())
