"""``fleetd``: run the daemon, the demo, and the config and rules checks.

Subcommand groups live in their own modules and are attached here.
"""

from __future__ import annotations

import click

from fleetd import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetd")
def main() -> None:
    """fleetd — health daemon for AMD Instinct GPU nodes serving vLLM."""


def _attach_subcommands() -> None:
    from fleetd.cli import config_cmd, demo_cmd, doctor_cmd, rules_cmd, run_cmd

    main.add_command(config_cmd.config)
    main.add_command(rules_cmd.rules)
    main.add_command(run_cmd.run)
    main.add_command(demo_cmd.demo)
    main.add_command(doctor_cmd.doctor)


_attach_subcommands()
