"""``fleetd demo``: the whole loop on a simulated MI355X node, no GPU and no config needed."""

from __future__ import annotations

import io
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems
from fleetd.clock import ScaledClock
from fleetd.errors import ConfigError
from fleetd.logs import configure_logging
from fleetd.model import GpuIdentity


class LineSink(io.StringIO):
    """A text stream that hands each complete line to a callback (console receiver → view)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        super().__init__()
        self._on_line = on_line
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
        for line in lines:
            if line.strip():
                self._on_line(line)
        return len(text)


@click.command("demo")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many (real) seconds; default: until Ctrl-C.",
)
@click.option(
    "--speed",
    type=click.FloatRange(0.1, 50),
    default=4.0,
    show_default=True,
    help="Play the scenario this many times faster than real time (1 = real time).",
)
@click.option(
    "--port",
    type=int,
    default=9477,
    show_default=True,
    help="Serve /metrics and the API here (0 picks a free port).",
)
@click.option("--plain", is_flag=True, help="Print lines instead of the live table.")
@click.option(
    "--scenario",
    default="demo",
    show_default=True,
    help="A shipped scenario (demo, gray_failure, vllm_hung_engine, ...) or a scenario file.",
)
def demo(duration: float | None, speed: float, port: int, plain: bool, scenario: str) -> None:
    """Run fleetd on a simulated 8-GPU MI355X node with faults; no GPU needed.

    Alerts print as they fire and resolve; the uncorrectable ECC error on GPU 3 is remediated
    live (drain the hive's vLLM workers, reset, verify, re-admit). A temporary directory holds
    the state and is removed on exit.
    """
    from rich.console import Console
    from rich.live import Live

    from fleetd.cli.live_view import live_view
    from fleetd.demo import build_demo

    plain = plain or not sys.stdout.isatty()
    console = Console()
    clock = ScaledClock(speed)
    started = clock.now()
    lines: deque[str] = deque(maxlen=12)

    def note(text: str) -> None:
        stamp = f"[t+{clock.now() - started:4.0f}s]"
        lines.append(f"{stamp} {text}")
        if plain:
            console.print(f"{stamp} {text}", markup=False, highlight=False, soft_wrap=True)

    with tempfile.TemporaryDirectory(prefix="fleetd-demo-") as tmp:
        log_file = (Path(tmp) / "fleetd.log").open("w")
        configure_logging("json", "info", stream=log_file)
        try:
            built = build_demo(
                Path(tmp),
                clock=clock,
                note=note,
                console_stream=LineSink(note),
                port=port,
                time_scale=speed,
                scenario=scenario,
            )
        except ConfigError as exc:  # an unknown scenario, a scenario file with mistakes
            log_file.close()
            echo_problems(exc)
            sys.exit(1)
        daemon = built.daemon
        live: Live | None = None

        def on_tick(*_args: object) -> None:
            built.keep_busy()
            snapshot = daemon.last_snapshot
            if live is not None and snapshot is not None:
                runs = len(daemon.remediation.status().active) if daemon.remediation else 0
                header = (
                    f"fleetd demo · {daemon.config.node.name} · t+{clock.now() - started:.0f}s"
                    f" (x{speed:g}) · {daemon.status_line(snapshot)}"
                    + (f" · remediation running ({runs})" if runs else "")
                )
                live.update(live_view(snapshot, daemon.engine.alerts(), list(lines), header))

        daemon.on_tick = on_tick
        try:
            daemon.start()
            address = daemon.http.address if daemon.http is not None else "?"
            note(
                f"simulated {node_summary(daemon.backend.gpus())}, x{speed:g} speed; "
                f"http://{address}/metrics and /api/v1/status; Ctrl-C stops"
            )
            deadline = None if duration is None else time.monotonic() + duration
            if plain:
                _wait(deadline)
            else:
                with Live(console=console, refresh_per_second=4) as live_:
                    live = live_
                    _wait(deadline)
        except KeyboardInterrupt:
            pass
        finally:
            live = None
            built.close()
            log_file.close()


def node_summary(gpus: Sequence[GpuIdentity]) -> str:
    """``MI300X node, 8 GPUs in one XGMI hive`` (or ``64 GPUs (CPX partitions)`` …), as the
    scenario built it."""
    models = sorted({g.model or "unknown" for g in gpus})
    hives = {g.hive_id for g in gpus if g.hive_id}
    partitions = sorted({g.compute_partition for g in gpus if g.compute_partition} - {"SPX"})
    text = f"{'/'.join(models) or 'empty'} node, {len(gpus)} GPUs"
    if partitions:
        text += f" ({'/'.join(partitions)} partitions)"
    if len(hives) == 1:
        text += " in one XGMI hive"
    elif hives:
        text += f" in {len(hives)} XGMI hives"
    return text


def _wait(deadline: float | None) -> None:
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.2)
