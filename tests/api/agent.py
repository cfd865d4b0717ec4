"""A real fleetd agent on loopback, running on the simulator, for API and fleetctl tests.

Everything is the real component — the amdsmi backend over ``fleetd.sim``, the poller and
its collectors, the storage handle (SQLite file), the memory window and the hybrid query,
the rule engine with the shipped rules, the alert dispatcher, remediation (dry-run by
default, no vLLM workers), the event log and the HTTP server — except the GPUs (simulated)
and time (a FakeClock the test advances). ``tick`` is one pass of the daemon's loop: poll,
store, evaluate, remediate, dispatch.

When the lead's ``fleetd.daemon`` lands on main, this helper builds the agent through it.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetd.alert.config import AlertingConfig
from fleetd.alert.dispatch import Dispatcher
from fleetd.api.config import ApiConfig
from fleetd.api.routes import build_api_router
from fleetd.api.server import HttpServer, Request, Response, Router
from fleetd.api.services import ApiServices
from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.collect.collectors import default_collectors
from fleetd.collect.poller import Poller
from fleetd.config import FleetdConfig
from fleetd.configbase import Secret
from fleetd.model import Snapshot
from fleetd.remedy.notify import EventLogSink
from fleetd.remedy.service import Remediation
from fleetd.remedy.wiring import build_remediation
from fleetd.rules.config import RulesConfig, engine_settings, load_rules
from fleetd.rules.engine import RuleEngine
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
from fleetd.store.config import StoreConfig
from fleetd.store.hybrid import HybridQuery
from fleetd.store.memory import MemoryWindow
from fleetd.store.resilient import ResilientStore

TOKEN = "test-token-0123456789abcdef"
POLL_INTERVAL = 5.0


class SlowRouter(Router):
    """A router that holds every answer for ``delay`` seconds (a node that is slow to answer);
    ``release`` lets held requests go at once so a test never waits for it on shutdown."""

    def __init__(self, inner: Router, delay: float) -> None:
        super().__init__()
        self._inner = inner
        self._delay = delay
        self._released = threading.Event()

    def dispatch(self, request: Request) -> Response:
        self._released.wait(self._delay)
        return self._inner.dispatch(request)

    def release(self) -> None:
        self._released.set()


class Latest:
    """The newest snapshot, as the daemon's loop leaves it for the API."""

    def __init__(self) -> None:
        self.snapshot: Snapshot | None = None

    def get(self) -> Snapshot | None:
        return self.snapshot


@dataclass
class Agent:
    """One running agent; ``url`` is where it answers."""

    name: str
    clock: FakeClock
    sim: SimNode
    poller: Poller
    store: ResilientStore
    memory: MemoryWindow
    engine: RuleEngine
    dispatcher: Dispatcher
    remedy: Remediation | None
    services: ApiServices
    server: HttpServer
    latest: Latest = field(default_factory=Latest)
    slow: SlowRouter | None = None

    tls: bool = False

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def tick(self, polls: int = 1) -> None:
        """``polls`` passes of the daemon's loop, ``POLL_INTERVAL`` apart on the fake clock."""
        for i in range(polls):
            if i:
                self.clock.advance(POLL_INTERVAL)
            now = self.clock.now()
            snapshot = self.poller.poll(now)
            self.store.append(snapshot.readings, now=now)
            self.memory.append(snapshot.readings)
            self.latest.snapshot = snapshot
            transitions = self.engine.evaluate(HybridQuery(self.memory, self.store), now)
            self.dispatcher.submit(transitions, now)
            if self.remedy is not None:
                self.remedy.handle(transitions, now)
                self.remedy.tick(now)
            self.dispatcher.tick(now)

    def stop(self) -> None:
        if self.slow is not None:
            self.slow.release()
        self.server.stop()
        self.poller.close()
        self.dispatcher.close()
        self.store.close()


def start_agent(
    tmp: Path,
    name: str = "gpu-node-001",
    *,
    clock: FakeClock | None = None,
    token: str | None = TOKEN,
    model: str = "MI355X",
    seed: int = 0,
    remediation: dict[str, object] | None = None,
    with_remediation: bool = True,
    reload: Callable[[], object] | None = None,
    delay: float = 0.0,
    tls: tuple[Path, Path] | None = None,
) -> Agent:
    """Build and start an agent whose files live under ``tmp``."""
    clock = clock or FakeClock()
    tmp.mkdir(parents=True, exist_ok=True)
    sim = build_node(model, seed=seed, clock=clock)
    backend = AmdSmiBackend(SimulatedAmdSmi(sim))  # type: ignore[arg-type]
    poller = Poller(backend, default_collectors(), node=name, gpu_timeout=2.0)
    store = ResilientStore(f"sqlite:///{tmp / 'fleetd.db'}", StoreConfig(), node=name)
    store.open(clock.now())
    assert store.db is not None
    memory = MemoryWindow(retention=3600.0)
    rules_config = RulesConfig(local_dir=None)
    engine = RuleEngine(
        load_rules(rules_config), engine_settings(rules_config, POLL_INTERVAL), node=name
    )
    dispatcher = Dispatcher(
        AlertingConfig(), store.db, node=name, now=clock.now(), stream=io.StringIO()
    )
    latest = Latest()
    remedy: Remediation | None = None
    if with_remediation:
        assert store.events is not None
        config = FleetdConfig.model_validate(
            {"node": {"name": name}, "remediation": remediation or {"mode": "dry-run"}}
        )
        remedy = build_remediation(
            config,
            db=store.db,
            backend=backend,
            poller=poller,
            clock=clock,
            events=EventLogSink(store.events.append),
        )
    services = ApiServices(
        node=name,
        clock=clock,
        latest_snapshot=latest.get,
        engine=engine,
        dispatcher=dispatcher,
        events=store,
        query=HybridQuery(memory, store),
        remedy=remedy,
        reload=reload,
        config=ApiConfig(),
    )
    router = build_api_router(services, token=Secret(token) if token else None)
    slow = SlowRouter(router, delay) if delay > 0 else None
    server = HttpServer(
        slow or router,
        "127.0.0.1",
        0,
        tls_cert=tls[0] if tls else None,
        tls_key=tls[1] if tls else None,
    )
    server.start()
    agent = Agent(
        name=name,
        clock=clock,
        sim=sim,
        poller=poller,
        store=store,
        memory=memory,
        engine=engine,
        dispatcher=dispatcher,
        remedy=remedy,
        services=services,
        server=server,
        latest=latest,
        slow=slow,
        tls=tls is not None,
    )
    return agent
