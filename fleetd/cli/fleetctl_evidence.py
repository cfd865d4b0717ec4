"""``fleetctl evidence NODE RUN``: fetch a run's evidence bundle and check its digest.

The agent serves the bundle with the sha256 journaled when it was written; fleetctl writes
the file only when the bytes it received have that digest (exit 1 otherwise), so a copy on
an engineer's laptop is the bundle the run's page named.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Any

import click

from fleetd.cli.fleetctl_commands import _fleet, read
from fleetd.cli.fleetctl_context import Fail, fleet_options


@click.command("evidence")
@click.argument("node")
@click.argument("run_id")
@click.option(
    "--phase",
    type=click.Choice(["pre_reset", "failure", "quarantine"]),
    default=None,
    help="Which bundle (default: the run's newest).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write it (default: the bundle's own name in the current directory).",
)
@fleet_options
def evidence_command(
    node: str, run_id: str, phase: str | None, output: Path | None, **kw: Any
) -> None:
    """Fetch RUN_ID's evidence bundle from NODE (gzip'd JSON) and check its sha256."""
    fleet = _fleet(kw)
    data = read(fleet, node, f"/remediation/runs/{run_id}/evidence", phase=phase)
    try:
        raw = base64.b64decode(data["data"], validate=True)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise Fail(f"{node}: the agent's answer holds no bundle ({exc})") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != data.get("sha256"):
        raise Fail(
            f"{node}: bundle {data.get('name')} has sha256 {digest}, "
            f"not the journaled {data.get('sha256')}: not written"
        )
    target = output if output is not None else Path(Path(str(data["name"])).name)
    target.write_bytes(raw)
    fleet.echo(f"{target}  {len(raw)} bytes  sha256:{digest}  ({data['phase']}, run {run_id})")
