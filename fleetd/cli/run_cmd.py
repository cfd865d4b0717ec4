"""``fleetd run``: the daemon, on the real amdsmi library or (``--simulate``) the simulator."""

from __future__ import annotations

import faulthandler
import functools
import gc
import sys
import tempfile
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems
from fleetd.clock import SteadyClock
from fleetd.config import DEFAULT_CONFIG_PATH, FleetdConfig, load_config
from fleetd.errors import BackendError, ConfigError, StateDirInUse
from fleetd.logs import configure_logging
from fleetd.statelock import lock_state_dir


@functools.cache
def simulated_state_dir() -> Path:
    """Where a simulated node with no config keeps its state: a directory of this process's
    own (the same across reloads), never a real node's ``/var/lib/fleetd``."""
    return Path(tempfile.mkdtemp(prefix="fleetd-simulated-"))


def resolve_config(path: Path | None, simulate: str | None) -> tuple[FleetdConfig, Path | None]:
    """The config to run: PATH, else the default file, else (simulating only) built-in defaults
    with a state directory of the process's own (``simulated_state_dir``).

    ``--simulate`` switches the backend to the simulator whatever the file says.
    """
    chosen = path or DEFAULT_CONFIG_PATH
    if path is None and simulate is not None and not chosen.exists():
        config, used = FleetdConfig(state_dir=simulated_state_dir()), None
    else:
        config, used = load_config(chosen), chosen
    if simulate is not None:
        backend = config.backend.model_copy(update={"kind": "simulator", "scenario": simulate})
        config = config.model_copy(update={"backend": backend})
    return config, used


@click.command("run")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help=f"fleetd.yaml (default {DEFAULT_CONFIG_PATH}).",
)
@click.option(
    "--simulate",
    metavar="SCENARIO",
    default=None,
    help="Run on the simulator with this scenario (a shipped name or a YAML path).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "console"]),
    default=None,
    help="json lines (default, for journald) or console for people.",
)
def run(config_path: Path | None, simulate: str | None, log_format: str | None) -> None:
    """Run the health daemon until SIGTERM; SIGHUP reloads the config."""
    try:
        config, used = resolve_config(config_path, simulate)
    except ConfigError as exc:
        echo_problems(exc)
        sys.exit(1)
    fmt = log_format or config.logging.format
    configure_logging(fmt, config.logging.level)  # type: ignore[arg-type]
    try:
        held = lock_state_dir(config.state_dir)  # noqa: F841 - the lock lives with the file
    except StateDirInUse as exc:
        click.echo(f"fleetd: {exc}", err=True)
        sys.exit(2)
    from fleetd.daemon import Daemon  # heavy imports after argument parsing

    try:
        daemon = Daemon(
            config,
            clock=SteadyClock(),  # never steps with the wall clock (docs/operations.md)
            config_path=used,
            loader=lambda path: resolve_config(path, simulate)[0],
        )
    except BackendError as exc:
        click.echo(f"fleetd: {exc}", err=True)
        sys.exit(2)
    except ConfigError as exc:  # the rule files, loaded with the daemon
        echo_problems(exc)
        sys.exit(1)
    daemon.install_signal_handlers()
    # a fatal signal (SIGBUS from a mapped file that changed under SQLite, SIGSEGV in a driver)
    # leaves its thread stacks in the journal instead of nothing
    faulthandler.enable()
    try:
        daemon.start()
        # what start-up built (modules, config, rules, the warmed window) lives as long as
        # the process: out of the cyclic collector's sight, each full collection scans only
        # what the polls create since (the collector's own advice for long-lived servers)
        gc.collect()
        gc.freeze()
        daemon.run_until_stopped()
    finally:
        daemon.stop()
