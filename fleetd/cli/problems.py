"""How the ``fleetd`` commands show a configuration or rules file that failed to load."""

from __future__ import annotations

import click

from fleetd.errors import ConfigError


def echo_problems(exc: ConfigError) -> None:
    """Every problem ``exc`` holds on stderr, one a line (``file:line:col: message``)."""
    for problem in exc.problems:
        click.echo(str(problem), err=True)
