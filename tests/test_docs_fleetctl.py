"""Every ``fleetctl …`` command the docs show exists, with the options it is shown with.

A runbook told the on-call to run ``fleetctl events --kind kernel_event``; there is no
``fleetctl events``. So every command shown in README.md and docs/ (runbooks included) — in a
fenced code block or an inline code span — is parsed and walked down fleetctl's real click
command tree: each subcommand must exist under its group and each option must be one of the
command's (a value-taking option's value is skipped). Placeholders (``NODE``, ``GPU``,
``[--physical]``, ``add|list|remove``, ``list/show``) are read as the docs mean them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from fleetd.cli.fleetctl_main import main as fleetctl

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_FENCE = re.compile(r"^\s*```")
_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_IN_LINE = re.compile(r"(?:^|&&|;|\|\||\||\$\()\s*(?:\$\s+)?(?:[A-Z_]+=\S+\s+)*(fleetctl\s)")
_STOP = {"|", "||", "&&", ";", ">", ">>", "2>&1", ")", "&"}
_HELP = {"-h", "--help"}


@dataclass(frozen=True)
class Shown:
    """One fleetctl command as a page shows it."""

    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def commands_in(page: Path, text: str | None = None) -> list[Shown]:
    """The fleetctl commands of a page: lines of fenced code blocks (continuations joined)
    and inline code spans that start with ``fleetctl``."""
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Shown] = []
    in_fence = False
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            pending = None
            continue
        if in_fence:
            start, joined = pending if pending is not None else (number, "")
            joined += line.strip() if joined else line.rstrip()
            if joined.endswith("\\"):
                pending = (start, joined[:-1].rstrip() + " ")
                continue
            pending = None
            code = joined.split(" # ", 1)[0].strip()
            for match in _IN_LINE.finditer(code):  # each command of a pipeline or a list
                found.append(Shown(name, start, code[match.start(1) :].strip()))
            continue
        for span in _SPAN.finditer(line):
            code = span.group(1).strip().removeprefix("$ ").strip()
            if code.startswith("fleetctl "):
                # a table cell escapes "|": there, `a \| b` shows alternatives
                found.append(Shown(name, number, code.replace("\\|", "|")))
    return found


def _tokens(text: str) -> list[str]:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in an elided example: plain words
        words = text.split()
    out = []
    rest = words[1:]  # after "fleetctl"
    for i, word in enumerate(rest):
        if word == "|" and i + 1 < len(rest) and rest[i + 1].startswith("-"):
            continue  # `report NODE… | --inventory | --db`: alternatives, not a pipe
        if word in _STOP or word.startswith("#"):
            break
        out.append(word)
    return out


def _options(command: click.Command) -> dict[str, bool]:
    """Each option name of ``command``: whether it takes a value."""
    out = dict.fromkeys(_HELP, False)
    for param in command.params:
        if isinstance(param, click.Option):
            takes = not (param.is_flag or param.count)
            for opt in (*param.opts, *param.secondary_opts):
                out[opt] = takes
    return out


def problems(shown: Shown, root: click.Group = fleetctl) -> list[str]:
    """What is wrong with one shown command against fleetctl's command tree."""
    command: click.Command = root
    path = ["fleetctl"]
    words = iter(_tokens(shown.text))
    out = []
    for raw in words:
        word = raw.strip("[]").rstrip(",.")
        if not word or word in {"…", "..."}:
            continue
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            options = _options(command)
            if name not in options:
                out.append(f"{shown}: {' '.join(path)} has no option {name}")
            elif options[name] and "=" not in word and not raw.endswith("]"):
                next(words, None)  # the option's value
            continue
        if isinstance(command, click.Group):
            names = [n for n in re.split(r"[|/]", word) if n and n not in {"…", "..."}]
            unknown = [n for n in names if n not in command.commands]
            if unknown:
                subs = ", ".join(sorted(command.commands))
                out.append(
                    f"{shown}: {' '.join(path)} has no subcommand {', '.join(unknown)} "
                    f"(it has: {subs})"
                )
                break
            if len(names) > 1:  # alternatives: each exists, nothing after them to walk
                break
            command = command.commands[names[0]]
            path.append(names[0])
        # else: a positional argument (NODE, GPU, a value): not checked
    return out


REFERENCE = ROOT / "docs" / "fleetctl.md"


def reference_commands(page: Path = REFERENCE, text: str | None = None) -> list[Shown]:
    """The command table of docs/fleetctl.md: its first column shows commands without the
    word ``fleetctl`` (``status [NODE]``); a span that names no top-level command continues
    the group of the one before it in the cell (``remediation cancel …``, ``pause NODE …``)."""
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith("| `"):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1]
        group = ""
        for span in _SPAN.finditer(cell):
            code = span.group(1).strip().replace("\\|", "|")
            first = code.split()[0]
            if first in fleetctl.commands:
                group = first
            elif group:
                code = f"{group} {code}"
            found.append(Shown(name, number, f"fleetctl {code}"))
    return found


ALL = [shown for page in PAGES for shown in commands_in(page)]


def test_the_docs_show_many_fleetctl_commands() -> None:  # the check below is not vacuous
    assert len(ALL) > 100
    runbooks = {s.page for s in ALL if s.page.startswith("docs/runbooks/")}
    assert len(runbooks) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fleetctl_command_shown_exists_with_its_options(page: Path) -> None:
    found = [problem for shown in commands_in(page) for problem in problems(shown)]
    assert found == []


def test_the_command_reference_table_lists_real_commands_and_options() -> None:
    shown = reference_commands()
    assert len(shown) > 25
    assert {s.text.split()[1] for s in shown} == set(fleetctl.commands)  # every command listed
    assert [problem for s in shown for problem in problems(s)] == []


def test_a_wrong_command_in_the_reference_table_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "fleetctl.md"
    table = (
        "| command | what |\n|---|---|\n"
        "| `remediation cancel NODE RUN -r WHY`, `pause NODE -r WHY`, `stop NODE` | |\n"
        "| `history NODE [GPU] [--kind K]` | |\n"
    )
    found = [p for s in reference_commands(page, table) for p in problems(s)]
    assert len(found) == 2, found
    assert "fleetctl remediation has no subcommand stop" in found[0]
    assert "fleetctl history has no option --kind" in found[1]


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        (
            "1. `fleetctl events --kind kernel_event` — the ring.",
            "page.md:1: fleetctl events --kind kernel_event: fleetctl has no subcommand events",
        ),
        (
            "x\n```sh\nfleetctl history NODE GPU \\\n  --kind kernel_event\n```",
            "page.md:3: fleetctl history NODE GPU --kind kernel_event: "
            "fleetctl history has no option --kind",
        ),
        (
            "| a | `fleetctl remediation cap add\\|lst` |",
            "fleetctl remediation cap has no subcommand lst",
        ),
        ("`fleetctl remediation list/shw`", "fleetctl remediation has no subcommand shw"),
        ("`fleetctl rma list NODE [--physcal]`", "fleetctl rma list has no option --physcal"),
        ("```\n$ fleetctl status --db URL | jq . && fleetctl stauts\n```", "no subcommand stauts"),
    ],
)
def test_a_command_or_option_that_does_not_exist_is_caught(
    markdown: str, expected: str, tmp_path: Path
) -> None:
    page = tmp_path / "page.md"
    found = [p for shown in commands_in(page, markdown) for p in problems(shown)]
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize(
    "markdown",
    [
        '`fleetctl silence add --fleet -n \'cluster="eu1"\' \'gpu="3"\' -r x --db "$DB"`',
        "`fleetctl report NODE… \\| --inventory \\| --db`",
        "`fleetctl remediation cap add|list|remove`",
        "`fleetctl rma list NODE [--physical] [--json]`",
        "`fleetctl evidence NODE RUN [--phase P] [-o FILE]`",
        "```\nFLEETCTL_DB=x fleetctl status --watch  # every node\n```",
        "`fleetctl remediation` and `fleetctl --version`; prose: fleetctl events are not code",
    ],
)
def test_real_commands_and_placeholders_pass(markdown: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    shown = commands_in(page, markdown)
    assert shown
    assert [p for s in shown for p in problems(s)] == []
