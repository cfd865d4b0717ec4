"""``fleetd config check PATH``: validate fleetd.yaml (and the rule files it names) and
report every problem at once."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems, echo_warnings
from fleetd.config import load_config
from fleetd.errors import ConfigError


@click.group()
def config() -> None:
    """Inspect and check configuration files."""


@config.command("check")
@click.argument("path", type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Validate PATH and the rule files it names (shipped packs, extra packs, the local rule
    directory); exit 1 and list every problem as file:line:col: key: message, those of the
    file and of the rules together, and every rule that reads a metric fleetd never writes.

    When PATH itself is wrong, the rule files its ``rules:`` section names are still checked;
    when that section cannot be read, the shipped packs are, and it says so."""
    from fleetd.rules.config import check_rules, rules_to_check

    problems = []
    config = None
    try:
        config = load_config(path)
    except ConfigError as exc:
        problems += exc.problems
    rules_config, note = rules_to_check(path, None if config is None else config.rules)
    found = check_rules(rules_config)
    problems += found.problems
    echo_problems(ConfigError(problems))
    echo_warnings(found.warnings)
    if note:
        click.echo(f"{path}: {note}", err=True)
    if problems or found.warnings:
        click.echo(
            f"{path}: {len(problems)} problem(s), {len(found.warnings)} warning(s)", err=True
        )
        sys.exit(1)
    assert found.rules is not None
    click.echo(f"{path}: OK ({len(found.rules)} rules)")


@config.command("reference")
def reference() -> None:
    """Print the fleetd.yaml reference (Markdown) generated from the schema."""
    from fleetd.configdoc import reference_markdown

    click.echo(reference_markdown(), nl=False)
