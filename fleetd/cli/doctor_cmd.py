"""``fleetd doctor``: the preflight an operator runs on a new node (docs/operations.md).

It opens the GPUs as the daemon would (the real library, or ``--simulate``), polls once, and
prints each check of ``fleetd.doctor``: root and debugfs for the reset, the hive, partition
modes, the amdsmi package/library pair, KFD processes a reset would kill, the state directory,
and the rules that can never fire here. Exit 0: all ok; 1: a warning; 2: a failure.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems
from fleetd.cli.run_cmd import resolve_config
from fleetd.config import FleetdConfig
from fleetd.doctor import Check
from fleetd.errors import BackendError, ConfigError

POLLS = 3
POLL_GAP_S = 1.0


@click.command("doctor")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), default=None,
    help="fleetd.yaml (default /etc/fleetd/fleetd.yaml).",
)  # fmt: skip
@click.option("--simulate", default=None, metavar="SCENARIO", help="Check a simulated node.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option(
    "--root", type=click.Path(path_type=Path), default=Path("/"), show_default=True,
    help="Where /sys is (a copy of a node's tree, for tests).",
)  # fmt: skip
def doctor(config_path: Path | None, simulate: str | None, as_json: bool, root: Path) -> None:
    """Check this node for everything fleetd needs; exit 0 ok, 1 warning, 2 failure."""
    from fleetd.doctor import exit_code, render_text
    from fleetd.logs import configure_logging

    configure_logging("console", "warning", stream=sys.stderr)  # the report is stdout
    try:
        config, _ = resolve_config(config_path, simulate)
        checks = _checks(config, root)
    except ConfigError as exc:
        echo_problems(exc)
        sys.exit(2)
    except BackendError as exc:
        click.echo(f"fleetd doctor: {exc}", err=True)
        sys.exit(2)
    if as_json:
        body = {"checks": [c.as_dict() for c in checks], "exit_code": exit_code(checks)}
        click.echo(json.dumps(body, indent=2))
    else:
        click.echo(render_text(checks))
    sys.exit(exit_code(checks))


def _checks(config: FleetdConfig, root: Path) -> list[Check]:
    """Open the GPUs as the daemon would (an unsafe library is opened only to say so: the
    poll is skipped), poll once, run every check.

    A check leaves no trace in the daemon's state directory, which a running daemon owns: the
    backend writes what it learns (port baselines) and a simulated node its sysfs tree into a
    scratch directory, starting from the daemon's own baselines on a real node.
    """
    from fleetd.clock import SystemClock
    from fleetd.collect.collectors import default_collectors
    from fleetd.collect.poller import Poller
    from fleetd.daemon import open_backend
    from fleetd.doctor import node_checks
    from fleetd.gpu_wiring import BASELINE_FILE
    from fleetd.rules.config import load_rules

    rules = load_rules(config.rules)
    clock = SystemClock()
    unsafe_ok = config.backend.model_copy(update={"allow_unsafe_library": True})
    with tempfile.TemporaryDirectory(prefix="fleetd-doctor-") as scratch:
        if config.backend.kind == "amdsmi":
            with contextlib.suppress(OSError):
                shutil.copy(config.state_dir / BASELINE_FILE, scratch)
        opened = config.model_copy(update={"backend": unsafe_ok, "state_dir": Path(scratch)})
        backend, _ = open_backend(opened, clock)
        try:
            snapshots = []
            if backend.abi.verdict != "unsafe":
                poller = Poller(
                    backend, default_collectors(), node=config.node.name, gpu_timeout=5.0
                )
                try:
                    for n in range(POLLS):  # rates (throttle residency) need two polls
                        if n:
                            clock.sleep(POLL_GAP_S)
                        snapshots.append(poller.poll(clock.now()))
                finally:
                    poller.close()
            return node_checks(
                config,
                backend,
                rules,
                snapshots,
                root=root,
                host_checks=config.backend.kind == "amdsmi",
            )
        finally:
            backend.close()
