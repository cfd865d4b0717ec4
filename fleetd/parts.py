"""Building the daemon's parts from fleetd.yaml (kept out of fleetd/daemon.py, which only
wires and runs them; a top-level module like remedy_wiring, as it composes collect, rules,
alert and remedy).

``Daemon.__init__`` builds the node-side parts (``build_poller``, ``build_engine``);
``Daemon.start`` those that need the opened database (``build_dispatcher``,
``build_node_remediation``). Each function takes only what its part needs.
"""

from __future__ import annotations

from typing import TextIO

import requests

from fleetd.alert.dispatch import Dispatcher
from fleetd.alert.gpuinfo import details_from
from fleetd.clock import Clock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.cadence import metric_cadence
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.collect.serial import PollSafeBackend, SerialPoller
from fleetd.config import FleetdConfig
from fleetd.remedy.events import ChangeSink
from fleetd.remedy.notify import DispatcherSink, EventLogSink, FanoutSink
from fleetd.remedy.service import Remediation
from fleetd.remedy_wiring import build_remediation
from fleetd.rules.config import engine_settings
from fleetd.rules.engine import RuleEngine
from fleetd.rules.loader import RuleSet
from fleetd.store.db import Database
from fleetd.store.resilient import ResilientStore


def build_poller(config: FleetdConfig, backend: AmdSmiBackend, clock: Clock) -> SerialPoller:
    """The GPU poller (``collect:`` and ``poll:``), serialised with other amdsmi calls."""
    collect = config.collect
    return SerialPoller(
        Poller(
            backend,
            default_collectors(
                processes_interval=config.poll.slow_interval,
                slow_every=collect.slow_every,
                ecc_guard=collect.ecc_guard,
                metrics_table=collect.metrics_table,
            ),
            node=config.node.name,
            gpu_timeout=config.poll.gpu_timeout,
            timer=clock.monotonic,
        )
    )


def build_engine(config: FleetdConfig, rules: RuleSet, clock: Clock) -> RuleEngine:
    """The rules engine on the poll's timing and the slow metrics' cadence."""
    settings = engine_settings(
        config.rules, config.poll.interval, cadence=metric_cadence(config.collect.slow_every)
    )
    return RuleEngine(rules, settings, node=config.node.name, timer=clock.monotonic)


def build_dispatcher(
    config: FleetdConfig,
    db: Database,
    *,
    now: float,
    session: requests.Session,
    stream: TextIO | None,
    backend: AmdSmiBackend,
) -> Dispatcher:
    """The alert dispatcher (``alerting:``), its alerts labelled with ``node.labels`` and
    the GPUs' serial numbers and BDFs."""
    return Dispatcher(
        config.alerting,
        db,
        node=config.node.name,
        now=now,
        session=session,
        stream=stream,
        external_labels=config.node.labels,
        gpu_details=details_from(backend.gpus),
    )


def build_node_remediation(
    config: FleetdConfig,
    db: Database,
    *,
    backend: AmdSmiBackend,
    poller: SerialPoller,
    clock: Clock,
    dispatcher: Dispatcher,
    observer: ChangeSink | None,
    store: ResilientStore,
    engine: RuleEngine,
) -> Remediation | None:
    """Remediation (None when ``remediation:`` is off): its changes go to the dispatcher (and
    ``observer``), its events to the event log, its amdsmi calls off a running poll."""
    sinks: list[ChangeSink] = [DispatcherSink(dispatcher)]
    if observer is not None:
        sinks.append(observer)
    return build_remediation(
        config,
        db=db,
        backend=PollSafeBackend(backend, poller),
        poller=poller,
        clock=clock,
        sink=FanoutSink(sinks),
        events=EventLogSink(store.append_event),
        alerts=engine,
    )
