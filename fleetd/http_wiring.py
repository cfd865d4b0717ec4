"""How the daemon serves HTTP: the API's services, the API router, /metrics and /healthz on
one server (kept out of fleetd/daemon.py; a top-level module like remedy_wiring, as it
composes the api package with the parts the daemon built).

``serve_http(daemon)`` builds ``ApiServices`` from the running parts, mounts the API and the
node endpoints on ``daemon.router`` and starts the server ``http:`` asks for. A built-in
config (the demo, ``--simulate`` without a file) has nothing to reload, so the API's reload
is off there.
"""

from __future__ import annotations

from typing import Any, Protocol

from fleetd.alert.dispatch import Dispatcher
from fleetd.api.node_http import mount_node_endpoints, open_server
from fleetd.api.routes import build_api_router
from fleetd.api.server import HttpServer, Router
from fleetd.api.services import ApiServices
from fleetd.clock import Clock
from fleetd.collect.exporter import FleetdExporter
from fleetd.config import FleetdConfig
from fleetd.logs import get_logger
from fleetd.model import Snapshot
from fleetd.polltiming import PollTiming
from fleetd.remedy.reliability import ReliabilityReporter
from fleetd.remedy.service import Remediation
from fleetd.rules.coverage import InputCoverage
from fleetd.rules.engine import RuleEngine
from fleetd.selfmetrics import SelfMetrics
from fleetd.store.hybrid import HybridQuery
from fleetd.store.resilient import ResilientStore

log = get_logger("daemon")


class HttpParts(Protocol):
    """What the HTTP server needs of the daemon (a protocol, so fleetd.daemon is never
    imported here: the composition stays one-way, tests/test_layering.py)."""

    config: FleetdConfig
    clock: Clock
    config_path: Any
    last_snapshot: Snapshot | None
    engine: RuleEngine
    dispatcher: Dispatcher | None
    store: ResilientStore
    query: HybridQuery | None
    remediation: Remediation | None
    coverage: InputCoverage
    router: Router
    exporter: FleetdExporter
    self_metrics: SelfMetrics | None
    reliability: ReliabilityReporter | None

    @property
    def timing(self) -> PollTiming: ...

    def reload_or_raise(self) -> None: ...

    def poll_age(self) -> float | None: ...

    def now(self) -> float: ...


def serve_http(daemon: HttpParts) -> tuple[ApiServices, HttpServer]:
    """The API's services and the started server (its address is logged)."""
    assert daemon.dispatcher is not None and daemon.query is not None
    config = daemon.config
    services = ApiServices(
        node=config.node.name,
        clock=daemon.clock,
        latest_snapshot=lambda: daemon.last_snapshot,
        engine=daemon.engine,
        dispatcher=daemon.dispatcher,
        events=daemon.store,
        query=daemon.query,
        remedy=daemon.remediation,
        reload=daemon.reload_or_raise if daemon.config_path is not None else None,
        config=config.api,
        labels=config.node.labels,
        blind_spots=lambda: daemon.coverage.blind_spots(daemon.engine.rules),
        reliability=daemon.reliability,
    )
    api = config.api
    build_api_router(services, token=api.token, token_name=api.token_name, router=daemon.router)

    def render_metrics() -> bytes:
        if daemon.self_metrics is not None:
            daemon.self_metrics.refresh_service_view(daemon.now())
        return daemon.exporter.render()

    mount_node_endpoints(
        daemon.router,
        render_metrics=render_metrics,
        poll_age=daemon.poll_age,
        timing=lambda: daemon.timing,
        storage=daemon.store.health,
    )
    http = open_server(daemon.router, config.http)
    http.start()
    log.info("http_listening", address=http.address)
    return services, http
