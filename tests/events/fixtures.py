"""Read the kernel log fixtures: blocks of real lines with their source and expected events."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
_STAMPS = (
    # dmesg: "[ 8390.785329] ", "[  +0.000001] ", with the caller id: "[  155.1][  T725] "
    re.compile(r"^\[\s*[+\d.]+\](?:\[\s*[TC]\d+\])? "),
    re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [^\]]+\] "),  # dmesg -T
    re.compile(r"^\S+ +\d+ \d\d:\d\d:\d\d (?:\S+ )?kernel: "),  # syslog / journalctl short
    re.compile(r"^\d{4}-\d\d-\d\dT\S+ \S+ kernel: "),  # journalctl -o short-iso
)
_PAIR = re.compile(r"(\w+)=(.*?)(?= \w+=|$)")


@dataclass
class Block:
    file: str
    line: int
    source: str = ""
    gpus: list[str] = field(default_factory=list)
    expect: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}"


def strip_stamp(line: str) -> str:
    """The kernel message without the dmesg/syslog/journal prefixes a report quoted."""
    line = line.lstrip(" ")  # a report's indentation of the lines it quoted
    for _ in range(2):
        for pattern in _STAMPS:
            line = pattern.sub("", line, count=1)
    return line


def load_blocks() -> list[Block]:
    blocks: list[Block] = []
    for path in sorted(FIXTURES.glob("*.log")):
        current: Block | None = None
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip():
                current = None
                continue
            if raw.startswith("#"):
                if current is None or current.lines:
                    current = Block(path.name, number)
                    blocks.append(current)
                _directive(current, raw[1:].strip())
                continue
            if current is None:
                raise AssertionError(f"{path.name}:{number}: a log line without a # source")
            current.lines.append(raw)
    return blocks


def _directive(block: Block, text: str) -> None:
    name, _, value = text.partition(":")
    value = value.strip()
    if name == "source":
        block.source = value
    elif name == "gpus":
        block.gpus = value.split()
    elif name == "expect":
        kind, _, rest = value.partition(" ")
        if kind != "none":
            block.expect.append((kind, {k: v for k, v in _PAIR.findall(rest)}))
    elif name == "counts":
        block.counts = {k: int(v) for k, v in _PAIR.findall(value)}
    else:
        raise AssertionError(f"{block.name}: unknown directive {name!r}")
