"""A real fleetd agent on loopback, running on the simulator, for API and fleetctl tests.

It is the daemon itself (``fleetd.daemon.Daemon``) with its jobs not scheduled: the amdsmi
backend over ``fleetd.sim``, the poller, the store (a SQLite file), the memory window, the
rules, the alert dispatcher, remediation (dry-run by default), the event log and the HTTP
server are all real; only the GPUs (simulated) and time (a FakeClock the test advances) are
not. ``tick`` is one pass of the daemon's loop plus its remediation and delivery jobs.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetd.alert.dispatch import Dispatcher
from fleetd.api.server import HttpServer, Request, Response, Router
from fleetd.api.services import ApiServices
from fleetd.clock import FakeClock
from fleetd.collect.amdsmi_backend import AmdSmiBackend
from fleetd.config import FleetdConfig
from fleetd.daemon import Daemon, SimContext
from fleetd.remedy.service import Remediation
from fleetd.rules.engine import RuleEngine
from fleetd.sim import SimNode, SimulatedAmdSmi, build_node
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


@dataclass
class Agent:
    """One running agent; ``url`` is where it answers."""

    name: str
    clock: FakeClock
    sim: SimNode
    daemon: Daemon
    server: HttpServer
    slow: SlowRouter | None = None
    tls: bool = False

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @property
    def engine(self) -> RuleEngine:
        return self.daemon.engine

    @property
    def dispatcher(self) -> Dispatcher:
        assert self.daemon.dispatcher is not None
        return self.daemon.dispatcher

    @property
    def remedy(self) -> Remediation | None:
        return self.daemon.remediation

    @property
    def store(self) -> ResilientStore:
        return self.daemon.store

    @property
    def memory(self) -> MemoryWindow:
        return self.daemon.memory

    @property
    def services(self) -> ApiServices:
        return self.daemon.services

    def tick(self, polls: int = 1) -> None:
        """``polls`` passes of the daemon's loop, ``POLL_INTERVAL`` apart on the fake clock."""
        for i in range(polls):
            if i:
                self.clock.advance(POLL_INTERVAL)
            self.daemon.tick()
            self.daemon.remediate()
            self.daemon.deliver()

    def stop(self) -> None:
        if self.slow is not None:
            self.slow.release()
        self.server.stop()
        self.daemon.stop()


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
    labels: dict[str, str] | None = None,
    rules: dict[str, object] | None = None,
    registry: dict[str, object] | None = None,
    vllm: dict[str, object] | None = None,
    kernel_log: bool = False,
    compute_partition: str = "SPX",
) -> Agent:
    """Build and start an agent whose files live under ``tmp``.

    The simulator's kernel log is followed by threads on real time, which a test driving
    the agent by hand on a fake clock cannot order against its polls: which report of a fault
    pages first would be a race. So it is off unless ``kernel_log`` asks for it (the event
    sources have their own tests, and the real daemon's in tests/e2e)."""
    clock = clock or FakeClock()
    tmp.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "node": {"name": name, "labels": labels or {}},
        "state_dir": str(tmp),
        "poll": {"interval": POLL_INTERVAL, "gpu_timeout": 2.0},
        "http": {"bind": "127.0.0.1", "port": 0},
        "rules": {"local_dir": None, **(rules or {})},
        "api": {"token": token} if token else {},
        "remediation": (remediation or {"mode": "dry-run"})
        if with_remediation
        else {"mode": "off"},
    }
    if not kernel_log:
        data["events"] = {"kernel_log": {"source": "off"}}
    if registry is not None:
        data["registry"] = registry
    if vllm is not None:
        data["vllm"] = vllm
    if tls is not None:
        data["http"] |= {"tls_cert": str(tls[0]), "tls_key": str(tls[1])}
    sim = build_node(model, seed=seed, clock=clock, compute_partition=compute_partition)
    daemon = Daemon(
        FleetdConfig.model_validate(data),
        clock=clock,
        backend=AmdSmiBackend(SimulatedAmdSmi(sim)),
        sim=SimContext(sim, None),
        console_stream=io.StringIO(),
        schedule_jobs=False,
    )
    daemon.start()
    if reload is not None:
        daemon.services.reload = reload
    server = daemon.http
    assert server is not None
    slow = None
    if delay > 0:  # the same agent behind a router that holds every answer
        server.stop()
        slow = SlowRouter(daemon.router, delay)
        server = HttpServer(slow, "127.0.0.1", 0)
        server.start()
        daemon.http = None  # stopped by the Agent, not twice by the daemon
    return Agent(name, clock, sim, daemon, server, slow, tls=tls is not None)
