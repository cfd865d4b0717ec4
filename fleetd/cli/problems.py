"""How the ``fleetd`` commands show a configuration or rules file that failed to load."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import click

from fleetd.errors import ConfigError
from fleetd.rules.loader import UnknownMetric


def echo_problems(exc: ConfigError) -> None:
    """Every problem ``exc`` holds on stderr, one a line (``file:line:col: message``)."""
    for problem in exc.problems:
        click.echo(str(problem), err=True)


def echo_warnings(unknown: Iterable[UnknownMetric]) -> None:
    """Every rule selector on a metric fleetd never writes, on stderr, one a line
    (``file:line:col: key: message``, the message saying the rule can never fire)."""
    for item in unknown:
        click.echo(str(replace(item.where, message="warning: " + item.where.message)), err=True)
