"""A small fleet on loopback: real agents on the simulator, one dead address, one slow agent."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner, Result

from fleetd.cli.fleetctl_main import main
from fleetd.logs import configure_logging
from tests.api.agent import POLL_INTERVAL, TOKEN, Agent, start_agent

SLOW_DELAY = 30.0  # the slow agent answers after this; fleetctl's timeout is far shorter
TIMEOUT = 2.0  # generous for a loaded 2-core CI machine; the slow agent takes 30 s


def run_fleetctl(*args: str, env: dict[str, str] | None = None) -> tuple[Result, float]:
    """Run fleetctl in-process; returns the result and its wall time."""
    started = time.monotonic()
    merged = {"NO_COLOR": "1", "FLEETCTL_TIMEOUT": str(TIMEOUT), **(env or {})}
    result = CliRunner().invoke(main, list(args), env=merged, catch_exceptions=False)
    return result, time.monotonic() - started


def dead_address() -> str:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@dataclass
class Fleet:
    tmp: Path
    agents: list[Agent]
    slow: Agent | None
    dead: str
    inventory: Path
    token_file: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[Result, float]:
        """Run fleetctl in-process with this fleet's inventory and token."""
        return run_fleetctl(*args, env={**self.env, **(env or {})})

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()
        if self.slow is not None:
            self.slow.stop()


@pytest.fixture(autouse=True)
def quiet_agent_logs() -> Iterator[None]:
    """The agents run in this process: keep their log lines out of fleetctl's captured output."""
    configure_logging("json", "warning", stream=io.StringIO())
    yield
    structlog.reset_defaults()


def write_inventory(path: Path, entries: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"- {{name: {n}, address: '{a}'}}\n" for n, a in entries))
    return path


def build_fleet(tmp: Path, healthy: int = 3, *, with_slow: bool = True) -> Fleet:
    agents = [start_agent(tmp / f"n{i}", name=f"gpu-node-00{i}") for i in range(1, healthy + 1)]
    slow = start_agent(tmp / "slow", name="gpu-node-slow", delay=SLOW_DELAY) if with_slow else None
    for agent in [*agents, *([slow] if slow else [])]:
        agent.tick(3)
    dead = dead_address()
    entries = [(a.name, a.address) for a in agents]
    entries.append(("gpu-node-dead", dead))
    if slow is not None:
        entries.append((slow.name, slow.address))
    inventory = write_inventory(tmp / "inventory.yaml", entries)
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    env = {
        "FLEETCTL_INVENTORY": str(inventory),
        "FLEETCTL_TOKEN_FILE": str(token_file),
        "FLEETCTL_TIMEOUT": str(TIMEOUT),
        "NO_COLOR": "1",
    }
    return Fleet(tmp, agents, slow, dead, inventory, token_file, env)


def single_agent_fleet(tmp: Path, agent: Agent) -> Fleet:
    """A fleet of one started agent (ticked 3 times): fleetctl's inventory names it alone."""
    agent.tick(3)
    built = build_fleet(tmp, healthy=0, with_slow=False)
    built.agents.append(agent)
    inventory = write_inventory(tmp / "one.yaml", [(agent.name, agent.address)])
    built.env["FLEETCTL_INVENTORY"] = str(inventory)
    return built


@contextmanager
def acting_fleet(tmp: Path, remediation: dict[str, object]) -> Iterator[Fleet]:
    """One agent that remediates (``remediation:`` of its config), alone in the inventory."""
    agent = start_agent(tmp / "acting", name="gpu-node-acting", remediation=remediation)
    fleet = single_agent_fleet(tmp, agent)
    try:
        yield fleet
    finally:
        fleet.stop()


def run_after_fault(agent: Agent, state: str) -> str:
    """An uncorrectable ECC error on GPU 3, polled until its one run concludes in ``state``;
    the run's id."""
    agent.sim.inject(3, "ecc_uncorrectable")
    for _ in range(12):
        agent.clock.advance(POLL_INTERVAL)
        agent.tick()
    remedy = agent.remedy
    assert remedy is not None
    (run,) = remedy.runs()
    assert run.state.value == state, (run.state, run.outcome)
    return run.run_id


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three healthy agents, a dead address and a slow agent (module-wide: read-only tests)."""
    built = build_fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield built
    finally:
        built.stop()
