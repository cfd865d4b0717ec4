"""``fleetd``: run the daemon, the demo, and the config and rules checks.

Subcommand groups live in their own modules and are attached here by name: a module is
imported only when its command is looked up (``fleetd run`` loads neither the rules test
runner nor the config reference nor the demo; docs/performance.md, footprint). ``--help``
looks every command up, so it lists them all as before.
"""

from __future__ import annotations

import importlib

import click

from fleetd import __version__

# command name → (module under fleetd.cli, the click command's name in it)
_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "config": ("config_cmd", "config"),
    "demo": ("demo_cmd", "demo"),
    "doctor": ("doctor_cmd", "doctor"),
    "rules": ("rules_cmd", "rules"),
    "run": ("run_cmd", "run"),
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first look-up, then kept like added ones."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _SUBCOMMANDS:
            module, attribute = _SUBCOMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"fleetd.cli.{module}"), attribute)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fleetd")
def main() -> None:
    """fleetd — health daemon for AMD Instinct GPU nodes serving vLLM."""
