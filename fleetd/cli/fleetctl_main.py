"""``fleetctl``: the SRE's view of the fleet (status, alerts, silences, drain, explain)."""

from __future__ import annotations

import click

from fleetd import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetctl")
def main() -> None:
    """fleetctl — see and act on a fleet of fleetd agents."""
