"""``fleetd config check PATH``: validate fleetd.yaml (and the rule files it names) and
report every problem at once."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems
from fleetd.config import load_config
from fleetd.errors import ConfigError


@click.group()
def config() -> None:
    """Inspect and check configuration files."""


@config.command("check")
@click.argument("path", type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Validate PATH and the rule files it names (shipped packs, extra packs, the local rule
    directory); exit 1 and list every problem as file:line:col: key: message."""
    from fleetd.rules.config import load_rules

    try:
        config = load_config(path)
        rules = load_rules(config.rules)
    except ConfigError as exc:
        echo_problems(exc)
        sys.exit(1)
    click.echo(f"{path}: OK ({len(rules)} rules)")


@config.command("reference")
def reference() -> None:
    """Print the fleetd.yaml reference (Markdown) generated from the schema."""
    from fleetd.configdoc import reference_markdown

    click.echo(reference_markdown(), nl=False)
