"""``fleetd rules check|test|export``: validate rule files, run their unit tests, export them.

Exit codes: 0 all good; 1 a rule file has problems (or, for ``check``, a warning: a rule
reads a metric fleetd never writes, so it can never fire) or a test failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fleetd.cli.problems import echo_problems, echo_warnings
from fleetd.errors import ConfigError
from fleetd.rules.config import shipped_rules_dir
from fleetd.rules.export import export_prometheus
from fleetd.rules.loader import RULE_FILE_SUFFIXES, check_rule_set, load_rule_set, rule_files
from fleetd.rules.ruletest import run_test_file

_PATHS = click.Path(path_type=Path)


@click.group()
def rules() -> None:
    """Check, test and export health rules."""


@rules.command("check")
@click.argument("paths", nargs=-1, required=True, type=_PATHS)
@click.option(
    "--shipped/--no-shipped",
    default=True,
    show_default=True,
    help="Check PATHS as local rules on top of the shipped packs (so overrides and "
    "`disable` names resolve), or on their own.",
)
def check(paths: tuple[Path, ...], shipped: bool) -> None:
    """Validate rule files (or directories of them); list every problem as file:line:col,
    and warn of every selector on a metric fleetd never writes (exit 1 on either)."""
    base = [shipped_rules_dir()] if shipped else []
    found = check_rule_set(base, list(paths))
    echo_problems(ConfigError(list(found.problems)))
    echo_warnings(found.warnings)
    if found.problems or found.warnings:
        click.echo(
            f"{len(found.problems)} problem(s), {len(found.warnings)} warning(s) found", err=True
        )
        sys.exit(1)
    assert found.rules is not None
    mine = [r for r in found.rules.rules if any(_within(r.source, p) for p in paths)]
    click.echo(f"OK: {len(rule_files(paths))} file(s), {len(mine)} rule(s)")


def _within(source: str, path: Path) -> bool:
    file = Path(source.rpartition(":")[0])
    return file == path or path in file.parents


@rules.command("test")
@click.argument("paths", nargs=-1, required=True, type=_PATHS)
def test(paths: tuple[Path, ...]) -> None:
    """Run rule unit-test files (or every *.yaml in the directories given)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in RULE_FILE_SUFFIXES))
        else:
            files.append(path)
    failed = passed = 0
    for file in files:
        try:
            results = run_test_file(file)
        except ConfigError as exc:
            echo_problems(exc)
            failed += 1
            continue
        for result in results:
            if result.passed:
                passed += 1
                click.echo(f"  PASS  {file}: {result.name}")
            else:
                failed += 1
                click.echo(f"  FAIL  {file}: {result.name}")
                for failure in result.failures:
                    click.echo("        " + failure.replace("\n", "\n        "))
    click.echo(f"{passed} passed, {failed} failed")
    if failed or not passed:
        sys.exit(1)


@rules.command("export")
@click.argument("paths", nargs=-1, type=_PATHS)
@click.option(
    "--format", "fmt", type=click.Choice(["prometheus"]), default="prometheus", show_default=True
)
@click.option("--output", "-o", type=_PATHS, default=None, help="Write here instead of stdout.")
@click.option("--group", default="fleetd", show_default=True, help="Prometheus rule group name.")
def export(paths: tuple[Path, ...], fmt: str, output: Path | None, group: str) -> None:
    """Write equivalent Prometheus alerting rules (default: the shipped packs)."""
    try:
        loaded = load_rule_set(list(paths) or [shipped_rules_dir()])
    except ConfigError as exc:
        echo_problems(exc)
        sys.exit(1)
    result = export_prometheus(loaded, group=group)
    for name, reason in result.skipped:
        click.echo(f"not exported: {name}: {reason}", err=True)
    if output is None:
        click.echo(result.text, nl=False)
    else:
        output.write_text(result.text, encoding="utf-8")
