"""The daemon: builds every part from the config and runs the tick and the scheduled jobs.

This is the only module with threads, the scheduler and the real clock. One tick:

    now = clock.now() → Poller.poll(now) → MemoryWindow + store (one transaction)
        → RuleEngine.evaluate(query, now) → transitions → Dispatcher.submit (durable)
                                                      → Remediation.handle

Other jobs (APScheduler, each ``max_instances=1`` and ``coalesce=True`` so a job never
overlaps itself and a late run is counted, not stacked): vLLM scrape, alert delivery,
remediation, store maintenance, GPU rediscovery, fleet heartbeat. A failing job logs and
counts its failure; it never stops the others.
"""

from __future__ import annotations

import signal
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import requests
from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from fleetd import __version__
from fleetd.alert.dispatch import Dispatcher
from fleetd.api.routes import build_api_router
from fleetd.api.server import HttpServer, Request, Response, Router
from fleetd.api.services import ApiServices
from fleetd.clock import Clock
from fleetd.collect.amdsmi_backend import AmdSmiBackend, load_amdsmi
from fleetd.collect.collectors import default_collectors
from fleetd.collect.exporter import FleetdExporter
from fleetd.collect.poller import Poller
from fleetd.collect.vllm import TokensPerJouleTracker, VllmScraper
from fleetd.config import FleetdConfig, load_config
from fleetd.errors import ConfigError, Problem
from fleetd.logs import get_logger
from fleetd.model import GpuIdentity, HealthState, Reading, Snapshot, Transition
from fleetd.registry.heartbeat import RegistryHeartbeat, default_address
from fleetd.remedy.events import ChangeSink, RemediationEvent
from fleetd.remedy.notify import DispatcherSink, EventLogSink
from fleetd.remedy.ports import ProcessInfo
from fleetd.remedy.service import Remediation
from fleetd.remedy.wiring import build_remediation
from fleetd.rules.config import engine_settings, load_rules
from fleetd.rules.engine import RuleEngine
from fleetd.rules.metrics import rule_readings
from fleetd.rules.state import StateChanges, merge_changes
from fleetd.sdnotify import Notifier, watchdog_interval
from fleetd.sim import ScenarioRunner, SimNode, SimulatedAmdSmi, build_node, load_scenario
from fleetd.store.alert_state import AlertStateStore
from fleetd.store.functions import at_ms
from fleetd.store.hybrid import HybridQuery, warm_memory
from fleetd.store.memory import MemoryWindow
from fleetd.store.metrics import store_readings
from fleetd.store.resilient import ResilientStore

log = get_logger("daemon")

REDISCOVER_INTERVAL_S = 30.0
RESTART_ONLY = (
    "node",
    "state_dir",
    "backend",
    "http",
    "logging",
    "store",
    "vllm",
    "api",
    "remediation",
    "registry",
)
"""Sections built into running parts at start: a reload reports a change, keeps the value."""
POLL_RESTART_ONLY = ("gpu_timeout", "slow_interval")


@dataclass
class SimContext:
    """The simulated node behind a ``--simulate`` daemon, and its scenario."""

    node: SimNode
    runner: ScenarioRunner | None


def open_backend(config: FleetdConfig, clock: Clock) -> tuple[AmdSmiBackend, SimContext | None]:
    """The real amdsmi library, or the simulator when the config asks for it.

    Raises BackendError (one clear line) when amdsmi cannot be loaded.
    """
    settings = config.backend
    if settings.kind == "amdsmi":
        return AmdSmiBackend(load_amdsmi()), None
    scenario = load_scenario(settings.scenario) if settings.scenario else None
    model = scenario.model if scenario is not None else settings.simulated_model
    seed = scenario.seed if scenario is not None and settings.seed == 0 else settings.seed
    node = build_node(model, seed=seed, clock=clock)
    runner = ScenarioRunner(node, scenario, start=clock.now()) if scenario is not None else None
    return AmdSmiBackend(SimulatedAmdSmi(node)), SimContext(node, runner)


class FanoutSink:
    """Hands every remediation step to several sinks (the dispatcher, the demo's timeline)."""

    def __init__(self, sinks: list[ChangeSink]) -> None:
        self._sinks = sinks

    def submit_change(self, event: RemediationEvent, now: float) -> None:
        for sink in self._sinks:
            sink.submit_change(event, now)


class SerialPoller:
    """The one Poller, shared by the tick and remediation's verification, never overlapped."""

    def __init__(self, poller: Poller) -> None:
        self._poller = poller
        self._lock = threading.Lock()

    def poll(self, now: float) -> Snapshot:
        with self._lock:
            return self._poller.poll(now)

    def close(self) -> None:
        with self._lock:
            self._poller.close()

    def rediscover(self, backend: AmdSmiBackend) -> list[GpuIdentity]:
        """Re-initialise amdsmi between two polls, never during one: ``amdsmi_shut_down``
        invalidates the handles a poll's per-GPU calls are using (amdsmi.md: keep calls
        on one thread or behind a lock)."""
        with self._lock:
            return backend.rediscover()


class PollSafeBackend:
    """The backend as remediation drives it (``GpuControl``): its rediscovery after a reset
    waits for a running poll, like the daemon's own."""

    def __init__(self, backend: AmdSmiBackend, poller: SerialPoller) -> None:
        self._backend = backend
        self._poller = poller

    def gpus(self) -> list[GpuIdentity]:
        return self._backend.gpus()

    def reset_unit(self, index: int) -> list[int]:
        return self._backend.reset_unit(index)

    def reset_gpu(self, index: int) -> None:
        self._backend.reset_gpu(index)

    def processes(self, index: int) -> Sequence[ProcessInfo]:
        return self._backend.processes(index)

    def compute_processes(self) -> list[int]:
        return self._backend.compute_processes()

    def rediscover(self) -> list[GpuIdentity]:
        return self._poller.rediscover(self._backend)


class Daemon:
    """Everything fleetd runs on one node; ``start`` → ``run_until_stopped`` → ``stop``."""

    def __init__(
        self,
        config: FleetdConfig,
        *,
        clock: Clock,
        config_path: Path | None = None,
        notifier: Notifier | None = None,
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
        self.notifier = notifier or Notifier()
        self.time_scale = time_scale
        self.on_tick = on_tick
        self.console_stream = console_stream
        self.remediation_observer = remediation_observer
        self.schedule_jobs = schedule_jobs  # tests drive the jobs by hand on a fake clock
        self.heartbeat: RegistryHeartbeat | None = None
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self._reload_lock = threading.Lock()
        self._started = False
        self._ready_sent = False
        self._last_rediscover = 0.0
        self.last_snapshot: Snapshot | None = None
        self._unsaved: list[StateChanges] = []
        self._to_notify: list[Transition] = []
        self._arriving: deque[Transition] = deque()  # from the poll, for remediation
        self._to_remediate: list[Transition] = []  # taken from _arriving, not yet handed over
        self._handoff_lock = threading.Lock()  # one hand-over at a time (poll or remediation)

        rules = load_rules(config.rules)  # bad rule files fail before the GPUs are touched
        if backend is None:
            backend, sim = open_backend(config, clock)
        self.backend = backend
        self.sim = sim
        node = config.node.name
        self.poller = SerialPoller(
            Poller(
                backend,
                default_collectors(processes_interval=config.poll.slow_interval),
                node=node,
                gpu_timeout=config.poll.gpu_timeout,
                timer=clock.monotonic,
            )
        )
        self.registry = CollectorRegistry()
        self.exporter = FleetdExporter(self.registry, version=__version__)
        self.memory = MemoryWindow(config.store.memory_retention)
        self.store = ResilientStore(
            config.store.database_url(config.state_dir), config.store, node=node
        )
        self.query: HybridQuery | None = None
        self.engine = RuleEngine(
            rules,
            engine_settings(config.rules, config.poll.interval),
            node=node,
            timer=clock.monotonic,
        )
        self.session = requests.Session()
        self.vllm = (
            VllmScraper(config.vllm.workers, self.session, timeout=config.vllm.timeout)
            if config.vllm.workers
            else None
        )
        self.tokens = TokensPerJouleTracker(config.vllm.workers)
        self.dispatcher: Dispatcher | None = None
        self.remediation: Remediation | None = None
        self.scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )
        self.router = Router()
        self.http: HttpServer | None = None

    # ------------------------------------------------------------------------------ start / stop
    def start(self) -> None:
        """Open storage, restore state, serve HTTP, run the first poll, start the jobs."""
        now = self.now()
        self.notifier.status("starting")
        try:
            self.config.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = self.config.state_dir
            raise SystemExit(f"fleetd: cannot create {where}: {exc.strerror}") from None
        self.store.open(now)
        db = self.store.db
        if db is None:
            raise SystemExit(
                f"fleetd: cannot open the state database: {self.store.health().reason}"
            )
        if self.store.samples is not None:
            loaded = warm_memory(self.memory, self.store, now=now)
            log.info("memory_window_warmed", samples=loaded)
        self.query = HybridQuery(self.memory, self.store)
        self.alert_state = AlertStateStore(db)
        entries, last_eval_at = self.alert_state.load()
        self.engine.restore(entries, last_eval_at=last_eval_at, now=now)
        self.dispatcher = Dispatcher(
            self.config.alerting,
            db,
            node=self.config.node.name,
            now=now,
            session=self.session,
            stream=self.console_stream,
        )
        sinks: list[ChangeSink] = [DispatcherSink(self.dispatcher)]
        if self.remediation_observer is not None:
            sinks.append(self.remediation_observer)
        self.remediation = build_remediation(
            self.config,
            db=db,
            backend=PollSafeBackend(self.backend, self.poller),
            poller=self.poller,
            clock=self.clock,
            sink=FanoutSink(sinks),
            events=EventLogSink(self.store.append_event),
        )
        self._mount_routes()
        http = self.config.http
        try:
            self.http = HttpServer(
                self.router, http.bind, http.port, tls_cert=http.tls_cert, tls_key=http.tls_key
            )
        except OSError as exc:  # port in use, address not on this host, TLS files unreadable
            why = exc.strerror or str(exc)
            listen = f"{http.bind}:{http.port}"
            raise SystemExit(
                f"fleetd: cannot serve HTTP on {listen}: {why} (http: in the config)"
            ) from None
        self.http.start()
        log.info("http_listening", address=self.http.address)
        self.tick()
        self._schedule()
        self._start_heartbeat()
        if self.schedule_jobs:
            self.scheduler.start()
        self._started = True
        log.info("fleetd_started", node=self.config.node.name, gpus=len(self.backend.gpus()))

    def _interval(self, seconds: float) -> float:
        return max(seconds / self.time_scale, 0.05)

    def _schedule(self) -> None:
        cfg = self.config
        add = self.scheduler.add_job
        add(self._job(self.tick), "interval", seconds=self._interval(cfg.poll.interval), id="poll")
        add(self._job(self.deliver), "interval", seconds=self._interval(1.0), id="deliver")
        add(self._job(self.remediate), "interval", seconds=self._interval(1.0), id="remediate")
        add(
            self._job(self.maintain),
            "interval",
            seconds=self._interval(cfg.store.maintenance_interval),
            id="store",
        )
        if self.vllm is not None:
            add(
                self._job(self.scrape_vllm),
                "interval",
                seconds=self._interval(cfg.vllm.scrape_interval),
                id="vllm",
            )
        keepalive = watchdog_interval()
        if keepalive is not None:  # polls slower than the watchdog still prove progress
            add(self._job(self.watchdog), "interval", seconds=keepalive, id="watchdog")
        self.scheduler.add_listener(self._on_missed, EVENT_JOB_MAX_INSTANCES)

    def _job(self, body: Callable[[], None]) -> Callable[[], None]:
        name = body.__name__

        def run() -> None:
            try:
                body()
            except Exception as exc:  # one failing job never stops the others
                log.exception("job_failed", job=name, error=repr(exc))

        run.__name__ = run.__qualname__ = name
        return run

    def _on_missed(self, event: JobExecutionEvent) -> None:
        if event.job_id == "poll":
            self.exporter.record_missed_poll()
            log.warning("poll_overrun", detail="previous poll still running; this one skipped")

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads. Call before ``start``: systemd may signal as
        soon as READY=1 is out, and SIGHUP's default action would kill the process."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_signal)

    def run_until_stopped(self) -> None:
        """Serve until a stop is requested, handling reload requests. Main thread only."""
        while not self._stop.is_set():
            self._stop.wait(0.5)
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload_requested.set()
        else:
            self._stop.set()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        """Stop the jobs, let a running tick finish, close everything. Safe to call twice."""
        self.notifier.stopping()
        self._stop.set()
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
        self.memory.append(snapshot.readings)
        self.memory.prune(now)
        self.exporter.update(snapshot)
        self.last_snapshot = snapshot
        assert self.query is not None and self.dispatcher is not None
        transitions = self.engine.evaluate(self.query, now)
        # the outbox first: if we die before the state is saved, the restored engine sees the
        # transition again and the dispatcher (which already has it) does not send it twice.
        # So the state waits while a hand-off waits: saved first, a crash would lose it.
        self._hand_off(transitions, now)
        self._persist_alert_state(hold=self._handoff_pending())
        derived = self._publish_self_metrics(now)
        self.store.append([*snapshot.readings, *derived], now=now)
        self._report_progress(snapshot)
        if self.on_tick is not None:
            self.on_tick(self, snapshot, transitions)

    def _hand_off(self, transitions: list[Transition], now: float) -> None:
        """Give transitions to the outbox and to remediation, both of which write the
        database before they act. While it cannot be written (locked, disk full) they wait
        here in memory, in order, and go out once it can: none is lost or reordered."""
        assert self.dispatcher is not None
        self._to_notify.extend(transitions)
        self._arriving.extend(transitions)  # a deque: appending never waits
        try:
            if self._to_notify:
                self.dispatcher.submit(self._to_notify, now)
                self._to_notify.clear()
        except Exception as exc:
            log.warning("alert_submit_deferred", pending=len(self._to_notify), error=repr(exc))
        self._hand_to_remediation(now, wait=False)

    def _hand_to_remediation(self, now: float, *, wait: bool) -> None:
        """Give waiting transitions to remediation, in order. The poll does not ``wait`` while
        a run's step holds remediation (a ``systemctl stop`` can take minutes and the watchdog
        expects every poll): they stay queued for the next poll or the remediation job,
        whichever comes first."""
        if wait:
            self._handoff_lock.acquire()
        elif not self._handoff_lock.acquire(blocking=False):
            return
        try:
            while self._arriving:
                self._to_remediate.append(self._arriving.popleft())
            if self.remediation is None:
                self._to_remediate.clear()
                return
            if not self._to_remediate:
                return
            try:
                if wait:
                    self.remediation.handle(self._to_remediate, now)
                elif self.remediation.try_handle(self._to_remediate, now) is None:
                    return
                self._to_remediate.clear()
            except Exception as exc:
                log.warning(
                    "remediation_handoff_deferred",
                    pending=len(self._to_remediate),
                    error=repr(exc),
                )
        finally:
            self._handoff_lock.release()

    def _handoff_pending(self) -> bool:
        """Transitions not yet durable in the outbox or remediation's journal."""
        return bool(self._to_notify or self._arriving or self._to_remediate)

    def _persist_alert_state(self, *, hold: bool = False) -> None:
        """Save alert state (unless told to ``hold`` it); what is not saved is kept, merged
        with the next tick's, so the end of an outage costs one transaction."""
        pending = merge_changes([*self._unsaved, self.engine.take_changes()])
        self._unsaved = [pending]
        if hold:
            return
        try:
            self.alert_state.save(pending)
        except Exception as exc:
            log.warning("alert_state_save_failed", error=repr(exc))
            return
        self._unsaved = []

    def _publish_self_metrics(self, now: float) -> list[Reading]:
        """Export rule, alert, store and remediation metrics. Health and storage state also
        go into the memory window (VllmWorkerDown reads GPU health, FleetdStorageDegraded
        reads the store) and are returned so the store keeps the health history."""
        health = rule_readings(self.engine, now)
        storage = store_readings(self.store.stats(), now)
        self.memory.append([*health, *storage])
        self.exporter.update_group("rules", health)
        self.exporter.update_group("store", storage)
        if self.dispatcher is not None:
            self._update_group_from("alerts", self.dispatcher.metrics, now)
        if self.remediation is not None:
            self._update_group_from("remediation", self.remediation.metrics, now)
        return health

    def _update_group_from(
        self, group: str, read: Callable[[float], list[Reading]], now: float
    ) -> None:
        """Export what ``read`` returns; while it cannot read the database, keep the last."""
        try:
            readings = read(now)
        except Exception as exc:
            log.warning("self_metrics_stale", group=group, error=repr(exc))
            return
        self.exporter.update_group(group, readings)

    def watchdog(self) -> None:
        """WATCHDOG=1 between polls, but only while polls keep finishing on time: a hung
        loop stops the pings and systemd restarts the daemon."""
        snapshot = self.last_snapshot
        poll = self.config.poll
        if (
            snapshot is not None
            and self.now() - snapshot.ts <= 2 * poll.interval + poll.gpu_timeout
        ):
            self.notifier.watchdog()

    def _report_progress(self, snapshot: Snapshot) -> None:
        summary = self.status_line(snapshot)
        if not self._ready_sent:
            self.notifier.ready(summary)
            self._ready_sent = True
        else:
            self.notifier.status(summary)
        if watchdog_interval() is not None:
            self.notifier.watchdog()

    def status_line(self, snapshot: Snapshot) -> str:
        """One line for systemd's STATUS=: healthy count, problems, storage state."""
        health = self.engine.health()
        total = len(snapshot.gpus)
        if health is None:
            return f"{total} GPUs polled; rules not evaluated yet"
        healthy = sum(1 for g in health.gpus if g.health.state == HealthState.HEALTHY)
        parts = [f"{healthy}/{total} GPUs healthy"]
        for gpu in health.gpus:
            if gpu.health.state != HealthState.HEALTHY:
                parts.append(f"GPU{gpu.gpu} {gpu.health.state.value}")
        if self.store.health().degraded:
            parts.append("storage degraded")
        return "; ".join(parts)

    def deliver(self) -> None:
        """Flush due alert groups and deliver the outbox (waits while storage is down)."""
        if self.dispatcher is None:
            return
        try:
            self.dispatcher.tick(self.now())
        except Exception as exc:
            if not self.store.health().degraded:
                raise
            log.warning("alert_delivery_waiting_for_storage", error=repr(exc))

    def remediate(self) -> None:
        """Advance remediation runs; a run never acts without its journal, so it waits too."""
        if self.remediation is None:
            return
        now = self.now()
        self._hand_to_remediation(now, wait=True)
        try:
            self.remediation.tick(now)
        except Exception as exc:
            if not self.store.health().degraded:
                raise
            log.warning("remediation_waiting_for_storage", error=repr(exc))

    def maintain(self) -> None:
        now = self.now()
        self.store.maintenance(now)
        if now - self._last_rediscover >= REDISCOVER_INTERVAL_S and not all(
            self.backend.present(g.index) for g in self.backend.gpus()
        ):
            self._last_rediscover = now
            found = self.poller.rediscover(self.backend)
            log.info("gpus_rediscovered", gpus=len(found))

    def scrape_vllm(self) -> None:
        if self.vllm is None:
            return
        now = self.now()
        scrape = self.vllm.scrape(now)
        self.memory.append(scrape.readings)
        self.store.append(scrape.readings, now=now)
        derived: list[Any] = []
        if self.last_snapshot is not None:
            derived = self.tokens.update(scrape.readings, self.last_snapshot, now)
            self.memory.append(derived)
        self.exporter.update_vllm([*scrape.readings, *derived], scrape.failed_workers)

    # ------------------------------------------------------------------------------ reload
    def reload(self) -> bool:
        """SIGHUP: re-read fleetd.yaml and the rules; a bad file is logged and rejected.

        Never raises: it runs on the main thread, whose loop is the daemon's life."""
        try:
            self.reload_or_raise()
        except ConfigError:
            return False
        except Exception as exc:
            log.exception("config_reload_crashed", error=repr(exc))
            self.exporter.record_config_reload(False)
            self._ready_again()
            return False
        return True

    def reload_or_raise(self) -> None:
        """Re-read fleetd.yaml and the rules, all or nothing (SIGHUP and the API).

        Any problem raises ConfigError and the old config and rules keep running. Applied at
        once: the rules and their timing, ``alerting``, ``poll.interval``. Every other
        section (RESTART_ONLY, ``poll.gpu_timeout``/``slow_interval``) is built into running
        parts: a change there is logged and recorded as needing a restart, and the running
        value stays, in ``self.config`` too, so what the daemon reports is what it runs.
        """
        if self.config_path is None:
            raise ConfigError(
                [Problem("<built-in config>", None, None, "", "no config file to reload")]
            )
        with self._reload_lock:  # SIGHUP (main thread) and the API may ask at once
            self._reload(self.config_path)

    def _reload(self, config_path: Path) -> None:
        self.notifier.reloading()
        now = self.now()
        try:
            new = self.loader(config_path)
            rules = load_rules(new.rules)
        except ConfigError as exc:
            problems = [str(p) for p in exc.problems]
            log.error("config_reload_failed", problems=problems)
            self.exporter.record_config_reload(False)
            self.engine.reload_rejected(problems)
            self.store.append_event(
                "config_reload",
                now=now,
                message="config reload rejected; the running config is kept",
                data={"problems": problems},
            )
            self._ready_again()
            raise
        new, restart_needed = self._keep_restart_only(new)
        self.engine.try_reload(lambda: rules, engine_settings(new.rules, new.poll.interval))
        if self.dispatcher is not None:
            try:
                self.dispatcher.reload(new.alerting, now)
            except Exception as exc:  # it runs the new routes; only its clean-up is left
                log.warning("alert_reload_cleanup_failed", error=repr(exc))
        if new.poll.interval != self.config.poll.interval and self.scheduler.running:
            self.scheduler.reschedule_job(
                "poll", trigger="interval", seconds=self._interval(new.poll.interval)
            )
        self.config = new
        self.exporter.record_config_reload(True)
        self.store.append_event(
            "config_reload",
            now=now,
            message="config reloaded",
            data={"rules": len(rules), "restart_needed_for": restart_needed},
        )
        if restart_needed:
            log.warning("config_reload_needs_restart", sections=restart_needed)
        log.info("config_reloaded", rules=len(rules))
        self._ready_again()

    def _keep_restart_only(self, new: FleetdConfig) -> tuple[FleetdConfig, list[str]]:
        """``new`` with the running values of what only a restart applies; what changed."""
        old = self.config
        changed = [n for n in RESTART_ONLY if getattr(new, n) != getattr(old, n)]
        changed += [
            f"poll.{n}" for n in POLL_RESTART_ONLY if getattr(new.poll, n) != getattr(old.poll, n)
        ]
        poll = new.poll.model_copy(update={n: getattr(old.poll, n) for n in POLL_RESTART_ONLY})
        kept: dict[str, Any] = {n: getattr(old, n) for n in RESTART_ONLY}
        return new.model_copy(update={**kept, "poll": poll}), changed

    def _ready_again(self) -> None:
        snapshot = self.last_snapshot
        self.notifier.ready(self.status_line(snapshot) if snapshot is not None else "running")

    # ------------------------------------------------------------------------------ HTTP
    def _mount_routes(self) -> None:
        assert self.dispatcher is not None and self.query is not None
        self.services = ApiServices(
            node=self.config.node.name,
            clock=self.clock,
            latest_snapshot=lambda: self.last_snapshot,
            engine=self.engine,
            dispatcher=self.dispatcher,
            events=self.store,
            query=self.query,
            remedy=self.remediation,
            # a built-in config (demo, --simulate without a file) has nothing to reload
            reload=self.reload_or_raise if self.config_path is not None else None,
            config=self.config.api,
        )
        build_api_router(
            self.services,
            token=self.config.api.token,
            token_name=self.config.api.token_name,
            router=self.router,
        )
        self.router.add("GET", "/metrics", self._metrics)
        self.router.add("GET", "/healthz", self._healthz)

    def _start_heartbeat(self) -> None:
        registry = self.config.registry
        if registry.url is None:
            return
        tls = self.config.http.tls_cert is not None
        address = default_address(self.config.node.name, self.config.http.port, tls=tls)
        self.heartbeat = RegistryHeartbeat(registry, self.services, address=address)
        self.scheduler.add_job(
            self._job(self.beat),
            "interval",
            seconds=self._interval(registry.heartbeat_interval),
            id="heartbeat",
        )

    def beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat(self.now())

    def _metrics(self, _request: Request) -> Response:
        return Response(200, self.exporter.render(), "text/plain; version=0.0.4; charset=utf-8")

    def _healthz(self, _request: Request) -> Response:
        """200 while polls keep coming; 503 before the first and when they stopped."""
        snapshot = self.last_snapshot
        now = self.now()
        if snapshot is None:
            return Response.json({"status": "starting"}, 503)
        age = now - snapshot.ts
        limit = 3 * self.config.poll.interval + self.config.poll.gpu_timeout
        body = {
            "status": "ok" if age <= limit else "stalled",
            "last_poll_age_seconds": round(age, 3),
            "storage": "degraded" if self.store.health().degraded else "ok",
        }
        return Response.json(body, 200 if age <= limit else 503)
