"""Write the man pages of ``fleetd`` and ``fleetctl`` (roff) from their click commands.

scripts/build-deb.sh runs it with the package's own interpreter, so the page lists exactly
the commands, arguments and options of the version being packaged; nothing to keep in step
by hand. Usage: ``manpage.py DIRECTORY`` writes ``fleetd.1`` and ``fleetctl.1`` there
(SOURCE_DATE_EPOCH dates the pages).
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from collections.abc import Iterator

import click

from fleetd import __version__
from fleetd.cli.fleetctl_main import main as fleetctl_main
from fleetd.cli.fleetd_main import main as fleetd_main

PROGRAMS: dict[str, click.Group] = {"fleetd": fleetd_main, "fleetctl": fleetctl_main}

FILES: dict[str, list[tuple[str, str]]] = {
    "fleetd": [
        ("/etc/fleetd/fleetd.yaml", "the configuration (a conffile; remediation.mode: dry-run)"),
        ("/etc/fleetd/rules.d/", "site rules (rules.local_dir)"),
        ("/etc/fleetd/secrets/", "secret files named by the *_file keys, mode 0600"),
        ("/var/lib/fleetd/", "the state database fleetd.db and what the node remembers"),
        ("/lib/systemd/system/fleetd.service", "the unit (Type=notify, watchdog)"),
        ("/usr/lib/fleetd/venv/", "fleetd's own Python environment"),
    ],
    "fleetctl": [
        ("$FLEETCTL_INVENTORY", "the inventory file, as --inventory"),
        ("$FLEETCTL_DB", "the fleet registry's URL, as --db"),
    ],
}
SEE_ALSO = {
    "fleetd": r"\fBfleetctl\fR(1), \fBsystemctl\fR(1), \fBjournalctl\fR(1)",
    "fleetctl": r"\fBfleetd\fR(1)",
}
DOCS = "/usr/share/doc/fleetd/README.md and /usr/share/doc/fleetd/docs/"


def escape(text: str) -> str:
    """Text for roff: backslashes and hyphens escaped, no line read as a request."""
    text = text.replace("\\", r"\e").replace("-", r"\-")
    return "\n".join(r"\&" + ln if ln.startswith((".", "'")) else ln for ln in text.splitlines())


def paragraphs(help_text: str) -> Iterator[str]:
    """click help text as roff paragraphs; a ``\\b`` paragraph keeps its lines as written."""
    for block in inspect.cleandoc(help_text).split("\n\n"):
        if block.startswith("\b\n"):
            yield ".PP\n.nf\n" + escape(block[2:]) + "\n.fi"
        elif block.strip():
            yield ".PP\n" + escape(" ".join(block.split()))


def leaves(ctx: click.Context) -> Iterator[click.Context]:
    """Every runnable command under ``ctx``, depth first, in the order --help lists them."""
    command = ctx.command
    if not isinstance(command, click.Group):
        yield ctx
        return
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            yield from leaves(click.Context(sub, info_name=name, parent=ctx))


def command_section(ctx: click.Context) -> str:
    command = ctx.command
    usage = " ".join(command.collect_usage_pieces(ctx))
    out = [f".SS {escape(ctx.command_path)}", f"\\fB{escape(ctx.command_path)}\\fR {escape(usage)}"]
    out += paragraphs(command.help or command.short_help or "")
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or "--help" in param.opts or not record[1].strip():
            continue  # --help on every command; arguments are in the usage line
        names, text = record
        out += [".TP", f"\\fB{escape(names)}\\fR", escape(" ".join(text.split()))]
    return "\n".join(out)


def manpage(name: str) -> str:
    group = PROGRAMS[name]
    ctx = click.Context(group, info_name=name)
    date = time.strftime("%Y-%m-%d", time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "0"))))
    summary = (group.help or "").strip().splitlines()[0].split("—", 1)[-1].strip()
    out = [
        f'.TH {name.upper()} 1 "{date}" "fleetd {__version__}" "fleetd"',
        ".SH NAME",
        f"{name} \\- {escape(summary)}",
        ".SH SYNOPSIS",
        f"\\fB{name}\\fR [\\fB\\-\\-version\\fR] [\\fB\\-h\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
        *list(paragraphs(group.help or ""))[1:],
        ".PP",
        f"Every command takes \\fB\\-h\\fR. The full documentation: {escape(DOCS)}",
        ".SH COMMANDS",
        *(command_section(leaf) for leaf in leaves(ctx)),
        ".SH FILES",
    ]
    for path, what in FILES[name]:
        out += [".TP", f"\\fI{escape(path)}\\fR", escape(what)]
    out += [".SH SEE ALSO", SEE_ALSO[name]]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(f"usage: {sys.argv[0]} DIRECTORY (writes {', '.join(PROGRAMS)}.1 there)")
    for program in PROGRAMS:  # in one process: importing fleetd is most of the cost
        with open(os.path.join(sys.argv[1], f"{program}.1"), "w", encoding="utf-8") as page:
            page.write(manpage(program))
