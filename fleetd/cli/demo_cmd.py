"""``fleetd demo``: the whole loop on a simulated MI355X node, no GPU and no config needed.

Faults appear one after another (fleetd/sim/scenarios/demo.yaml); fleetd polls, stores,
evaluates the shipped rules, prints alerts as they fire and resolve, and remediates the
uncorrectable ECC error on GPU 3 end to end: drain every vLLM worker of the XGMI hive, reset
once, verify, re-admit. The vLLM workers are in-process stand-ins serving real HTTP on
loopback, driven through fleetd's real ``systemd`` worker adapter via a stand-in
``systemctl``. Everything lives in a temporary directory that is removed on exit.
"""

from __future__ import annotations

import io
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import click

from fleetd.clock import ScaledClock
from fleetd.config import FleetdConfig, VllmWorkerConfig
from fleetd.configbase import validate
from fleetd.logs import configure_logging

DEMO_SCENARIO = "demo"
DEMO_MODEL = "stand-in/llama-3-70b"


class LineSink(io.TextIOBase):
    """A text stream that hands each complete line to a callback (console receiver → view)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if line.strip():
                self._on_line(line)
        return len(text)


def demo_config(state_dir: Path, *, systemctl: Path, rotation: tuple[str, str],
                workers: list[VllmWorkerConfig], port: int) -> FleetdConfig:
    """The built-in config: simulator, fast cadence, console alerts, remediation on."""
    out_url, in_url = rotation
    data = {
        "node": {"name": "demo-mi355x"},
        "state_dir": str(state_dir),
        "backend": {"kind": "simulator", "scenario": DEMO_SCENARIO},
        "poll": {"interval": "1s", "gpu_timeout": "1s", "slow_interval": "5s"},
        "http": {"bind": "127.0.0.1", "port": port},
        "vllm": {
            "workers": [w.model_dump(mode="json") for w in workers],
            "scrape_interval": "2s",
            "timeout": "1s",
        },
        "alerting": {
            "receivers": [{"name": "console", "console": [{}]}],
            "route": {"receiver": "console", "group_wait": "0s", "group_interval": "5s"},
        },
        "remediation": {
            "mode": "on",
            "drain": {"balancer_delay": "2s", "poll_interval": "1s", "timeout": "30s",
                      "release_timeout": "10s", "release_poll_interval": "1s"},
            "verify": {"healthy_polls": 2, "poll_interval": "1s", "timeout": "60s"},
            "readmit": {"timeout": "60s", "poll_interval": "1s"},
            "workers": {
                "adapter": "systemd",
                "systemctl": str(systemctl),
                "rotation": {"http": {"out_url": out_url, "in_url": in_url}},
            },
        },
    }
    return validate(FleetdConfig, data, {}, "<fleetd demo built-in config>")


@click.command("demo")
@click.option("--duration", type=float, default=None,
              help="Stop after this many seconds (default: run until Ctrl-C).")
@click.option("--speed", type=float, default=1.0, show_default=True,
              help="Run the scenario this many times faster than real time.")
@click.option("--port", type=int, default=9477, show_default=True,
              help="Serve /metrics and the API here (0 picks a free port).")
@click.option("--plain", is_flag=True, help="Print lines instead of the live table.")
def demo(duration: float | None, speed: float, port: int, plain: bool) -> None:
    """Run fleetd on a simulated 8-GPU MI355X node with faults; no GPU needed."""
    with tempfile.TemporaryDirectory(prefix="fleetd-demo-") as tmp:
        _run_demo(Path(tmp), duration=duration, speed=speed, port=port,
                  plain=plain or not sys.stdout.isatty(), out=sys.stdout)


def _run_demo(tmp: Path, *, duration: float | None, speed: float, port: int, plain: bool,
              out: TextIO) -> None:
    from rich.console import Console
    from rich.live import Live

    from fleetd.cli.live_view import live_view
    from fleetd.daemon import Daemon, open_backend
    from fleetd.model import Snapshot, Transition
    from fleetd.sim.vllm_worker import StandInFleet

    configure_logging("json", "warning", stream=open(tmp / "fleetd.log", "w"))  # noqa: SIM115
    clock = ScaledClock(speed)
    lines: deque[str] = deque(maxlen=14)
    console = Console(file=out)
    started = clock.now()

    def note(text: str) -> None:
        stamp = f"[t+{clock.now() - started:5.0f}s]"
        lines.append(f"{stamp} {text}")
        if plain:
            console.print(f"{stamp} {text}", markup=False, highlight=False)

    # the simulated node first: the stand-in workers register their processes on it
    placeholder = demo_config(tmp, systemctl=tmp / "bin" / "systemctl",
                              rotation=("http://127.0.0.1/", "http://127.0.0.1/"),
                              workers=[], port=port)
    backend, sim = open_backend(placeholder, clock)
    assert sim is not None
    fleet = StandInFleet(tmp, clock=clock, processes=sim.node)
    workers = []
    for gpu in range(8):
        stand_in = fleet.add(f"gpu{gpu}", [gpu], model=DEMO_MODEL, startup_s=3.0)
        workers.append(VllmWorkerConfig(name=f"gpu{gpu}", url=stand_in.url, gpus=[gpu],
                                        unit=stand_in.unit, model=DEMO_MODEL))
    traffic = _Traffic(fleet, clock)
    config = demo_config(tmp, systemctl=fleet.systemctl, rotation=fleet.rotation_urls(),
                         workers=workers, port=port)

    live: Live | None = None

    def on_tick(daemon: Daemon, snapshot: Snapshot, transitions: list[Transition]) -> None:
        traffic.step()
        if live is not None:
            live.update(_screen(daemon, snapshot, lines, clock.now() - started, speed))

    daemon = Daemon(config, clock=clock, backend=backend, sim=sim, time_scale=speed,
                    on_tick=on_tick, console_stream=LineSink(note))
    try:
        daemon.start()
        url = f"http://{daemon.http.address}" if daemon.http else "(no HTTP)"
        note(f"fleetd demo: simulated MI355X node, 8 GPUs in one XGMI hive, speed x{speed:g}; "
             f"metrics at {url}/metrics; Ctrl-C to stop")
        deadline = None if duration is None else time.monotonic() + duration
        if plain:
            _wait(deadline)
        else:
            with Live(console=console, refresh_per_second=4, screen=False) as live_view_:
                live = live_view_
                _wait(deadline)
    except KeyboardInterrupt:
        pass
    finally:
        daemon.stop()
        fleet.close()
        if daemon.last_snapshot is not None and not plain:
            console.print(live_view(daemon.last_snapshot, daemon.engine.alerts(), list(lines)))


def _wait(deadline: float | None) -> None:
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.2)


def _screen(daemon: object, snapshot: object, lines: deque[str], elapsed: float,
            speed: float) -> object:
    from fleetd.cli.live_view import live_view
    from fleetd.daemon import Daemon
    from fleetd.model import Snapshot

    assert isinstance(daemon, Daemon) and isinstance(snapshot, Snapshot)
    runs = daemon.remediation.status().summary() if daemon.remediation is not None else ""
    header = (f"fleetd demo · {daemon.config.node.name} · t+{elapsed:.0f}s (x{speed:g}) · "
              f"{daemon.status_line(snapshot)}" + (f" · {runs}" if runs else ""))
    return live_view(snapshot, daemon.engine.alerts(), list(lines), header=header)


class _Traffic:
    """Keeps the stand-in workers busy, as an LLM service would be."""

    def __init__(self, fleet: object, clock: ScaledClock) -> None:
        self._fleet = fleet
        self._clock = clock

    def step(self) -> None:
        from fleetd.sim.vllm_worker import StandInFleet

        assert isinstance(self._fleet, StandInFleet)
        for worker in self._fleet.workers.values():
            running, waiting = worker.load()
            if worker.in_rotation and running + waiting < 4:
                worker.add_requests(2, duration_s=6.0)
